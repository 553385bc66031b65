// Two builds of the package, side by side in one Chromium run against the
// same server binary: `change()` (durable, each awaited), draining the queue
// to the server, and a cold open of 100k rows + 1k pending. Rounds alternate
// A and B, so the machine's noise falls on both; prints medians and B ÷ A.
//
//   node www/bench/side-by-side.mjs <www dir A> <www dir B> [rounds]
//   MARKSYNC_SBS_OPS=10000 node www/bench/side-by-side.mjs …   # edits per round (default 2,000)
//
// Each www dir needs pkg/ and pkg-bench/ (`scripts/build-www.sh --pkg-only --bench-exports`).
import { startServer, launch } from '../test/helpers.mjs';

const [dirA, dirB, roundsArg] = process.argv.slice(2);
if (!dirA || !dirB) {
  console.error('usage: node www/bench/side-by-side.mjs <www dir A> <www dir B> [rounds]');
  process.exit(2);
}
const rounds = Number(roundsArg ?? 5);
const ops = Number(process.env.MARKSYNC_SBS_OPS ?? 2_000);
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const browser = await launch();
const sides = { A: { dir: dirA, server: await startServer('sqlite', { staticDir: dirA }) }, B: { dir: dirB, server: await startServer('sqlite', { staticDir: dirB }) } };
const results = { A: { change: [], drain: [], open: [] }, B: { change: [], drain: [], open: [] } };

async function page(side) {
  const context = await browser.newContext();
  const p = await context.newPage();
  await p.goto(`${sides[side].server.url}/test/harness.html`);
  await p.evaluate(() => window.ready);
  return { context, p };
}

async function round(side, n) {
  const { context, p } = await page(side);
  // change(): `ops` durable edits, each awaited; the p50 of their latencies.
  const change = await p.evaluate(async ({ name, ops }) => {
    window.db = await window.Marksync.open({ endpoint: location.origin, token: `dev:${name}`, name, autoSync: false, persist: false });
    const ms = [];
    for (let i = 0; i < ops; i++) {
      const t = performance.now();
      await db.change('sets', db.newRowId(), { exercise: 'squat', weightKg: 80, reps: 1 + (i % 100) });
      ms.push(performance.now() - t);
    }
    ms.sort((a, b) => a - b);
    return ms[ms.length >> 1];
  }, { name: `sbs-${side}-${n}`, ops });
  // Drain the queued ops.
  const drain = await p.evaluate(async (ops) => {
    const t = performance.now();
    const r = await db.sync();
    if (!r.ok || r.applied !== ops) throw new Error(`drain: ${JSON.stringify(r)}`);
    return performance.now() - t;
  }, ops);
  // Cold open: 100k base rows + 1k pending already on disk, opened by a fresh page.
  const seeded = `sbs-open-${side}-${n}`;
  await p.evaluate(async (name) => { const m = await import('/pkg-bench/marksync.js'); await m.default(); await m.__seedDatabase(name, 100_000, 1_000); }, seeded);
  const fresh = await context.newPage();
  await fresh.goto(`${sides[side].server.url}/test/harness.html`);
  await fresh.evaluate(() => window.ready);
  const open = await fresh.evaluate(async (name) => {
    const t = performance.now();
    const db = await window.Marksync.open({ endpoint: location.origin, token: 'dev:sbs', name, autoSync: false, persist: false });
    const ms = performance.now() - t;
    db.close();
    return ms;
  }, seeded);
  await context.close();
  results[side].change.push(change);
  results[side].drain.push(drain);
  results[side].open.push(open);
}

try {
  for (let n = 0; n < rounds; n++) {
    for (const side of n % 2 ? ['B', 'A'] : ['A', 'B']) await round(side, n);
  }
} finally {
  await browser.close();
  await sides.A.server.stop();
  await sides.B.server.stop();
}
const out = {};
for (const what of ['change', 'drain', 'open']) {
  const a = median(results.A[what]);
  const b = median(results.B[what]);
  out[what] = { aMedianMs: Math.round(a * 1000) / 1000, bMedianMs: Math.round(b * 1000) / 1000, bOverA: Math.round((b / a) * 1000) / 1000 };
}
console.log(JSON.stringify({ a: dirA, b: dirB, rounds, ops, ...out }, null, 2));
