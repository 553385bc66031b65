// Dexie over IndexedDB: one table "sets" keyed by id.
import Dexie, { liveQuery } from 'dexie';

export const ready = Promise.resolve();

async function openDb(name) {
  const db = new Dexie(name);
  db.version(1).stores({ sets: 'id' });
  await db.open();
  return db;
}

const row = (id, reps) => ({ id, exercise: 'squat', weightKg: 80, reps });

export const w3 = {
  open: async (name) => ({ db: await openDb(name), next: 0 }),
  async one(ctx, i) {
    await ctx.db.sets.put(row(`s${ctx.next++}`, i));
  },
  prepareBulk: (ctx, n) => Array.from({ length: n }, (_, i) => row(`s${ctx.next++}`, i)),
  async bulk(ctx, objs) {
    await ctx.db.sets.bulkPut(objs);
  },
  count: (ctx) => ctx.db.sets.count(),
  close: (ctx) => ctx.db.close(),
};

export const w4 = {
  note: 'the rows in a Dexie table; open = new Dexie + open() + sets.toArray()',
  async seed(name, n) {
    const db = await openDb(name);
    await db.sets.bulkPut(Array.from({ length: n }, (_, i) => row(`r${i}`, 5)));
    db.close();
  },
  async open(name, mark) {
    const db = await openDb(name);
    mark();
    const rows = await db.sets.toArray();
    return { n: rows.length, close: () => db.close(), keep: rows };
  },
};

// Workload 6: the same query on a compound index, and Dexie's liveQuery.
const openQ = async (name) => {
  const db = new Dexie(name);
  db.version(1).stores({ sets: 'id, [exercise+at]' });
  await db.open();
  return db;
};
const q6 = (db, ex) => db.sets.where('[exercise+at]').between([ex, Dexie.minKey], [ex, Dexie.maxKey]).reverse().limit(50).toArray();
export const w6 = {
  note: "Dexie table with a compound index [exercise+at]; where().between().reverse().limit(50); liveQuery",
  async seed(name, n) {
    const db = await openQ(name);
    for (let i = 0; i < n; i += 20_000) {
      const batch = [];
      for (let j = i; j < Math.min(n, i + 20_000); j++) batch.push({ id: `q${j}`, exercise: `ex${j % 50}`, weightKg: j % 300, at: j });
      await db.sets.bulkPut(batch);
    }
    db.close();
  },
  open: openQ,
  query: q6,
  watch(db, ex, cb) {
    const sub = liveQuery(() => q6(db, ex)).subscribe({ next: cb });
    return () => sub.unsubscribe();
  },
  write: (db, id, ex, at) => db.sets.put({ id, exercise: ex, weightKg: 1, at }),
  idOf: (row) => row.id,
  close: (db) => db.close(),
};
