// Loro (loro-crdt/web: explicit async init, the wasm fetched by URL; no Vite plugin).
import initLoro, { LoroDoc, LoroMap } from 'loro-crdt/web';
import { seedBlob, readBlob } from './blob.js';

export const ready = initLoro();

export const w1 = {
  replicas: (n) => Array.from({ length: n }, (_, i) => {
    const d = new LoroDoc();
    d.setPeerId(i + 1);
    return d;
  }),
  apply(d, keys, vals) {
    const m = d.getMap('m');
    for (let j = 0; j < keys.length; j++) m.set(keys[j], vals[j]);
    d.commit();
  },
  exportUpdate: (d) => d.export({ mode: 'update' }),
  fresh: () => new LoroDoc(),
  importAll(doc, updates) {
    doc.importBatch(updates);
    return doc;
  },
  toMap: (doc) => doc.getMap('m').toJSON(),
  free: (d) => d.free(),
};

export const w2 = {
  setup(rowIds) {
    const doc = new LoroDoc();
    doc.setPeerId(1);
    const root = doc.getMap('rows');
    const handles = rowIds.map((id) => root.setContainer(id, new LoroMap()));
    doc.commit();
    return { doc, handles };
  },
  apply(ctx, rowIds, fields, rowIdx, fieldIdx, vals) {
    const h = ctx.handles;
    for (let i = 0; i < rowIdx.length; i++) h[rowIdx[i]].set(fields[fieldIdx[i]], vals[i]);
    ctx.doc.commit();
  },
  snapshot: (ctx) => ctx.doc.export({ mode: 'snapshot' }),
  load: (bytes) => LoroDoc.fromSnapshot(bytes),
  readAll: (doc) => doc.getMap('rows').toJSON(),
  free: (x) => (x.doc ?? x).free(),
};

function build(n) {
  const doc = new LoroDoc();
  doc.setPeerId(1);
  const root = doc.getMap('sets');
  for (let i = 0; i < n; i++) {
    const m = root.setContainer(`r${i}`, new LoroMap());
    m.set('exercise', 'squat');
    m.set('weightKg', 80);
    m.set('reps', 5);
  }
  doc.commit();
  const bytes = doc.export({ mode: 'snapshot' });
  doc.free();
  return bytes;
}

export const w4 = {
  note: 'one snapshot (export mode "snapshot") stored as one IndexedDB value; open = read it + LoroDoc.fromSnapshot + getMap("sets").toJSON()',
  seed: (name, n) => seedBlob(name, build(n)),
  async open(name, mark) {
    const bytes = await readBlob(name);
    const doc = LoroDoc.fromSnapshot(bytes);
    mark();
    const rows = doc.getMap('sets').toJSON();
    return { n: Object.keys(rows).length, close: () => doc.free(), keep: rows };
  },
};
