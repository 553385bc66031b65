// Browser benchmarks of the client (headless Chromium, real IndexedDB, the
// real server): `node www/bench/client.mjs` after `scripts/build-www.sh --pkg-only --bench-exports`
// and `cargo build --release -p marksync-server --example merge_speed`.
// Prints one JSON object; BENCHMARKS.md quotes it. `node www/bench/client.mjs check`
// runs only the schema-check part (any server build: MARKSYNC_SERVER_BIN).
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync, brotliCompressSync } from 'node:zlib';
import { startServer, launch, device, root } from '../test/helpers.mjs';

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const pct = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];

function sizes() {
  const pkg = join(root, 'www', 'pkg');
  const files = ['marksync_bg.wasm', 'marksync.js'].map((f) => join(pkg, f));
  // The snippets are inside marksync.js once the build minified the glue.
  const snippets = join(pkg, 'snippets');
  if (existsSync(snippets)) {
    for (const d of readdirSync(snippets)) {
      for (const f of readdirSync(join(snippets, d))) files.push(join(snippets, d, f));
    }
  }
  files.push(join(root, 'www', 'index.js'));
  const all = Buffer.concat(files.map((f) => readFileSync(f)));
  const wasm = readFileSync(files[0]);
  const kb = (n) => Math.round(n / 102.4) / 10;
  return {
    wasm: { raw: kb(wasm.length), gzip: kb(gzipSync(wasm, { level: 9 }).length), brotli: kb(brotliCompressSync(wasm).length) },
    total: { raw: kb(all.length), gzip: kb(gzipSync(all, { level: 9 }).length), brotli: kb(brotliCompressSync(all).length) },
  };
}

/**
 * `db.check()` and what checking adds to `change()`, once the device knows
 * the server's schema: 10k checks (valid and invalid), then `change()` with
 * and without the check, interleaved in one run (500 each).
 */
async function checkBench(page) {
  return page.evaluate(async () => {
    const db = await window.Marksync.open({ endpoint: location.origin, token: 'dev:bench-check', name: 'bench-check', autoSync: false, persist: false });
    await db.change('sets', db.newRowId(), { exercise: 'squat', weightKg: 80, reps: 5 });
    await db.sync();
    if (!db.schema()) throw new Error('no schema fetched');
    const id = db.newRowId();
    const n = 10_000;
    const t = performance.now();
    let refused = 0;
    for (let i = 0; i < n; i++) if (db.check('sets', id, { exercise: 'squat', weightKg: 80, reps: 1 + (i % 150) })) refused++;
    const checkUs = ((performance.now() - t) / n) * 1000;
    const checked = [];
    const unchecked = [];
    for (let i = 0; i < 1000; i++) {
      const opts = i % 2 ? { check: false } : undefined;
      const t0 = performance.now();
      await db.change('sets', db.newRowId(), { exercise: 'squat', weightKg: 80, reps: 5 }, opts);
      (i % 2 ? unchecked : checked).push(performance.now() - t0);
    }
    const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    db.close();
    const mean = (xs) => Math.round((xs.reduce((a, b) => a + b, 0) / xs.length) * 1000) / 1000;
    return {
      checks: n, refused, checkMicros: Math.round(checkUs * 100) / 100,
      changeCheckedP50Ms: med(checked), changeUncheckedP50Ms: med(unchecked), changeCheckedMeanMs: mean(checked), changeUncheckedMeanMs: mean(unchecked),
    };
  });
}

const only = process.argv[2];
const out = only ? {} : { sizesKB: sizes() };
process.env.MARKSYNC_SERVER_BIN ??= join(root, 'target', 'release', 'marksync-server');
const server = await startServer('sqlite');
const browser = await launch();
try {
  const { page, context } = await device(browser, server);
  out.check = await checkBench(page);
  if (only === 'check') {
    await browser.close();
    await server.stop();
    console.log(JSON.stringify(out, null, 2));
    process.exit(0);
  }
  const native = JSON.parse(execFileSync(join(root, 'target', 'release', 'examples', 'merge_speed')).toString());
  const open = (name, extra = {}) => page.evaluate(async ({ name, extra }) => {
    window.db = await window.Marksync.open({ endpoint: location.origin, token: 'dev:bench', name, autoSync: false, persist: false, ...extra });
  }, { name, extra });

  // Merge: the same workload as the native example, inside wasm.
  const wasmMs = [];
  for (let i = 0; i < 5; i++) wasmMs.push(await page.evaluate(async () => { const m = await import('/pkg-bench/marksync.js'); await m.default(); return m.__benchMerge(1_000_000, 10_000); }));
  out.merge = {
    wasmMedianMs: median(wasmMs),
    nativeMedianMs: native.mergeMedianMs,
    wasmFieldOpsPerSec: Math.round(1e6 / (median(wasmMs) / 1000)),
    nativeFieldOpsPerSec: Math.round(1e6 / (native.mergeMedianMs / 1000)),
    wasmOverNative: Math.round((native.mergeMedianMs / median(wasmMs)) * 100) / 100,
  };

  // change(): durable local writes, one by one, each awaited.
  await open('bench-change');
  const lat = await page.evaluate(async () => {
    const ms = [];
    for (let i = 0; i < 10_000; i++) {
      const t = performance.now();
      await db.change('sets', db.newRowId(), { exercise: 'squat', weightKg: 80, reps: 1 + (i % 100) });
      ms.push(performance.now() - t);
    }
    return ms;
  });
  out.change = { n: lat.length, p50Ms: pct(lat, 0.5), p99Ms: pct(lat, 0.99), totalMs: Math.round(lat.reduce((a, b) => a + b, 0)) };

  // Drain 10k queued ops to the server, then pull them into a second database.
  const drain = await page.evaluate(async () => {
    const t = performance.now();
    const r = await db.sync();
    return { ms: performance.now() - t, applied: r.applied, ok: r.ok };
  });
  const other = await device(browser, server);
  const pulled = await other.page.evaluate(async () => {
    window.db = await window.Marksync.open({ endpoint: location.origin, token: 'dev:bench', name: 'bench-pull', autoSync: false, persist: false });
    const t = performance.now();
    const r = await db.sync();
    return { ms: performance.now() - t, pulled: r.pulled, rows: db.rows('sets').length };
  });
  out.drainAndPull = { pushMs: Math.round(drain.ms), pullMs: Math.round(pulled.ms), totalMs: Math.round(drain.ms + pulled.ms), applied: drain.applied, pulledRows: pulled.rows };
  await other.context.close();

  // Cold open: 100k rows + 1k pending already in IndexedDB; a fresh page opens it.
  await page.evaluate(async () => { const m = await import('/pkg-bench/marksync.js'); await m.default(); await m.__seedDatabase('bench-open', 100_000, 1_000); });
  const opens = [];
  for (let i = 0; i < 5; i++) {
    const p = await context.newPage();
    await p.goto(`${server.url}/test/harness.html`);
    await p.evaluate(() => window.ready);
    opens.push(await p.evaluate(async () => {
      const t = performance.now();
      const db = await window.Marksync.open({ endpoint: location.origin, token: 'dev:bench', name: 'bench-open', autoSync: false, persist: false });
      const ms = performance.now() - t;
      const n = db.rows('sets').length;
      db.close();
      return { ms, n };
    }));
    await p.close();
  }
  out.coldOpen = { rows: opens[0].n, medianMs: Math.round(median(opens.map((o) => o.ms))), runsMs: opens.map((o) => Math.round(o.ms)) };
} finally {
  await browser.close();
  await server.stop();
}
console.log(JSON.stringify(out, null, 2));
