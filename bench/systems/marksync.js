// marksync: the hidden __BenchDoc (one device's rows in memory; edits are ops
// merged by the one merge) for workloads 1-2; the real client (IndexedDB) for 3-4.
import * as pkg from '../../www/pkg/marksync.js';
import { Marksync, load } from '../../www/index.js';

export const ready = load();

function BenchDoc() {
  const C = pkg.__BenchDoc;
  if (!C) throw new Error('www/pkg/marksync.js has no __BenchDoc export yet (rebuild www/pkg)');
  return C;
}

const openDb = (name) => Marksync.open({ endpoint: location.origin, token: 'dev:bench', name, autoSync: false, persist: false });

export const w1 = {
  replicas: (n) => Array.from({ length: n }, (_, i) => new (BenchDoc())(`dev${i + 1}`)),
  apply(d, keys, vals) {
    for (let j = 0; j < keys.length; j++) d.set('m', keys[j], vals[j]);
  },
  exportUpdate: (d) => d.exportOps(),
  fresh: () => new (BenchDoc())('merge'),
  importAll(doc, updates) {
    for (const u of updates) doc.importOps(u);
    return doc;
  },
  // "merge states": what a pulling device receives (rows with marks, no history).
  exportState: (d) => d.exportState(),
  importStates(doc, states) {
    for (const s of states) doc.importState(s);
    return doc;
  },
  toMap(doc, keys) {
    const o = {};
    for (const k of keys) {
      const v = doc.get('m', k);
      if (v !== undefined) o[k] = v;
    }
    return o;
  },
  free: (d) => d.free(),
};

export const w2 = {
  setup: () => ({ doc: new (BenchDoc())('dev1') }),
  apply(ctx, rowIds, fields, rowIdx, fieldIdx, vals) {
    const d = ctx.doc;
    for (let i = 0; i < rowIdx.length; i++) d.set(rowIds[rowIdx[i]], fields[fieldIdx[i]], vals[i]);
  },
  snapshot: (ctx) => ctx.doc.exportState(),
  load(bytes) {
    const d = new (BenchDoc())('dev2');
    d.importState(bytes);
    return d;
  },
  readAll(d, rowIds, fields) {
    const out = {};
    for (const id of rowIds) {
      const row = {};
      let any = false;
      for (const f of fields) {
        const v = d.get(id, f);
        if (v !== undefined) { row[f] = v; any = true; }
      }
      if (any) out[id] = row;
    }
    return out;
  },
  free: (x) => (x.doc ?? x).free(),
};

export const w3 = {
  open: async (name) => ({ db: await openDb(name) }),
  async one(ctx, i) {
    await ctx.db.change('sets', ctx.db.newRowId(), { exercise: 'squat', weightKg: 80, reps: i });
  },
  // As index.d.ts advises for many new rows at once: name them yourself
  // (newRowId() hands out a reserved block and throws when it runs dry without an await).
  prepareBulk(ctx, n) {
    if (typeof ctx.db.changeMany !== 'function') return null;
    const dev = ctx.db.deviceId;
    return Array.from({ length: n }, (_, i) => ({ table: 'sets', rowId: `${dev}-bulk-${i}`, fields: { exercise: 'squat', weightKg: 80, reps: i } }));
  },
  async bulk(ctx, edits) {
    await ctx.db.changeMany(edits);
  },
  async count(ctx) { return ctx.db.rows('sets').length; },
  close: (ctx) => ctx.db.close(),
};

export const w4 = {
  note: 'IndexedDB seeded by __seedDatabase (the rows as base rows in compacted chunks + 1,000 pending ops on new rows); Marksync.open until db.rows("sets") has them all',
  extraRows: 1000,
  seed: (name, n) => pkg.__seedDatabase(name, n, 1000),
  async open(name, mark) {
    const db = await openDb(name);
    mark();
    const rows = db.rows('sets');
    return { n: rows.length, close: () => db.close(), keep: rows };
  },
};

// Workload 6: an indexed query and a live query over rows already on the device.
const Q6 = (ex) => ({ where: { exercise: ex }, orderBy: ['at', 'desc'], limit: 50 });
export const w6 = {
  note: 'rows seeded by __seedQueryRows (base rows in compacted chunks); index [exercise, at] declared at open; db.query / db.watch',
  seed: (name, n) => pkg.__seedQueryRows(name, n),
  open: (name) => Marksync.open({ endpoint: location.origin, token: 'dev:bench', name, autoSync: false, persist: false, live: false, indexes: { sets: [['exercise', 'at']] } }),
  query: (db, ex) => db.query('sets', Q6(ex)),
  watch: (db, ex, cb) => db.watch('sets', Q6(ex), cb),
  write: (db, id, ex, at) => db.change('sets', id, { exercise: ex, weightKg: 1, at }),
  idOf: (row) => row._id,
  close: (db) => db.close(),
};
