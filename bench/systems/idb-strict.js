// Raw IndexedDB with { durability: 'strict' } on every write transaction (flushed
// to disk before complete fires), beside the default durability of idb.js.
import { writes } from './idb.js';

export const ready = Promise.resolve();
export const w3 = writes({ durability: 'strict' });
