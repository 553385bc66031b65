// Dexie over IndexedDB: one table "sets" keyed by id.
import Dexie from 'dexie';

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
