// marksync opened lazily (`open({ lazy: true })`; workload 6 only): no chunk
// read at open, the indexes' entries kept on disk, and `query()` reads
// the index's entries and the rows they name (PROTOCOL §7, "Queries over
// indexes on disk"). The seed opens the database once so the store builds
// the entries (their one-time cost is the seed's, reported apart).
import * as pkg from '../../www/pkg/marksync.js';
import { Marksync, load } from '../../www/index.js';

export const ready = load();

const Q6 = (ex) => ({ where: { exercise: ex }, orderBy: ['at', 'desc'], limit: 50 });
const open = (name) => Marksync.open({
  endpoint: location.origin, token: 'dev:bench', name, autoSync: false, persist: false, live: false,
  indexes: { sets: [['exercise', 'at']] }, lazy: true,
});
export const w6 = {
  note: 'rows seeded by __seedQueryRows, then one open builds the index entries on disk; opened with lazy: true; db.query reads a page of entries with their rows; db.watch updates its answer from each step\'s rows when it can, else reads it again',
  async seed(name, n) {
    await pkg.__seedQueryRows(name, n);
    const t = performance.now();
    const db = await open(name);
    db.close();
    console.log(`entries built in ${Math.round(performance.now() - t)} ms`);
  },
  open,
  query: (db, ex) => db.query('sets', Q6(ex)),
  watch: (db, ex, cb) => db.watch('sets', Q6(ex), cb),
  write: (db, id, ex, at) => db.change('sets', id, { exercise: ex, weightKg: 1, at }),
  idOf: (row) => row._id,
  close: (db) => db.close(),
};
