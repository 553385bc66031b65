// The benchmark page. Each workload is a function on `window` that the driver
// (run.mjs) calls with page.evaluate in a fresh page per (system, workload,
// round). Only the system under test is loaded into the page (dynamic import),
// so the wasm memories collected by index.html's wrapper are its own.
const systems = {
  marksync: () => import('./systems/marksync.js'),
  'marksync-disk': () => import('./systems/marksync-disk.js'),
  loro: () => import('./systems/loro.js'),
  'loro-shallow': () => import('./systems/loro-shallow.js'),
  yjs: () => import('./systems/yjs.js'),
  automerge: () => import('./systems/automerge.js'),
  dexie: () => import('./systems/dexie.js'),
  idb: () => import('./systems/idb.js'),
  'idb-strict': () => import('./systems/idb-strict.js'),
};

async function system(name) {
  const load = systems[name];
  if (!load) throw new Error(`unknown system ${name}`);
  const m = await load();
  await m.ready;
  return m;
}

/** A seeded PRNG (mulberry32): the same inputs for every system. */
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const now = () => performance.now();
const MB = (b) => Math.round((b / (1024 * 1024)) * 100) / 100;

/** JS heap after gc() + the sum of every wasm memory's buffer (bytes). */
function memory() {
  if (typeof gc === 'function') { gc(); gc(); }
  const heap = performance.memory ? performance.memory.usedJSHeapSize : NaN;
  const wasm = window.__wasmMemories.reduce((s, m) => s + m.buffer.byteLength, 0);
  return { heap, wasm };
}
/** Growth since `m0`, in MB: heap (after gc) + wasm memory growth (wasm memories never shrink: a high-water mark). */
function growth(m0) {
  const m1 = memory();
  return { memMB: MB(m1.heap - m0.heap + m1.wasm - m0.wasm), heapMB: MB(m1.heap - m0.heap), wasmMB: MB(m1.wasm - m0.wasm) };
}

async function gzipSize(bytes) {
  const s = new Blob([bytes]).stream().pipeThrough(new CompressionStream('gzip'));
  return (await new Response(s).arrayBuffer()).byteLength;
}

function sortKeys(o) {
  if (o === null || typeof o !== 'object') return o;
  return Object.fromEntries(Object.keys(o).sort().map((k) => [k, sortKeys(o[k])]));
}
const same = (a, b) => JSON.stringify(sortKeys(a)) === JSON.stringify(sortKeys(b));

function check(cond, msg) {
  if (!cond) throw new Error(`check failed: ${msg}`);
}

/**
 * Workload 1: concurrent map sets. `sets` sets of key = number spread over
 * `replicas` replicas (set i goes to replica i % R), keys drawn from `keys` keys.
 */
window.w1 = async (name, { sets, replicas: R, keys: K, seed }) => {
  const S = (await system(name)).w1;
  const rnd = prng(seed);
  const keyNames = Array.from({ length: K }, (_, i) => `k${i}`);
  const per = Array.from({ length: R }, () => ({ keys: [], vals: [] }));
  for (let i = 0; i < sets; i++) {
    const p = per[i % R];
    p.keys.push(keyNames[Math.floor(rnd() * K)]);
    p.vals.push(Math.floor(rnd() * 1e6));
  }
  const distinct = new Set(per.flatMap((p) => p.keys)).size;
  const m0 = memory();
  const reps = S.replicas(R); // setup, not timed
  let t = now();
  for (let r = 0; r < R; r++) S.apply(reps[r], per[r].keys, per[r].vals);
  const editMs = now() - t;

  t = now();
  const updates = reps.map((d) => S.exportUpdate(d));
  const exportMs = now() - t;
  t = now();
  const merged = S.importAll(S.fresh(), updates);
  const importMs = now() - t;
  const out = {
    editMs, exportMs, importMs, mergeMs: exportMs + importMs,
    updateBytes: updates.reduce((s, u) => s + u.byteLength, 0),
  };
  if (S.exportState) {
    t = now();
    const states = reps.map((d) => S.exportState(d));
    const stExportMs = now() - t;
    t = now();
    const fromStates = S.importStates(S.fresh(), states);
    const stImportMs = now() - t;
    Object.assign(out, {
      mergeStatesMs: stExportMs + stImportMs, statesImportMs: stImportMs,
      stateBytes: states.reduce((s, u) => s + u.byteLength, 0),
    });
    check(same(S.toMap(fromStates, keyNames), S.toMap(merged, keyNames)), `${name}: merging states differs from merging ops`);
    S.free(fromStates);
  }
  for (const d of reps) S.free(d);
  reps.length = 0;
  Object.assign(out, growth(m0)); // the merged doc alive, the replicas freed

  const forward = S.toMap(merged, keyNames);
  const reverse = S.importAll(S.fresh(), [...updates].reverse());
  const backward = S.toMap(reverse, keyNames);
  check(Object.keys(forward).length === distinct, `${name}: ${Object.keys(forward).length} keys after merge, expected ${distinct}`);
  check(same(forward, backward), `${name}: merging in reverse order gives another map`);
  S.free(reverse);
  S.free(merged);
  out.keys = distinct;
  return out;
};

const FIELDS = ['exercise', 'weightKg', 'reps'];

/** Workload 2: an editing trace of `edits` field sets over `rows` rows, on one replica. */
window.w2 = async (name, { edits, rows, seed }) => {
  const S = (await system(name)).w2;
  const rnd = prng(seed);
  const rowIds = Array.from({ length: rows }, (_, i) => `r${i}`);
  const rowIdx = new Uint32Array(edits);
  for (let i = 0; i < edits; i++) rowIdx[i] = i % rows;
  for (let i = edits - 1; i > 0; i--) {
    const j = Math.floor(rnd() * (i + 1));
    const x = rowIdx[i]; rowIdx[i] = rowIdx[j]; rowIdx[j] = x;
  }
  const fieldIdx = new Uint8Array(edits);
  const vals = new Array(edits);
  const expected = {};
  for (let i = 0; i < edits; i++) {
    fieldIdx[i] = Math.floor(rnd() * 3);
    vals[i] = Math.floor(rnd() * 1000);
    (expected[rowIds[rowIdx[i]]] ??= {})[FIELDS[fieldIdx[i]]] = vals[i];
  }
  const m0 = memory();
  const ctx = S.setup(rowIds); // the 1000 (nested) maps, not timed
  let t = now();
  S.apply(ctx, rowIds, FIELDS, rowIdx, fieldIdx, vals);
  const applyMs = now() - t;
  const mem = growth(m0);
  t = now();
  const snap = S.snapshot(ctx);
  const encodeMs = now() - t;
  t = now();
  const loaded = S.load(snap);
  const loadMs = now() - t;
  t = now();
  const plain = S.readAll(loaded, rowIds, FIELDS);
  const readMs = now() - t;
  check(same(plain, expected), `${name}: the loaded snapshot differs from the trace's final state`);
  const out = {
    applyMs, encodeMs, loadMs, readMs, decodeMs: loadMs + readMs,
    snapshotBytes: snap.byteLength, snapshotGzipBytes: await gzipSize(snap), ...mem,
  };
  S.free(loaded);
  S.free(ctx);
  return out;
};

function pct(xs, p) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(s.length * p))];
}

async function deleteDatabases() {
  if (!indexedDB.databases) return;
  for (const { name } of await indexedDB.databases()) {
    await new Promise((resolve) => {
      const r = indexedDB.deleteDatabase(name);
      r.onsuccess = r.onerror = r.onblocked = () => resolve();
    });
  }
}
window.deleteDatabases = deleteDatabases;

/** Workload 3: `n` durable local writes, (a) each awaited, (b) in bulk; a fresh database each. */
window.w3 = async (name, { n, tag }) => {
  const S = (await system(name)).w3;
  const out = {};
  {
    const ctx = await S.open(`w3one-${name}-${tag}`);
    const lat = new Float64Array(n);
    const t0 = now();
    for (let i = 0; i < n; i++) {
      const t = now();
      await S.one(ctx, i);
      lat[i] = now() - t;
    }
    out.oneTotalMs = now() - t0;
    out.oneP50Ms = pct(lat, 0.5);
    out.oneP99Ms = pct(lat, 0.99);
    out.oneMeanMs = out.oneTotalMs / n;
    check((await S.count(ctx)) === n, `${name}: ${await S.count(ctx)} rows after ${n} writes`);
    S.close(ctx);
  }
  {
    const ctx = await S.open(`w3bulk-${name}-${tag}`);
    const batch = await S.prepareBulk(ctx, n);
    if (batch === null) {
      out.bulkNote = 'no bulk API (changeMany missing)';
    } else {
      const t = now();
      await S.bulk(ctx, batch);
      out.bulkMs = now() - t;
      check((await S.count(ctx)) === n, `${name}: ${await S.count(ctx)} rows after a bulk of ${n}`);
    }
    S.close(ctx);
  }
  await deleteDatabases();
  return out;
};

/** Workload 4, step 1 (its own page): store `rows` rows in database `db`. */
window.w4seed = async (name, { rows, db }) => {
  const S = (await system(name)).w4;
  const t = now();
  const bytes = await S.seed(db, rows);
  return { seedMs: now() - t, storedBytes: typeof bytes === 'number' ? bytes : undefined, note: S.note };
};

/** Workload 4, step 2 (a fresh page; the library already loaded): open and read every row. */
window.w4open = async (name, { rows, db }) => {
  const S = (await system(name)).w4;
  const m0 = memory();
  let opened;
  const t = now();
  const r = await S.open(db, () => { opened = now(); });
  const openMs = now() - t;
  const mem = growth(m0);
  const expected = rows + (S.extraRows ?? 0);
  check(r.n === expected, `${name}: ${r.n} rows opened, expected ${expected}`);
  r.close();
  // openOnlyMs: until the store is open / the snapshot decoded, before the rows are read into JS objects.
  return { openMs, openOnlyMs: opened - t, readRowsMs: openMs - (opened - t), rows: r.n, ...mem };
};

/** Workload 6, step 1 (its own page): store `rows` query rows in database `db`. */
window.w6seed = async (name, { rows, db }) => {
  const S = (await system(name)).w6;
  const t = now();
  await S.seed(db, rows);
  return { seedMs: now() - t, note: S.note };
};

/**
 * Workload 6, step 2 (a fresh page): open and read the first 50-row page by
 * the index (cold), then 200 such queries; then a live query of one exercise
 * and one of another: 100 writes to the first, each timed until its
 * listener holds the new row, and how often the other one woke.
 */
window.w6run = async (name, { rows, db: dbName }) => {
  const S = (await system(name)).w6;
  const m0 = memory();
  const t0 = now();
  const db = await S.open(dbName);
  const opened = now();
  const first = await S.query(db, 'ex7');
  // openMs: of the first page's time, until the database is open.
  const out = { firstPageMs: now() - t0, openMs: opened - t0 };
  // The newest seeded row, or one a previous round's live writes added.
  const top = S.idOf(first[0] ?? {});
  check(first.length === 50 && (top === `q${rows - 50 + 7}` || top.startsWith('live')), `${name}: first page starts at ${top}`);
  Object.assign(out, growth(m0));
  const lat = [];
  for (let i = 0; i < 200; i++) {
    const t = now();
    const r = await S.query(db, `ex${i % 50}`);
    lat.push(now() - t);
    check(r.length === 50, `${name}: a page of ${r.length}`);
  }
  out.queryP50Ms = pct(lat, 0.5);
  out.queryP99Ms = pct(lat, 0.99);
  if (S.watch) {
    let waiter = null;
    let unrelated = 0;
    let firstHeard;
    const heard = new Promise((r) => { firstHeard = r; });
    const stop = S.watch(db, 'ex7', (rs) => {
      firstHeard();
      if (waiter && rs.length && S.idOf(rs[0]) === waiter.id) waiter.resolve();
    });
    const stop2 = S.watch(db, 'ex8', () => { unrelated++; });
    await heard;
    await new Promise((r) => setTimeout(r, 100));
    unrelated = 0;
    const live = [];
    const base = Date.now();
    for (let i = 0; i < 100; i++) {
      const id = `live${base}-${i}`;
      const p = new Promise((resolve) => { waiter = { id, resolve }; });
      const t = now();
      await S.write(db, id, 'ex7', rows + base + i);
      await p;
      live.push(now() - t);
    }
    await new Promise((r) => setTimeout(r, 100));
    stop();
    stop2();
    out.liveP50Ms = pct(live, 0.5);
    out.liveP99Ms = pct(live, 0.99);
    out.unrelatedWakeups = unrelated;
  }
  S.close(db);
  return out;
};

window.ready = Promise.resolve(true);
