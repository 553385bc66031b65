// Automerge (the /slim entry + the wasm by URL: no Vite plugin). Sets are
// batched into changes (workload 1: 100 sets a change; workload 2: 1000 edits a
// change): one change per set would cost Automerge far more.
import * as A from '@automerge/automerge/slim';
import wasmUrl from '@automerge/automerge/automerge.wasm?url';
import { seedBlob, readBlob } from './blob.js';

export const ready = A.initializeWasm(wasmUrl);

const actor = (i) => i.toString(16).padStart(32, '0');
export const W1_BATCH = 100;
export const W2_BATCH = 1000;

export const w1 = {
  replicas(n) {
    // One document with a map "m", cloned per replica (each its own actor).
    const base = A.from({ m: {} }, { actor: actor(0xbace) });
    return Array.from({ length: n }, (_, i) => ({ doc: A.clone(base, { actor: actor(i + 1) }) }));
  },
  apply(rep, keys, vals) {
    let doc = rep.doc;
    for (let s = 0; s < keys.length; s += W1_BATCH) {
      const e = Math.min(keys.length, s + W1_BATCH);
      doc = A.change(doc, (d) => {
        for (let j = s; j < e; j++) d.m[keys[j]] = vals[j];
      });
    }
    rep.doc = doc;
  },
  exportUpdate: (rep) => A.save(rep.doc),
  fresh: () => ({ doc: A.init() }),
  importAll(target, updates) {
    let doc = target.doc;
    for (const u of updates) doc = A.loadIncremental(doc, u);
    target.doc = doc;
    return target;
  },
  toMap: (t) => A.toJS(t.doc).m ?? {},
  free: (t) => A.free(t.doc),
};

export const w2 = {
  setup(rowIds) {
    return { doc: A.from({ rows: Object.fromEntries(rowIds.map((id) => [id, {}])) }, { actor: actor(1) }) };
  },
  apply(ctx, rowIds, fields, rowIdx, fieldIdx, vals) {
    let doc = ctx.doc;
    for (let s = 0; s < rowIdx.length; s += W2_BATCH) {
      const e = Math.min(rowIdx.length, s + W2_BATCH);
      doc = A.change(doc, (d) => {
        const rows = d.rows;
        for (let i = s; i < e; i++) rows[rowIds[rowIdx[i]]][fields[fieldIdx[i]]] = vals[i];
      });
    }
    ctx.doc = doc;
  },
  snapshot: (ctx) => A.save(ctx.doc),
  load: (bytes) => ({ doc: A.load(bytes) }),
  readAll: (x) => A.toJS(x.doc).rows,
  free: (x) => A.free(x.doc),
};

function build(n) {
  const sets = {};
  for (let i = 0; i < n; i++) sets[`r${i}`] = { exercise: 'squat', weightKg: 80, reps: 5 };
  const doc = A.from({ sets }, { actor: actor(1) });
  const bytes = A.save(doc);
  A.free(doc);
  return bytes;
}

export const w4 = {
  note: 'one document (save) stored as one IndexedDB value; open = read it + load + toJS(doc).sets',
  seed: (name, n) => seedBlob(name, build(n)),
  async open(name, mark) {
    const bytes = await readBlob(name);
    const doc = A.load(bytes);
    mark();
    const rows = A.toJS(doc).sets;
    return { n: Object.keys(rows).length, close: () => A.free(doc), keep: rows };
  },
};
