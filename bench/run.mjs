// The side-by-side benchmark driver: `node bench/run.mjs` (after `npm ci` in bench/).
// Builds the harness page (Vite), serves bench/dist on 127.0.0.1, drives
// Debian's Chromium headless (playwright-core, a persistent profile in a temp
// dir so IndexedDB is on disk), runs every workload for every system in
// rounds that alternate the systems, a fresh page per (system, workload,
// round); then prints a table and writes bench/results/browser.{json,md}.
//
// Knobs (environment):
//   BENCH_ROUNDS=5        rounds per workload (≥ 5 for a real run)
//   BENCH_QUICK=1         small sizes, 1 round: a smoke run (< 2 min); writes browser-quick.{json,md}
//   (only a full run writes browser.{json,md}; partial ones write browser-partial.*, browser-incognito.*)
//   BENCH_WORKLOADS=1,2   only these workloads (1 map sets, 2 trace, 3 writes, 4 cold open, 5 size, 6 queries)
//   BENCH_SYSTEMS=a,b     only these systems (marksync, marksync-disk, loro, loro-shallow, yjs, automerge, dexie, idb, idb-strict)
//   BENCH_INCOGNITO=1     an incognito context instead of a persistent profile (Chromium keeps its IndexedDB in memory)
//   BENCH_NO_BUILD=1      reuse bench/dist
//   BENCH_W6_ROWS=100000  workload 6 (queries) at these row counts only
//   CHROMIUM=/path        the browser (default /usr/bin/chromium)
import { createServer } from 'node:http';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir, cpus, loadavg } from 'node:os';
import { dirname, extname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync, brotliCompressSync, constants as zc } from 'node:zlib';
import { chromium } from 'playwright-core';
import { build } from 'vite';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '..');
const QUICK = process.env.BENCH_QUICK === '1';
const INCOGNITO = process.env.BENCH_INCOGNITO === '1';
const ROUNDS = Number(process.env.BENCH_ROUNDS || (QUICK ? 1 : 5));
const WORKLOADS = new Set((process.env.BENCH_WORKLOADS || '1,2,3,4,5,6').split(',').map((s) => s.trim()));
const ONLY = process.env.BENCH_SYSTEMS ? new Set(process.env.BENCH_SYSTEMS.split(',').map((s) => s.trim())) : null;
const SEED = 20261130;
const sz = QUICK
  ? { w1Sets: 5_000, w1Keys: 1000, w2Edits: 10_000, w2Rows: 1000, w3N: 300, w4Rows: 2_000, w6Rows: [5_000] }
  : { w1Sets: 100_000, w1Keys: 1000, w2Edits: 259_778, w2Rows: 1000, w3N: 10_000, w4Rows: 100_000, w6Rows: [100_000, 1_000_000] };
// BENCH_W6_ROWS=100000: workload 6 at these sizes only (comma-separated).
if (process.env.BENCH_W6_ROWS) sz.w6Rows = process.env.BENCH_W6_ROWS.split(',').map(Number);

const VERSIONS = JSON.parse(readFileSync(join(here, 'package.json'), 'utf8')).devDependencies;
const PEER_PKG = { loro: 'loro-crdt', yjs: 'yjs', automerge: '@automerge/automerge', dexie: 'dexie' };
const pick = (xs) => xs.filter((s) => !ONLY || ONLY.has(s));
const CRDTS = pick(['marksync', 'loro', 'yjs', 'automerge']);
const STORES = pick(['marksync', 'dexie', 'idb', 'idb-strict']);
const OPENERS = pick(['marksync', 'dexie', 'idb', 'loro', 'yjs', 'automerge']);
const QUERIERS = pick(['marksync', 'marksync-disk', 'dexie', 'idb']);

const median = (xs) => {
  const s = xs.filter((x) => typeof x === 'number' && Number.isFinite(x)).sort((a, b) => a - b);
  if (!s.length) return null;
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const r2 = (x) => (x == null ? null : Math.round(x * 100) / 100);
const kb = (n) => Math.round(n / 102.4) / 10;

// ---------------------------------------------------------------- page runs

const MIME = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.wasm': 'application/wasm', '.css': 'text/css', '.json': 'application/json', '.map': 'application/json' };

function serve(dir) {
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    const file = resolve(dir, `.${path === '/' ? '/index.html' : path}`);
    if (!file.startsWith(dir + sep) || !existsSync(file) || !statSync(file).isFile()) {
      res.writeHead(404).end('not found');
      return;
    }
    res.writeHead(200, {
      'content-type': MIME[extname(file)] || 'application/octet-stream',
      'cache-control': 'no-store',
      // Cross-origin isolated: performance.now() at 5 µs instead of 100 µs.
      'cross-origin-opener-policy': 'same-origin',
      'cross-origin-embedder-policy': 'require-corp',
    });
    res.end(readFileSync(file));
  });
  return new Promise((ok) => server.listen(0, '127.0.0.1', () => ok(server)));
}

async function main() {
  const dist = join(here, 'dist');
  if (process.env.BENCH_NO_BUILD !== '1') {
    await build({ configFile: join(here, 'vite.config.js'), logLevel: 'warn' });
  }
  const benchPkg = join(root, 'www', 'pkg-bench', 'marksync.js');
  const hasBenchDoc = existsSync(benchPkg) && readFileSync(benchPkg, 'utf8').includes('__BenchDoc');
  const out = {
    date: new Date().toISOString(),
    machine: { cpus: cpus().length, cpu: cpus()[0]?.model, loadavgAtStart: loadavg().map(r2) },
    quick: QUICK, rounds: ROUNDS, seed: SEED, sizes: sz, versions: VERSIONS,
    notes: [], workloads: {},
  };
  // Which marksync this run measures (www/pkg and www/pkg-bench are rebuilt by hand; record them).
  const stamp = (f) => (existsSync(f) ? { bytes: statSync(f).size, modified: statSync(f).mtime.toISOString() } : null);
  let head = null;
  try { head = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: root }).toString().trim(); } catch { /* not a checkout */ }
  out.marksync = { gitHead: head, pageWasm: stamp(join(root, 'www', 'pkg-bench', 'marksync_bg.wasm')), packageWasm: stamp(join(root, 'www', 'pkg', 'marksync_bg.wasm')) };
  // Workload 5 first, from the same www/pkg the page was just built next to.
  if (WORKLOADS.has('5')) out.workloads.w5 = await sizes();
  if (!hasBenchDoc) out.notes.push('no www/pkg-bench with __BenchDoc (scripts/build-www.sh --pkg-only --bench-exports): marksync skipped in workloads 1-2, and 4 fails');
  else out.notes.push('the page\'s marksync is www/pkg-bench (www/pkg + the hidden bench exports); workload 5 measures www/pkg');

  const needPage = ['1', '2', '3', '4', '6'].some((w) => WORKLOADS.has(w));
  let server;
  let context;
  let profile;
  if (needPage) {
    server = await serve(dist);
    const url = `http://127.0.0.1:${server.address().port}/`;
    const launch = {
      executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
      headless: true,
      args: ['--enable-precise-memory-info', '--js-flags=--expose-gc', '--no-sandbox', '--disable-gpu',
        '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync',
        '--disable-dev-shm-usage'],
    };
    profile = mkdtempSync(join(tmpdir(), 'marksync-bench-profile-'));
    if (INCOGNITO) {
      const browser = await chromium.launch(launch);
      context = await browser.newContext();
      out.notes.push('BENCH_INCOGNITO=1: an incognito context, IndexedDB in memory (not on disk)');
    } else {
      context = await chromium.launchPersistentContext(profile, launch);
    }
    out.machine.browser = context.browser()?.version() ?? 'chromium';
    out.machine.indexedDB = INCOGNITO ? 'in memory (incognito context)' : 'on disk (persistent profile in a temp dir)';
    const versionPage = await context.newPage();
    await versionPage.goto(url);
    Object.assign(out.machine, await versionPage.evaluate(() => ({ userAgent: navigator.userAgent, crossOriginIsolated, preciseMemory: !!performance.memory, gc: typeof gc === 'function' })));
    await versionPage.close();

    /** One call in a fresh page (the previous one is closed first, so its renderer goes). */
    const inPage = async (fn, system, args) => {
      const page = await context.newPage();
      const errors = [];
      page.on('pageerror', (e) => errors.push(e.message));
      try {
        await page.goto(url);
        await page.waitForFunction(() => window.ready);
        // BENCH_PROFILE=w6run: a CPU profile of that step, per system, in results/.
        const cdp = process.env.BENCH_PROFILE === fn ? await context.newCDPSession(page) : null;
        if (cdp) {
          await cdp.send('Profiler.enable');
          await cdp.send('Profiler.setSamplingInterval', { interval: 100 });
          await cdp.send('Profiler.start');
        }
        const out = await page.evaluate(([f, s, a]) => window[f](s, a), [fn, system, args]);
        if (cdp) {
          const { profile } = await cdp.send('Profiler.stop');
          const file = new URL(`results/${fn}-${system}.cpuprofile`, import.meta.url);
          (await import('node:fs')).writeFileSync(file, JSON.stringify(profile));
          process.stderr.write(`# profile: ${file.pathname}\n`);
        }
        return out;
      } catch (e) {
        return { error: `${e.message.split('\n')[0]}${errors.length ? ` (page: ${errors.join('; ')})` : ''}` };
      } finally {
        await page.close();
      }
    };

    const rounds = async (key, fn, systems, argsFor, title) => {
      const w = (out.workloads[key] = { title, systems: {} });
      for (const s of systems) w.systems[s] = { runs: [] };
      for (let r = 0; r < ROUNDS; r++) {
        const order = systems.map((_, i) => systems[(i + r) % systems.length]); // alternate who goes first
        for (const s of order) {
          const t = Date.now();
          const res = await inPage(fn, s, argsFor(s, r));
          w.systems[s].runs.push(res);
          process.stderr.write(`# ${key} round ${r + 1}/${ROUNDS} ${s}: ${res.error ? `ERROR ${res.error}` : `${Date.now() - t} ms`}\n`);
        }
      }
      for (const s of systems) {
        const runs = w.systems[s].runs.filter((x) => !x.error);
        const fields = new Set(runs.flatMap((x) => Object.keys(x).filter((k) => typeof x[k] === 'number')));
        w.systems[s].median = Object.fromEntries([...fields].map((f) => [f, r2(median(runs.map((x) => x[f])))]));
        const errs = w.systems[s].runs.filter((x) => x.error).map((x) => x.error);
        if (errs.length) w.systems[s].errors = [...new Set(errs)];
        const notes = runs.map((x) => x.bulkNote).filter(Boolean);
        if (notes.length) w.systems[s].note = notes[0];
      }
      return w;
    };

    const crdts1 = CRDTS.filter((s) => s !== 'marksync' || hasBenchDoc);
    if (WORKLOADS.has('1')) {
      for (const R of [2, 20]) {
        await rounds(`w1_R${R}`, 'w1', crdts1, () => ({ sets: sz.w1Sets, replicas: R, keys: sz.w1Keys, seed: SEED + R }),
          `1. Concurrent map sets: ${sz.w1Sets} sets over ${R} replicas, ${sz.w1Keys} keys`);
      }
    }
    if (WORKLOADS.has('2')) {
      const w2systems = [...crdts1, ...pick(['loro-shallow'])];
      await rounds('w2', 'w2', w2systems, () => ({ edits: sz.w2Edits, rows: sz.w2Rows, seed: SEED + 2 }),
        `2. Editing trace: ${sz.w2Edits} field sets over ${sz.w2Rows} rows, one replica`);
    }
    if (WORKLOADS.has('3')) {
      await rounds('w3', 'w3', STORES, (s, r) => ({ n: sz.w3N, tag: `${r}-${Date.now()}` }),
        `3. Local durable writes: ${sz.w3N} edits, (a) each awaited, (b) in bulk`);
    }
    if (WORKLOADS.has('4')) {
      const seeds = {};
      for (const s of OPENERS) {
        const t = Date.now();
        seeds[s] = await inPage('w4seed', s, { rows: sz.w4Rows, db: `w4-${s}` });
        process.stderr.write(`# w4 seed ${s}: ${seeds[s].error ? `ERROR ${seeds[s].error}` : `${Date.now() - t} ms`}\n`);
      }
      const ok = OPENERS.filter((s) => !seeds[s].error);
      const w = await rounds('w4', 'w4open', ok, (s) => ({ rows: sz.w4Rows, db: `w4-${s}` }),
        `4. Cold open: ${sz.w4Rows} rows stored, a fresh page opens them and reads every row`);
      for (const s of OPENERS) {
        w.systems[s] ??= { runs: [], errors: [seeds[s].error] };
        w.systems[s].seed = seeds[s];
      }
      await inPage('deleteDatabases', null, null);
    }
    if (WORKLOADS.has('6')) {
      for (const n of sz.w6Rows) {
        const seeds = {};
        for (const s of QUERIERS) {
          const t = Date.now();
          seeds[s] = await inPage('w6seed', s, { rows: n, db: `w6-${s}-${n}` });
          process.stderr.write(`# w6 seed ${s} ${n}: ${seeds[s].error ? `ERROR ${seeds[s].error}` : `${Date.now() - t} ms`}\n`);
        }
        const ok = QUERIERS.filter((s) => !seeds[s].error);
        const w = await rounds(`w6_${n}`, 'w6run', ok, (s) => ({ rows: n, db: `w6-${s}-${n}` }),
          `6. Queries: ${n.toLocaleString('en')} rows on disk, the newest 50 of one exercise by an index, and a live query of it`);
        for (const s of QUERIERS) {
          w.systems[s] ??= { runs: [], errors: [seeds[s].error] };
          w.systems[s].seed = seeds[s];
        }
        await inPage('deleteDatabases', null, null);
      }
    }
    const b = INCOGNITO ? context.browser() : null;
    await context.close();
    await b?.close();
    server.close();
    rmSync(profile, { recursive: true, force: true });
  }
  out.machine.loadavgAtEnd = loadavg().map(r2);

  const md = markdown(out);
  const dir = join(here, 'results');
  mkdirSync(dir, { recursive: true });
  // Only a full run (every workload and system, ≥ 5 rounds, on disk) writes browser.{json,md}.
  const partial = process.env.BENCH_WORKLOADS || ONLY || ROUNDS < 5;
  const base = `browser${QUICK ? '-quick' : ''}${INCOGNITO ? '-incognito' : ''}${!QUICK && partial ? '-partial' : ''}`;
  writeFileSync(join(dir, `${base}.json`), `${JSON.stringify(out, null, 1)}\n`);
  writeFileSync(join(dir, `${base}.md`), md);
  console.log(md);
  console.error(`# wrote ${relative(process.cwd(), join(dir, `${base}.json`))} and .md`);
}

// ---------------------------------------------------------------- workload 5 (Node)

const walk = (dir) => readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(dir, e.name)) : [join(dir, e.name)]));

/** Raw, gzip -9 and brotli (max quality) bytes of files, each compressed on its own (as served). */
function measure(files) {
  const t = { raw: 0, gzip: 0, brotli: 0, files: files.length };
  for (const f of files) {
    const b = readFileSync(f);
    t.raw += b.length;
    t.gzip += gzipSync(b, { level: 9 }).length;
    t.brotli += brotliCompressSync(b, { params: { [zc.BROTLI_PARAM_QUALITY]: 11 } }).length;
  }
  return t;
}

function npmPack(spec, cwd) {
  try {
    const j = JSON.parse(execFileSync('npm', ['pack', '--dry-run', '--json', ...(spec ? [spec] : [])], { cwd, stdio: ['ignore', 'pipe', 'ignore'] }).toString());
    return { size: j[0].size, unpackedSize: j[0].unpackedSize, entryCount: j[0].entryCount };
  } catch (e) {
    return { error: e.message.split('\n')[0] };
  }
}

async function sizes() {
  const w = { title: '5. Package size', systems: {} };
  // marksync as the brief defines it: wasm + JS glue + snippets + index.js.
  const pkg = join(root, 'www', 'pkg');
  const files = [join(pkg, 'marksync_bg.wasm'), join(pkg, 'marksync.js'), ...(existsSync(join(pkg, 'snippets')) ? walk(join(pkg, 'snippets')) : []), join(root, 'www', 'index.js')];
  const ms = { package: measure(files), wasm: measure([files[0]]), npm: npmPack(null, join(root, 'www')) };
  w.systems.marksync = ms;
  // What a Vite build ships for each system: one entry each (bench/size/*.js).
  const outRoot = join(here, 'dist-size');
  rmSync(outRoot, { recursive: true, force: true });
  for (const s of ['marksync', 'loro', 'yjs', 'automerge', 'dexie']) {
    const outDir = join(outRoot, s);
    await build({
      configFile: false, root: here, logLevel: 'warn',
      build: {
        outDir, emptyOutDir: true, target: 'es2022', minify: true,
        assetsInlineLimit: (file) => (file.endsWith('.wasm') ? false : undefined),
        rollupOptions: { input: join(here, 'size', `${s}.js`), preserveEntrySignatures: 'strict' },
      },
    });
    const shipped = walk(outDir);
    (w.systems[s] ??= {}).vite = measure(shipped);
    w.systems[s].vite.wasm = measure(shipped.filter((f) => f.endsWith('.wasm')));
    if (PEER_PKG[s]) w.systems[s].npm = npmPack(`${PEER_PKG[s]}@${VERSIONS[PEER_PKG[s]]}`, here);
  }
  return w;
}

// ---------------------------------------------------------------- report

function ratio(peer, mine) {
  if (peer == null || mine == null || mine === 0) return '';
  return `${(peer / mine).toFixed(2)}×`;
}
const fmt = (x, d = 1) => (x == null ? '—' : Number(x).toFixed(d));
const yes = (b) => (b ? '**met**' : '**not met**');

function markdown(o) {
  const L = [];
  L.push(`# marksync side by side (browser)`, '');
  L.push(`${o.date}, ${o.machine.cpus} cores (${o.machine.cpu}), ${o.machine.browser ?? ''} headless, load average ${o.machine.loadavgAtStart?.join(' ')} → ${o.machine.loadavgAtEnd?.join(' ')}.`);
  L.push(`Medians of ${o.rounds} rounds${o.quick ? ' (QUICK: small sizes, a smoke run, not figures to quote)' : ''}; each run in a fresh page; systems alternate within each round. `
    + `Versions: ${Object.entries(o.versions).map(([k, v]) => `${k} ${v}`).join(', ')}. Ratio = peer ÷ marksync (> 1: marksync is faster/smaller).`);
  if (o.marksync) L.push('', `marksync: git ${o.marksync.gitHead}; page wasm (www/pkg-bench) ${o.marksync.pageWasm?.bytes} bytes of ${o.marksync.pageWasm?.modified}; package wasm (www/pkg) ${o.marksync.packageWasm?.bytes} bytes of ${o.marksync.packageWasm?.modified}.`);
  for (const n of o.notes) L.push('', `Note: ${n}`);
  const W = o.workloads;
  const errs = (w) => Object.entries(w.systems).filter(([, v]) => v.errors).map(([s, v]) => `- ${s}: ${v.errors.join('; ')}`);

  for (const R of [2, 20]) {
    const w = W[`w1_R${R}`];
    if (!w) continue;
    L.push('', `## ${w.title}`, '');
    L.push('Edit = every replica applies its sets (Automerge: changes of 100 sets; Loro: one commit per replica at the end; Yjs and marksync: each set on its own). '
      + 'Merge = export every replica\'s updates + import them all into a fresh doc. Memory = JS heap + wasm memory growth after the merge (replicas freed; wasm memories never shrink). '
      + 'Reverse-order merge checked equal for every system.', '');
    L.push('| system | edit ms | merge ms (export+import) | import ms | update bytes | memory MB | merge vs marksync | goal: marksync merge ≥ 2× faster than the fastest peer |');
    L.push('|---|---:|---:|---:|---:|---:|---:|---|');
    const m = w.systems.marksync?.median;
    const peers = Object.entries(w.systems).filter(([s, v]) => s !== 'marksync' && v.median?.mergeMs != null);
    const fastest = peers.length ? Math.min(...peers.map(([, v]) => v.median.mergeMs)) : null;
    for (const [s, v] of Object.entries(w.systems)) {
      const x = v.median || {};
      const goal = s === 'marksync' && m?.mergeMs != null && fastest != null
        ? `${yes(m.mergeMs * 2 <= fastest)} (fastest peer ${fmt(fastest)} ms ÷ ${fmt(m.mergeMs)} ms = ${(fastest / m.mergeMs).toFixed(2)}×)` : '';
      L.push(`| ${s} | ${fmt(x.editMs)} | ${fmt(x.mergeMs)} | ${fmt(x.importMs)} | ${x.updateBytes ?? '—'} | ${fmt(x.memMB)} | ${s === 'marksync' ? '1.00×' : ratio(x.mergeMs, m?.mergeMs)} | ${goal} |`);
    }
    if (m?.mergeStatesMs != null) {
      const goal = fastest != null ? `${yes(m.mergeStatesMs * 2 <= fastest)} (fastest peer ${fmt(fastest)} ms ÷ ${fmt(m.mergeStatesMs)} ms = ${(fastest / m.mergeStatesMs).toFixed(2)}×)` : '';
      L.push(`| marksync, merge states (rows with marks, no history) | — | ${fmt(m.mergeStatesMs)} | ${fmt(m.statesImportMs)} | ${m.stateBytes} | — | — | ${goal} |`);
    }
    L.push(...errs(w));
  }

  if (W.w2) {
    const w = W.w2;
    L.push('', `## ${w.title}`, '');
    L.push('Loro/Yjs/Automerge: a map of 1,000 nested maps (created first, not timed); Automerge in changes of 1,000 edits; Loro one commit at the end; Yjs one transaction per edit. '
      + 'marksync\'s snapshot = its rows with marks (exportState), not history; loro-shallow = Loro\'s shallow snapshot (state without history), the like-for-like line. Decode = load into a fresh doc + read every row into plain objects (checked equal to the trace\'s final state). Memory = growth after apply.', '');
    L.push('| system | apply ms | encode ms | decode ms (load + read) | load ms | snapshot bytes | gzip bytes | memory MB | apply vs marksync | decode vs marksync | size vs marksync |');
    L.push('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
    const m = w.systems.marksync?.median;
    for (const [s, v] of Object.entries(w.systems)) {
      const x = v.median || {};
      L.push(`| ${s} | ${fmt(x.applyMs)} | ${fmt(x.encodeMs)} | ${fmt(x.decodeMs)} | ${fmt(x.loadMs)} | ${x.snapshotBytes ?? '—'} | ${x.snapshotGzipBytes ?? '—'} | ${fmt(x.memMB)} | ${ratio(x.applyMs, m?.applyMs)} | ${ratio(x.decodeMs, m?.decodeMs)} | ${ratio(x.snapshotBytes, m?.snapshotBytes)} |`);
    }
    L.push(...errs(w));
  }

  if (W.w3) {
    const w = W.w3;
    L.push('', `## ${w.title}`, '');
    L.push(`A fresh IndexedDB database per system and run, ${o.machine.indexedDB ?? ''}.` + ' (a) marksync `await db.change()`, Dexie `await table.put()`, raw IndexedDB one readwrite transaction per put awaiting `oncomplete` (default durability). '
      + '(b) marksync `changeMany`, Dexie `bulkPut`, raw IndexedDB one transaction of all puts. idb-strict = raw IndexedDB with `{ durability: \'strict\' }` (Chromium\'s default durability is relaxed: not flushed to disk before `complete`).', '');
    L.push('| system | (a) p50 ms | (a) p99 ms | (a) total ms | (b) bulk total ms | p50 vs marksync | bulk vs marksync | goal: marksync change p50 ≤ 1 ms |');
    L.push('|---|---:|---:|---:|---:|---:|---:|---|');
    const m = w.systems.marksync?.median;
    for (const [s, v] of Object.entries(w.systems)) {
      const x = v.median || {};
      const goal = s === 'marksync' && x.oneP50Ms != null ? yes(x.oneP50Ms <= 1) : '';
      L.push(`| ${s} | ${fmt(x.oneP50Ms, 2)} | ${fmt(x.oneP99Ms, 2)} | ${fmt(x.oneTotalMs, 0)} | ${x.bulkMs != null ? fmt(x.bulkMs, 0) : (v.note ?? '—')} | ${ratio(x.oneP50Ms, m?.oneP50Ms)} | ${ratio(x.bulkMs, m?.bulkMs)} | ${goal} |`);
    }
    L.push(...errs(w));
  }

  if (W.w4) {
    const w = W.w4;
    L.push('', `## ${w.title}`, '');
    L.push('The library is loaded before the clock starts; open = from nothing in memory to every row as plain JS objects (the goal\'s measure), split into "store open" '
      + '(marksync: `Marksync.open` resolved, as `www/bench/client.mjs` times it; Dexie/IDB: database open; Loro/Yjs/Automerge: blob read + decoded) and "rows to JS" '
      + '(`db.rows()`, `toArray()`/`getAll()`, `toJSON()`/`toJS()`). Memory = growth after open.', '');
    L.push('| system | what is stored and read | open ms (to every row in JS) | store open ms | rows to JS ms | rows | memory MB | vs marksync | goal: marksync open ≤ 200 ms |');
    L.push('|---|---|---:|---:|---:|---:|---:|---:|---|');
    const m = w.systems.marksync?.median;
    for (const [s, v] of Object.entries(w.systems)) {
      const x = v.median || {};
      const goal = s === 'marksync' && x.openMs != null ? `${yes(x.openMs <= 200)} (store open alone: ${x.openOnlyMs <= 200 ? 'met' : 'not met'})` : '';
      L.push(`| ${s} | ${v.seed?.note ?? ''} | ${fmt(x.openMs)} | ${fmt(x.openOnlyMs)} | ${fmt(x.readRowsMs)} | ${x.rows ?? '—'} | ${fmt(x.memMB)} | ${ratio(x.openMs, m?.openMs)} | ${goal} |`);
    }
    L.push(...errs(w));
  }

  if (W.w5) {
    const w = W.w5;
    L.push('', `## ${w.title}`, '');
    L.push('KB = 1024 bytes; gzip -9 and brotli q11 per file, summed. "package" = www/pkg/marksync_bg.wasm + marksync.js + snippets + www/index.js; '
      + '"Vite build" = what `vite build` ships for an entry that re-exports the whole library (bench/size/*.js; JS chunks + wasm); npm = `npm pack --dry-run` (tarball / unpacked).', '');
    L.push('| system | files | raw KB | gzip KB | brotli KB | of which wasm gzip KB | npm tarball KB | npm unpacked KB | gzip vs marksync | goal: marksync ≤ 80 KB gzip |');
    L.push('|---|---|---:|---:|---:|---:|---:|---:|---:|---|');
    const mm = w.systems.marksync;
    const mg = mm?.vite?.gzip;
    if (mm?.package) {
      L.push(`| marksync | package (wasm + glue + snippets + index.js) | ${kb(mm.package.raw)} | ${kb(mm.package.gzip)} | ${kb(mm.package.brotli)} | ${kb(mm.wasm.gzip)} | ${mm.npm?.size != null ? kb(mm.npm.size) : '—'} | ${mm.npm?.unpackedSize != null ? kb(mm.npm.unpackedSize) : '—'} | | ${yes(mm.package.gzip <= 80 * 1024)} |`);
    }
    for (const [s, v] of Object.entries(w.systems)) {
      if (!v.vite) continue;
      const goal = s === 'marksync' ? yes(v.vite.gzip <= 80 * 1024) : '';
      L.push(`| ${s} | Vite build | ${kb(v.vite.raw)} | ${kb(v.vite.gzip)} | ${kb(v.vite.brotli)} | ${kb(v.vite.wasm.gzip)} | ${s !== 'marksync' && v.npm?.size != null ? kb(v.npm.size) : ''} | ${s !== 'marksync' && v.npm?.unpackedSize != null ? kb(v.npm.unpackedSize) : ''} | ${s === 'marksync' ? '1.00×' : ratio(v.vite.gzip, mg)} | ${goal} |`);
    }
  }
  for (const [key, w] of Object.entries(W).filter(([k]) => k.startsWith('w6_'))) {
    L.push('', `## ${w.title}`, '');
    L.push('A fresh page per run; the library loaded before the clock starts. "first page" = from nothing in memory: open the database and answer '
      + '`where exercise = ex7, orderBy at desc, limit 50` (marksync `db.query` with the index declared at open; Dexie `where([exercise+at]).between().reverse().limit(50)`; '
      + "raw IndexedDB a cursor on an ['exercise', 'at'] index). Memory = growth after that first page (JS heap after gc + wasm). Then 200 such queries (p50), "
      + 'then a live query (`db.watch` / Dexie `liveQuery`): 100 writes of a new newest row of ex7, each timed from the write until the listener holds it, '
      + 'while a live query of ex8 counts its wake-ups.', '');
    L.push('| system | first page ms (cold) | memory MB | query p50 ms | query p99 ms | write → live result p50 ms | p99 ms | unrelated wake-ups / 100 | query p50 vs marksync | live p50 vs marksync |');
    L.push('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
    const m = w.systems.marksync?.median;
    for (const [s, v] of Object.entries(w.systems)) {
      const x = v.median || {};
      L.push(`| ${s} | ${fmt(x.firstPageMs)} | ${fmt(x.memMB)} | ${fmt(x.queryP50Ms, 3)} | ${fmt(x.queryP99Ms, 3)} | ${x.liveP50Ms != null ? fmt(x.liveP50Ms, 2) : '—'} | ${x.liveP99Ms != null ? fmt(x.liveP99Ms, 2) : '—'} | ${x.unrelatedWakeups ?? '—'} | ${ratio(x.queryP50Ms, m?.queryP50Ms)} | ${ratio(x.liveP50Ms, m?.liveP50Ms)} |`);
    }
    L.push(...errs(w));
    void key;
  }
  L.push('');
  return L.join('\n');
}

await main();
