// Yjs (pure JS). Every map set outside doc.transact is its own transaction, as an app's edits are.
import * as Y from 'yjs';
import { seedBlob, readBlob } from './blob.js';

export const ready = Promise.resolve();

export const w1 = {
  replicas: (n) => Array.from({ length: n }, (_, i) => {
    const d = new Y.Doc();
    d.clientID = i + 1;
    return d;
  }),
  apply(d, keys, vals) {
    const m = d.getMap('m');
    for (let j = 0; j < keys.length; j++) m.set(keys[j], vals[j]);
  },
  exportUpdate: (d) => Y.encodeStateAsUpdate(d),
  fresh: () => new Y.Doc(),
  importAll(doc, updates) {
    for (const u of updates) Y.applyUpdate(doc, u);
    return doc;
  },
  toMap: (doc) => doc.getMap('m').toJSON(),
  free: (d) => d.destroy(),
};

export const w2 = {
  setup(rowIds) {
    const doc = new Y.Doc();
    doc.clientID = 1;
    const root = doc.getMap('rows');
    const handles = [];
    doc.transact(() => {
      for (const id of rowIds) {
        const m = new Y.Map();
        root.set(id, m);
        handles.push(m);
      }
    });
    return { doc, handles };
  },
  apply(ctx, rowIds, fields, rowIdx, fieldIdx, vals) {
    const h = ctx.handles;
    for (let i = 0; i < rowIdx.length; i++) h[rowIdx[i]].set(fields[fieldIdx[i]], vals[i]);
  },
  snapshot: (ctx) => Y.encodeStateAsUpdate(ctx.doc),
  load(bytes) {
    const doc = new Y.Doc();
    Y.applyUpdate(doc, bytes);
    return doc;
  },
  readAll: (doc) => doc.getMap('rows').toJSON(),
  free: (x) => (x.doc ?? x).destroy(),
};

function build(n) {
  const doc = new Y.Doc();
  doc.clientID = 1;
  const root = doc.getMap('sets');
  doc.transact(() => {
    for (let i = 0; i < n; i++) {
      const m = new Y.Map();
      root.set(`r${i}`, m);
      m.set('exercise', 'squat');
      m.set('weightKg', 80);
      m.set('reps', 5);
    }
  });
  const bytes = Y.encodeStateAsUpdate(doc);
  doc.destroy();
  return bytes;
}

export const w4 = {
  note: 'one update (encodeStateAsUpdate) stored as one IndexedDB value; open = read it + applyUpdate into a new Y.Doc + getMap("sets").toJSON()',
  seed: (name, n) => seedBlob(name, build(n)),
  async open(name, mark) {
    const bytes = await readBlob(name);
    const doc = new Y.Doc();
    Y.applyUpdate(doc, bytes);
    mark();
    const rows = doc.getMap('sets').toJSON();
    return { n: Object.keys(rows).length, close: () => doc.destroy(), keep: rows };
  },
};
