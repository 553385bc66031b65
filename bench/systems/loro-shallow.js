// Loro, workload 2 with a shallow snapshot (the current state without the
// history, like marksync's rows with marks) instead of a full snapshot.
import { LoroDoc } from 'loro-crdt/web';
import { ready, w2 as full } from './loro.js';

export { ready };
export const w2 = {
  ...full,
  snapshot: (ctx) => ctx.doc.export({ mode: 'shallow-snapshot', frontiers: ctx.doc.oplogFrontiers() }),
  load: (bytes) => LoroDoc.fromSnapshot(bytes),
};
