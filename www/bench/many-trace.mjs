// Where `changeMany` of 10,000 spends its time, on disk (a persistent
// profile, strict durability), next to raw IndexedDB's one transaction of
// 10,000 puts: wall time of each, then (PROF=1) a CPU profile's self times of
// one `changeMany`, the wasm's functions named when the build kept names.
//
//   [PROF=1] [ROUNDS=3] node www/bench/many-trace.mjs
import { chromium } from 'playwright-core';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer, CHROMIUM_ARGS } from '../test/helpers.mjs';
import { startProfile, printProfile } from './profile.mjs';
const server = await startServer('sqlite');
const ctx = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'mt-')), { executablePath: '/usr/bin/chromium', headless: true, args: CHROMIUM_ARGS });
const page = await ctx.newPage();
await page.goto(`${server.url}/test/harness.html`);
await page.evaluate(() => window.ready);
const cdp = await ctx.newCDPSession(page);
const rounds = Number(process.env.ROUNDS || 3);
const med = (a) => [...a].sort((x, y) => x - y)[a.length >> 1];
const res = { raw: [], many: [] };
for (let r = 0; r < rounds; r++) {
  const prof = process.env.PROF && r === rounds - 1;
  const out = await page.evaluate(async () => {
    const db = await new Promise((res, rej) => { const q = indexedDB.open('raw-' + Math.random(), 1); q.onupgradeneeded = () => q.result.createObjectStore('a'); q.onsuccess = () => res(q.result); q.onerror = () => rej(q.error); });
    const b0 = performance.now();
    const tx = db.transaction(['a'], 'readwrite', { durability: 'strict' });
    for (let i = 0; i < 10000; i++) tx.objectStore('a').put({ exercise: 'squat', weightKg: 80, reps: i }, i);
    await new Promise((r) => { tx.oncomplete = r; });
    const raw = performance.now() - b0;
    db.close();
    window.m = await window.Marksync.open({ endpoint: location.origin, token: 'dev:mt', name: 'mt-' + Math.random(), autoSync: false, live: false, persist: false });
    await window.m.change('sets', window.m.newRowId(), { exercise: 'squat', weightKg: 80, reps: 1 });
    return { raw };
  });
  if (prof) await startProfile(cdp);
  const many = await page.evaluate(async () => {
    const db = window.m;
    const edits = Array.from({ length: 10000 }, (_, i) => ({ table: 'sets', rowId: `${db.deviceId}-bulk-${i}`, fields: { exercise: 'squat', weightKg: 80, reps: i } }));
    const b0 = performance.now(); await db.changeMany(edits); const t = performance.now() - b0;
    db.close();
    return t;
  });
  res.raw.push(out.raw); res.many.push(many);
  if (prof) await printProfile(cdp);
}
console.log(`changeMany(10,000) on disk, strict, median of ${rounds}: ${med(res.many).toFixed(1)} ms; raw one transaction ${med(res.raw).toFixed(1)} ms (${(med(res.many) / med(res.raw)).toFixed(2)}×)`);
await ctx.close();
await server.stop?.();
process.exit(0);
