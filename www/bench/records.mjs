// What IndexedDB charges per record, not per byte: one strict transaction on
// disk (a persistent profile) of 10,000 small objects (raw's `changeMany`
// twin), 10,000 op texts of ~200 bytes (one record per op, the outbox before
// runs), and the same texts as runs of 256 and of 1,000 ops per record (the
// outbox's runs). Rounds alternate the kinds; prints each kind's times and
// median.
//
//   node www/bench/records.mjs [rounds]
import { chromium } from 'playwright-core';
import http from 'node:http';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CHROMIUM_ARGS } from '../test/helpers.mjs';
const rounds = Number(process.argv[2] || 5);
const srv = http.createServer((q, r) => { r.setHeader('content-type', 'text/html'); r.end('<p>records</p>'); }).listen(0);
const ctx = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'records-')), { executablePath: '/usr/bin/chromium', headless: true, args: CHROMIUM_ARGS });
const page = await ctx.newPage();
await page.goto(`http://127.0.0.1:${srv.address().port}/`);
const out = await page.evaluate(async (rounds) => {
  const open = () => new Promise((res, rej) => { const q = indexedDB.open('records-' + Math.random(), 1); q.onupgradeneeded = () => q.result.createObjectStore('a'); q.onsuccess = () => res(q.result); q.onerror = () => rej(q.error); });
  const dev = crypto.randomUUID();
  const text = (i) => JSON.stringify({ opId: `${dev}:${i}`, table: 'sets', rowId: `${dev}-bulk-${i}`, fields: { exercise: 'squat', reps: i, weightKg: 80 }, at: 1796581694105 + i, schema: 1, seen: 0 });
  const runs = (len) => (s) => { for (let r = 0; r < 10000; r += len) { const a = []; for (let i = r; i < Math.min(r + len, 10000); i++) a.push(text(i)); s.put(a.join('\n'), 1796581694105 + Math.min(r + len, 10000) - 1 + 0.5); } };
  const kinds = {
    'objects, one per record': (s) => { for (let i = 0; i < 10000; i++) s.put({ exercise: 'squat', weightKg: 80, reps: i }, i); },
    'op texts, one per record': (s) => { for (let i = 0; i < 10000; i++) s.put(text(i), 1796581694105 + i); },
    'op texts, runs of 256': runs(256),
    'op texts, runs of 1,000': runs(1000),
  };
  const res = {};
  for (let round = 0; round < rounds; round++) {
    for (const [k, f] of Object.entries(kinds)) {
      const db = await open();
      const t0 = performance.now();
      const tx = db.transaction(['a'], 'readwrite', { durability: 'strict' });
      f(tx.objectStore('a'));
      await new Promise((r) => { tx.oncomplete = r; });
      (res[k] ||= []).push(performance.now() - t0);
      db.close();
    }
  }
  return res;
}, rounds);
for (const [k, v] of Object.entries(out)) {
  const s = [...v].sort((a, b) => a - b);
  console.log(`${k}: ${v.map((x) => x.toFixed(0)).join(', ')} ms; median ${s[s.length >> 1].toFixed(1)} ms`);
}
await ctx.close();
srv.close();
