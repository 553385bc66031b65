// The size budget of what a page loads for `import { Marksync } from 'marksync'`:
// the wasm, its glue and snippets, and index.js, each gzip -9, summed (KB =
// 1,024 bytes, as BENCHMARKS.md counts). Size is deterministic, so a test may
// hold it: the build fails when the total passes the budget. The budget only
// ever goes down, as work lands (goal: 80 KB); it keeps a few percent of room
// for another compiler release.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { homedir } from 'node:os';
import { gzipSync } from 'node:zlib';
import { root } from './helpers.mjs';

// Raised once, from 400: concurrent overwrites (PROTOCOL §2a) brought 27 KB
// of wasm (notes in every mark, conflicts stored and shown); the work on
// bytes takes it back down (420 → 410: no stable sort left in the wasm;
// 410 → 408: no serde_json::Value in it; 408 → 428: the lazy store's reads,
// issue 20; 428 → 440: indexes kept on disk, kept by IndexedDB in the step's
// transaction, +10.3 KB; 440 → 452: queries and live queries read from
// them over a lazy store, +12.1 KB; 452 → 456: a page of entries in one
// request (getAllRecords, or a key cursor stepping back) and live answers
// updated from a step's rows without a read, +5.7 KB; 456 → 458: answers
// kept and followed step by step, +2.0 KB; 458 → 462: a sync state heard
// late not taken, and the lifts of a stop written under the cycle lock,
// +1.0 KB, and a lazy open that finds the chunks it needs by key cursors
// around them, +3.5 KB (26–39 ms less at each open of 1M rows); 462 → 463:
// a page may open lazily, its reads of rows answering Promises, +1.5 KB;
// 463 → 460: every async method through one future_to_promise of a boxed
// future, −3.9 KB; 460 → 461: no meta record written per edit, its check
// read from the outbox instead, +1.4 KB for 0.88× the time of a durable
// `change()`; 461 → 437: small maps (an op's fields, a row's marks, the
// schema's tables, a row's queued ats) as sorted vectors, not trees, stored
// types handed to JS through their JSON, one sort for cold lists, −24.4 KB
// — BENCHMARKS.md, "The package, step by step"); 437 → 408: the browser
// build at opt-level "z" with the inliner's threshold at 40, −29.1 KB;
// 408 → 412: a space's pending invitations listed for its owners, and the
// member and invitation lists read whole, page after page, +4.1 KB;
// 412 → 410: one serde_json reader and one writer in the wasm, not two
// of each (a legacy chunk read as text, a row's size written out), −2.6 KB;
// 410 → 409: wasm-opt -Oz until it converges, −0.9 KB; 409 → 397: the
// refusals, conflicts, sets of names and followed spaces as sorted vectors,
// the outbox a deque, not trees, −12.3 KB; 397 → 395: wasm-opt's
// --flatten --rereloop before -Oz, −2.6 KB; 395 → 398: the outbox's
// runs (a `changeMany` of 10,000 in 40 records, not 10,000: 0.26× the
// time, 0.38× raw IndexedDB's), +3.6 KB; 398 → 384: serde_json without
// std, IndexedDB's failures said as thrown, a step told to the other
// contexts record by record (−5.4 KB), the glue minified (−5.5 KB), -Oz
// once more (−0.6 KB), cold maps on types the wasm already has (−1.7 KB);
// 384 → 373: codes, roles and field types read and written as their own
// word (−2.2 KB), every struct read from an object only (−9.7 KB);
// 373 → 370: talc for the allocator, not dlmalloc (−2.4 KB). (The
// inliner's threshold at 25 saved 9.9 KB more but wrote edits and merged
// ops in memory 1.2–1.25× slower: not kept.) 370 → 378: numbers read
// back as the very doubles written (serde_json's `float_roundtrip`: its
// fast parser landed one ULP off on 13% of random doubles), +8.9 KB;
// 378 → 380: every argument read through calls that catch what a getter or
// a Proxy's trap throws (it left the engine borrowed for good), +1.3 KB;
// 380 → 381: an op too large for the server rejected in its words (it
// blocked sync both ways for good), another context's orphaned request
// settled by a context left open, a refusal probed until answered, a
// gateway's answer named, +1.3 KB; 381 → 382: a 503's `Retry-After`
// honoured (a device knocked again within a second on a server that had
// asked for 5), +0.3 KB; 382 → 384: a poke that waits for that too, a
// lazy read that never answers a row twice, a read under way at close()
// ending `closed`, names no edit could write refused in reads, +1.9 KB;
// 384 → 385: a schema edited under the same version fetched again (pulls
// name its `ETag`), defaults shown in every read and index, a tab's old
// failure not told after another context's answer, +1.3 KB; 385 → 386:
// unknown option keys refused, edits under way when the site data is
// cleared healed, +0.3 KB.
const BUDGET_KB = 386;

test(`the page's marksync is at most ${BUDGET_KB} KB gzip`, () => {
  const pkg = join(root, 'www', 'pkg');
  const files = ['marksync_bg.wasm', 'marksync.js'].map((f) => join(pkg, f));
  const snippets = join(pkg, 'snippets');
  if (existsSync(snippets)) {
    for (const d of readdirSync(snippets)) for (const f of readdirSync(join(snippets, d))) files.push(join(snippets, d, f));
  }
  files.push(join(root, 'www', 'index.js'));
  const sizes = files.map((f) => [f.slice(root.length + 1), gzipSync(readFileSync(f), { level: 9 }).length]);
  const total = sizes.reduce((s, [, n]) => s + n, 0);
  console.log(`# ${(total / 1024).toFixed(1)} KB gzip: ${sizes.map(([f, n]) => `${f} ${(n / 1024).toFixed(1)}`).join(', ')}`);
  assert.ok(total <= BUDGET_KB * 1024, `${(total / 1024).toFixed(1)} KB gzip is over the budget of ${BUDGET_KB} KB`);
});

// What is shipped names no path of the machine that built it: the
// dependencies' panic locations are remapped from the registry's root
// (scripts/build-www.sh).
test('the wasm names no path of the machine that built it', () => {
  const wasm = readFileSync(join(root, 'www', 'pkg', 'marksync_bg.wasm')).toString('latin1');
  for (const path of ['/registry/src/', homedir() + '/', root + '/']) {
    if (path.length > 2) assert.ok(!wasm.includes(path), `the wasm names ${path}`);
  }
});
