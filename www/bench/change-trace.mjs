// Where one durable `change()` spends its time, on disk (a persistent
// profile, strict durability), next to raw IndexedDB doing a part of its work:
// one put per transaction; a read then the puts; the read and the puts queued
// at once (what `change()` does since it stopped waiting on the read).
// Prints each one's p50 and the mean of its middle half (second of two
// rounds; the page's clock ticks by 0.1 ms, the mean sees between the ticks); PROF=1 adds a CPU profile's
// self times; ONLY=change measures `change()` alone.
//
//   N=2000 [PROF=1] [ONLY=change] node www/bench/change-trace.mjs
import { chromium } from 'playwright-core';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer, CHROMIUM_ARGS } from '../test/helpers.mjs';
import { startProfile, printProfile } from './profile.mjs';
const server = await startServer('sqlite');
const ctx = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'tr-')), { executablePath: '/usr/bin/chromium', headless: true, args: CHROMIUM_ARGS });
const page = await ctx.newPage();
await page.goto(`${server.url}/test/harness.html`);
await page.waitForFunction(() => window.ready);
await page.evaluate(() => window.ready);
const N = Number(process.env.N || 2000);
const cdp = await ctx.newCDPSession(page);
if (process.env.PROF) await startProfile(cdp);
if (process.env.ONLY) await page.evaluate((o) => { window.ONLY = o; }, process.env.ONLY);
const out = await page.evaluate(async (N) => {
  const p50 = (a) => { a.sort((x, y) => x - y); const mid = a.slice(Math.floor(a.length / 4), Math.ceil(a.length * 3 / 4)); return [+a[Math.floor(a.length / 2)].toFixed(3), +(mid.reduce((s, x) => s + x, 0) / mid.length).toFixed(3)]; };
  const openRaw = (name) => new Promise((res, rej) => { const r = indexedDB.open(name, 1); r.onupgradeneeded = () => { r.result.createObjectStore('a'); r.result.createObjectStore('m'); r.result.createObjectStore('p').put({ c: 0 }, 'meta'); }; r.onsuccess = () => res(r.result); r.onerror = () => rej(r.error); });
  const raw = await openRaw('raw-' + Math.random());
  const done = (tx) => new Promise((res, rej) => { tx.oncomplete = res; tx.onerror = () => rej(tx.error); });
  const res = {};
  const runs = {
    rawPut: async (i) => { const tx = raw.transaction(['a'], 'readwrite', { durability: 'strict' }); tx.objectStore('a').put({ exercise: 'squat', weightKg: 80, reps: i }, i); await done(tx); },
    rawGetThenPut: async (i) => { const tx = raw.transaction(['a', 'm'], 'readwrite', { durability: 'strict' }); await new Promise((r) => { tx.objectStore('m').get('meta').onsuccess = r; }); tx.objectStore('a').put({ reps: i }, i); tx.objectStore('m').put({ c: i }, 'meta'); await done(tx); },
    rawGetAndPut: async (i) => { const tx = raw.transaction(['a', 'm'], 'readwrite', { durability: 'strict' }); tx.objectStore('m').get('meta'); tx.objectStore('a').put({ reps: i }, i); tx.objectStore('m').put({ c: i }, 'meta'); await done(tx); },
    rawLastAndPut: async (i) => { const tx = raw.transaction(['a'], 'readwrite', { durability: 'strict' }); tx.objectStore('a').openKeyCursor(null, 'prev'); tx.objectStore('a').put({ reps: i }, i); await done(tx); },
    rawAboveAndPut: async (i) => { const tx = raw.transaction(['a'], 'readwrite', { durability: 'strict' }); tx.objectStore('a').getAll(IDBKeyRange.lowerBound(i - 1, true)); tx.objectStore('a').put({ reps: i }, i); await done(tx); },
    // Layout 8's recording: one store, the first record above the last key
    // known (the meta record, keyed above every op, when none is queued since).
    rawFirstAboveAndPut: async (i) => { const tx = raw.transaction(['p'], 'readwrite', { durability: 'strict' }); tx.objectStore('p').getAll(IDBKeyRange.lowerBound(i - 1, true), 1); tx.objectStore('p').put({ reps: i }, i); await done(tx); },
    rawCursorAboveAndPut: async (i) => { const tx = raw.transaction(['p'], 'readwrite', { durability: 'strict' }); tx.objectStore('p').openCursor(IDBKeyRange.lowerBound(i - 1, true)); tx.objectStore('p').put({ reps: i }, i); await done(tx); },
    rawGetLastAndPut: async (i) => { const tx = raw.transaction(['a', 'm'], 'readwrite', { durability: 'strict' }); tx.objectStore('m').get('meta'); tx.objectStore('a').openKeyCursor(null, 'prev'); tx.objectStore('a').put({ reps: i }, i); await done(tx); },
  };
  const db = await window.Marksync.open({ endpoint: location.origin, token: 'dev:trace', name: 'trace-' + Math.random(), autoSync: false, live: false, persist: false });
  runs.change = async (i) => { await db.change('sets', db.newRowId(), { exercise: 'squat', weightKg: 80, reps: i }); };
  // ONLY=many: `changeMany` of 1,000 edits per call (N calls), beside
  // rawMany: 1,000 puts in one strict transaction.
  runs.many = async (i) => { await db.changeMany(Array.from({ length: 1000 }, (_, j) => ({ table: 'sets', fields: { exercise: 'squat', weightKg: 80, reps: i + j } }))); };
  runs.rawMany = async (i) => { const tx = raw.transaction(['a'], 'readwrite', { durability: 'strict' }); const a = tx.objectStore('a'); for (let j = 0; j < 1000; j++) a.put({ exercise: 'squat', weightKg: 80, reps: i + j }, i * 1000 + j); await done(tx); };
  for (const round of [0, 1]) {
    for (const [k, f] of Object.entries(runs)) {
      if (window.ONLY ? !window.ONLY.split(',').includes(k) : k === 'many' || k === 'rawMany') continue;
      const t = [];
      for (let i = 0; i < N; i++) { const t0 = performance.now(); await f(round * N + i); t.push(performance.now() - t0); }
      if (round) res[k] = p50(t);
    }
  }
  return res;
}, N);
console.log(JSON.stringify(out));
if (process.env.PROF) await printProfile(cdp);
await ctx.close();
await server.stop?.();
process.exit(0);
