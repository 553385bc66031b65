// Raw IndexedDB: one object store "sets" (keyPath id), default durability
// (idb-strict: the same with { durability: 'strict' } on the write transactions).
import { idbOpen, done } from './blob.js';

export const ready = Promise.resolve();

const upgrade = (db) => db.createObjectStore('sets', { keyPath: 'id' });
const row = (id, reps) => ({ id, exercise: 'squat', weightKg: 80, reps });

/** Workload 3 with these transaction options on the writes. */
export const writes = (opts) => ({
  open: async (name) => ({ db: await idbOpen(name, upgrade), next: 0 }),
  async one(ctx, i) {
    const tx = ctx.db.transaction('sets', 'readwrite', opts);
    tx.objectStore('sets').put(row(`s${ctx.next++}`, i));
    await done(tx);
  },
  prepareBulk: (ctx, n) => Array.from({ length: n }, (_, i) => row(`s${ctx.next++}`, i)),
  async bulk(ctx, objs) {
    const tx = ctx.db.transaction('sets', 'readwrite', opts);
    const s = tx.objectStore('sets');
    for (const o of objs) s.put(o);
    await done(tx);
  },
  async count(ctx) {
    const tx = ctx.db.transaction('sets', 'readonly');
    const r = tx.objectStore('sets').count();
    await done(tx);
    return r.result;
  },
  close: (ctx) => ctx.db.close(),
});

export const w3 = writes({});

export const w4 = {
  note: 'the rows in one object store; open = indexedDB.open + getAll()',
  async seed(name, n) {
    const db = await idbOpen(name, upgrade);
    const tx = db.transaction('sets', 'readwrite');
    const s = tx.objectStore('sets');
    for (let i = 0; i < n; i++) s.put(row(`r${i}`, 5));
    await done(tx);
    db.close();
  },
  async open(name, mark) {
    const db = await idbOpen(name, upgrade);
    mark();
    const tx = db.transaction('sets', 'readonly');
    const r = tx.objectStore('sets').getAll();
    await done(tx);
    return { n: r.result.length, close: () => db.close(), keep: r.result };
  },
};
