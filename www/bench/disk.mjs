// Two builds of the package side by side on disk (a persistent profile):
// `change()` each awaited and `changeMany` of 10,000, with raw IndexedDB
// (one put per transaction, strict durability; 10,000 in one for
// `changeMany`) in the same rounds. Rounds
// alternate A, B and raw; prints medians and ratios.
//
//   N=2000 [SYNC=1] node www/bench/disk.mjs <www dir A> <www dir B> [rounds]
//
// SYNC=1: each page syncs as it records (autoSync), so edits are recorded
// while the sync cycle's own steps commit beside them.
//
// Each www dir needs pkg/ (`scripts/build-www.sh --pkg-only`).
import { chromium } from 'playwright-core';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer, CHROMIUM_ARGS } from '../test/helpers.mjs';
const [A, B, R] = process.argv.slice(2);
const N = Number(process.env.N || 2000), rounds = Number(R || 5);
const servers = { A: await startServer('sqlite', { staticDir: A }), B: await startServer('sqlite', { staticDir: B }) };
const ctx = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'sbs-')), { executablePath: '/usr/bin/chromium', headless: true, args: CHROMIUM_ARGS });
const med = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
// The page's clock ticks by 0.1 ms: the mean of each round's middle half sees between the ticks.
const mid = (a) => { const s = [...a].sort((x, y) => x - y); const m = s.slice(Math.floor(s.length / 4), Math.ceil(s.length * 3 / 4)); return m.reduce((x, y) => x + y, 0) / m.length; };
const res = { A: { p50: [], mid: [], bulk: [] }, B: { p50: [], mid: [], bulk: [] }, raw: { p50: [], mid: [], bulk: [] } };
for (let r = 0; r < rounds; r++) {
  for (const side of ['A', 'B', 'raw']) {
    const page = await ctx.newPage();
    await page.goto(`${servers[side === 'raw' ? 'A' : side].url}/test/harness.html`);
    await page.evaluate(() => window.ready);
    const out = await page.evaluate(async ({ N, SYNC, raw }) => {
      const t = [];
      if (raw) {
        const db = await new Promise((res, rej) => { const q = indexedDB.open('raw-' + Math.random(), 1); q.onupgradeneeded = () => q.result.createObjectStore('a'); q.onsuccess = () => res(q.result); q.onerror = () => rej(q.error); });
        for (let i = 0; i < N; i++) { const t0 = performance.now(); const tx = db.transaction(['a'], 'readwrite', { durability: 'strict' }); tx.objectStore('a').put({ exercise: 'squat', weightKg: 80, reps: i }, i); await new Promise((r) => { tx.oncomplete = r; }); t.push(performance.now() - t0); }
        // changeMany's match: 10,000 puts in one strict transaction.
        const b0 = performance.now();
        const tx = db.transaction(['a'], 'readwrite', { durability: 'strict' });
        for (let i = 0; i < 10000; i++) tx.objectStore('a').put({ exercise: 'squat', weightKg: 80, reps: i }, N + i);
        await new Promise((r) => { tx.oncomplete = r; });
        return { t, bulk: performance.now() - b0 };
      }
      let pushes = 0;
      const fetch0 = window.fetch;
      window.fetch = function (url) { if (String(url).includes('/v1/push')) pushes++; return fetch0.apply(this, arguments); };
      const db = await window.Marksync.open({ endpoint: location.origin, token: 'dev:sbs', name: 'sbs-' + Math.random(), autoSync: SYNC, live: false, persist: false });
      for (let i = 0; i < N; i++) { const t0 = performance.now(); await db.change('sets', db.newRowId(), { exercise: 'squat', weightKg: 80, reps: 1 + (i % 100) }); t.push(performance.now() - t0); }
      const pushed = pushes;
      const edits = Array.from({ length: 10000 }, (_, i) => ({ table: 'sets', rowId: `${db.deviceId}-bulk-${i}`, fields: { exercise: 'squat', weightKg: 80, reps: 1 + (i % 100) } }));
      const b0 = performance.now(); await db.changeMany(edits); const bulk = performance.now() - b0;
      db.close();
      return { t, bulk, pushed };
    }, { N, SYNC: !!process.env.SYNC, raw: side === 'raw' });
    res[side].p50.push(med(out.t));
    res[side].mid.push(mid(out.t));
    if (out.bulk) res[side].bulk.push(out.bulk);
    if (out.pushed !== undefined) (res[side].pushes ||= []).push(out.pushed);
    await page.close();
  }
}
const f = (x) => x.toFixed(3);
const a = med(res.A.p50), b = med(res.B.p50), raw = med(res.raw.p50);
console.log(`change() p50 on disk (strict), medians of ${rounds} rounds of ${N}: A ${f(a)} ms, B ${f(b)} ms (B/A ${f(b / a)}), raw IndexedDB strict ${f(raw)} ms (A/raw ${f(a / raw)}, B/raw ${f(b / raw)})`);
const ma = med(res.A.mid), mb = med(res.B.mid), mr = med(res.raw.mid);
console.log(`mean of the middle half, medians of ${rounds} rounds: A ${f(ma)} ms, B ${f(mb)} ms (B/A ${f(mb / ma)}), raw ${f(mr)} ms (A/raw ${f(ma / mr)}, B/raw ${f(mb / mr)})`);
if (process.env.SYNC) console.log(`pushes during the ${N} change()s, medians: A ${med(res.A.pushes)}, B ${med(res.B.pushes)}`);
const rb = med(res.raw.bulk);
console.log(`changeMany(10,000): A ${f(med(res.A.bulk))} ms, B ${f(med(res.B.bulk))} ms (B/A ${f(med(res.B.bulk) / med(res.A.bulk))}), raw one transaction ${f(rb)} ms (A/raw ${f(med(res.A.bulk) / rb)}, B/raw ${f(med(res.B.bulk) / rb)})`);
await ctx.close();
process.exit(0);
