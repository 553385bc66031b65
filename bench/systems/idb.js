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

// Workload 6: the same query on a raw IndexedDB index (no live query: raw IndexedDB has none).
const upgradeQ = (db) => db.createObjectStore('sets', { keyPath: 'id' }).createIndex('exercise_at', ['exercise', 'at']);
export const w6 = {
  note: "one object store with an index ['exercise', 'at']; openCursor(bound, 'prev'), 50 rows",
  async seed(name, n) {
    const db = await idbOpen(name, upgradeQ);
    for (let i = 0; i < n; i += 20_000) {
      const tx = db.transaction('sets', 'readwrite');
      const s = tx.objectStore('sets');
      for (let j = i; j < Math.min(n, i + 20_000); j++) s.put({ id: `q${j}`, exercise: `ex${j % 50}`, weightKg: j % 300, at: j });
      await done(tx);
    }
    db.close();
  },
  open: (name) => idbOpen(name, upgradeQ),
  query: (db, ex) => new Promise((resolve, reject) => {
    const out = [];
    const tx = db.transaction('sets', 'readonly');
    const r = tx.objectStore('sets').index('exercise_at').openCursor(IDBKeyRange.bound([ex, -Infinity], [ex, Infinity]), 'prev');
    r.onsuccess = () => {
      const c = r.result;
      if (!c || out.length === 50) return resolve(out);
      out.push(c.value);
      c.continue();
    };
    r.onerror = () => reject(r.error);
  }),
  idOf: (row) => row.id,
  close: (db) => db.close(),
};
