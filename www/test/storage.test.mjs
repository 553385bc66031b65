// A database closed under the library (PROTOCOL §7), in real Chromium against
// the real server: the site's data cleared mid-push (CDP
// `Storage.clearDataForOrigin`) in a page and in the Service Worker; and the
// quota used up (CDP `Storage.overrideQuotaForOrigin`, sent before the page
// first touches the origin's storage: sent later, Chromium keeps the quota
// it already gave).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { backends, startServer, launch, device, newUser, until, workerDevice } from './helpers.mjs';


for (const backend of backends()) {
  describe(`storage closed under the library on ${backend}`, () => {
    let server;
    let browser;
    before(async () => {
      server = await startServer(backend);
      browser = await launch();
    });
    after(async () => {
      await browser?.close();
      await server?.stop();
    });

    test('the site data cleared mid-push: the page says so, fills its database again, and nothing is lost or doubled', async () => {
      // Failed before: the four rows read awaiting-ack forever, and every later change() was `storage_failed`.
      const user = newUser('cleared');
      const { context, page } = await device(browser, server);
      const cdp = await context.newCDPSession(page);
      await page.evaluate(async (user) => {
        window.db = await window.Marksync.open({ endpoint: location.origin, token: `dev:${user}`, name: 'cleared' });
        window.heard = [];
        db.subscribe(() => window.heard.push(db.metrics().recovery));
      }, user);
      await server.faults({ delayMs: 1500 });
      const ids = await page.evaluate(async () => {
        const ids = ['a', 'b', 'c', 'd'];
        for (const [i, id] of ids.entries()) await db.change('sets', id, { exercise: 'squat', weightKg: 60, reps: i + 1 });
        return ids;
      });
      await page.waitForFunction(() => db.status('sets', 'a').phase === 'awaiting-ack', null, { timeout: 10_000 });
      // Recorded while the push is out: queued, never sent when the data is cleared.
      await page.evaluate(() => db.change('sets', 'unsent', { exercise: 'bench', weightKg: 50, reps: 9 }));
      ids.push('unsent');
      await cdp.send('Storage.clearDataForOrigin', { origin: server.url, storageTypes: 'indexeddb' });
      await page.waitForFunction(() => window.heard.includes('storage'), null, { timeout: 10_000 });
      const told = await page.evaluate(() => ({ m: db.metrics(), st: db.status('sets', 'a') }));
      assert.match(told.m.recoveryReason ?? told.st.reason ?? '', /cleared|closed/, 'in words a person understands');
      await server.faults({ delayMs: 0 });
      // The server applied the four (they come back by pull, each once); the unsent edit was kept and sent.
      await page.waitForFunction(
        (ids) => ids.every((id) => db.status('sets', id)?.phase === 'synced') && db.pending().length === 0 && db.metrics().recovery === null,
        ids,
        { timeout: 20_000 },
      );
      assert.equal((await server.rows(user)).size, 5);
      const m = await page.evaluate(() => db.metrics());
      assert.equal(m.storageResets, 1, 'the reset is counted');
      // Later edits reach the server, from the database that came back.
      await page.evaluate(async () => {
        await db.change('sets', 'e', { exercise: 'row', weightKg: 40, reps: 12 });
        await db.sync();
      });
      await until(async () => (await server.rows(user)).size === 6, 'the later edit on the server');
      await page.reload();
      await page.evaluate(() => window.ready);
      const after = await page.evaluate(async (user) => {
        const db = await window.Marksync.open({ endpoint: location.origin, token: `dev:${user}`, name: 'cleared', autoSync: false });
        return { rows: db.rows('sets').map((r) => r._id).sort(), pending: db.pending().length };
      }, user);
      assert.deepEqual(after, { rows: ['a', 'b', 'c', 'd', 'e', 'unsent'], pending: 0 }, 'on disk after a reload');
      await context.close();
    });

    test('edits under way when the site data is cleared heal: none rejects, each reaches the server once', async () => {
      // Failed before: some rejected `storage_failed` ("the transaction was aborted", or "[object IDBRequest]"): the
      // browser aborts them before the connection's close event reaches the library.
      const user = newUser('clear-burst');
      const { context, page } = await device(browser, server);
      const cdp = await context.newCDPSession(page);
      await page.evaluate(async (user) => {
        window.db = await window.Marksync.open({ endpoint: location.origin, token: `dev:${user}`, name: 'clear-burst', autoSync: false, live: false });
        window.out = [];
      }, user);
      for (let round = 0; round < 2; round++) {
        // Edits twenty at a time, without pause, while the data is cleared.
        await page.evaluate(() => {
          window.go = true;
          (async () => {
            while (window.go) {
              await Promise.all(Array.from({ length: 20 }, () => {
                const id = db.newRowId();
                return db.change('sets', id, { exercise: 'squat', weightKg: 60, reps: 5 })
                  .then(() => out.push({ id }), (e) => out.push({ id, failed: `${e.code}: ${e.message}` }));
              }));
            }
          })();
        });
        await new Promise((r) => setTimeout(r, 300));
        await cdp.send('Storage.clearDataForOrigin', { origin: server.url, storageTypes: 'indexeddb' });
        await new Promise((r) => setTimeout(r, 700));
        await page.evaluate(() => { window.go = false; });
        await new Promise((r) => setTimeout(r, 200));
      }
      const out = await page.evaluate(() => window.out);
      assert.deepEqual(out.filter((o) => o.failed).map((o) => o.failed), [], 'no edit under way rejected');
      await until(() => page.evaluate(() => db.sync().then((r) => r.ok && db.pending().length === 0, () => false)), 'a sync after the clears');
      const rows = await server.rows(user);
      assert.equal(rows.size, out.length, 'every edit on the server, once');
      await context.close();
    });

    test('the site data cleared under the worker: the worker opens a fresh database and pushes the edits made after', async () => {
      // Failed before: the worker kept its first connection, closed, and every later Background Sync did nothing.
      const user = newUser('sw-cleared');
      const d = await workerDevice(browser, server, 'e2e-sw', user, { autoSync: false });
      const [page] = d.pages;
      await page.evaluate(async () => {
        await db.change('sets', 'first', { exercise: 'squat', weightKg: 60, reps: 1 });
      });
      await d.dispatchSync();
      await until(async () => (await server.rows(user)).size === 1, 'the worker to push the first edit');
      await page.waitForFunction(() => db.pending().length === 0, null, { timeout: 10_000 });
      await d.cdp.send('Storage.clearDataForOrigin', { origin: server.url, storageTypes: 'indexeddb' });
      await page.waitForFunction(() => db.metrics().storageResets >= 1, null, { timeout: 10_000 });
      await page.evaluate(async () => {
        for (let i = 0; i < 3; i++) await db.change('sets', `after-${i}`, { exercise: 'lunge', weightKg: 20, reps: 10 + i });
        await db.requestSync();
      });
      await d.dispatchSync();
      await until(async () => (await server.rows(user)).size === 4, 'the worker to push the edits made after the clear', 20_000);
      await page.waitForFunction(
        () => ['first', 'after-0', 'after-1', 'after-2'].every((id) => db.status('sets', id)?.phase === 'synced'),
        null,
        { timeout: 20_000 },
      );
      await d.context.close();
    });

    test('storage full: the edit fails with storage_full, nothing of it is written, and it succeeds once there is room', async () => {
      const user = newUser('full');
      const context = await browser.newContext();
      const page = await context.newPage();
      const cdp = await context.newCDPSession(page);
      await cdp.send('Storage.overrideQuotaForOrigin', { origin: server.url, quotaSize: 256 * 1024 });
      await page.goto(`${server.url}/test/harness.html`);
      await page.evaluate(() => window.ready);
      const open = (user) => page.evaluate(async (user) => {
        window.db = await window.Marksync.open({ endpoint: location.origin, token: `dev:${user}`, name: 'full', autoSync: false });
      }, user);
      await open(user);
      await page.evaluate(() => db.change('sets', 'kept', { exercise: 'squat', weightKg: 60, reps: 5 }));
      const big = await page.evaluate(async () => {
        const edits = Array.from({ length: 2000 }, (_, i) => ({ table: 'sets', rowId: `big-${i}`, fields: { exercise: 'x'.repeat(500), weightKg: i, reps: 1 } }));
        try {
          await db.changeMany(edits);
          return { ok: true };
        } catch (e) {
          return { ok: false, code: e.code, message: e.message, pending: db.pending().length, rows: db.rows('sets').length };
        }
      });
      assert.equal(big.ok, false, 'a 256 KB quota must refuse 1 MB');
      assert.equal(big.code, 'storage_full', big.message);
      assert.deepEqual({ pending: big.pending, rows: big.rows }, { pending: 1, rows: 1 }, 'nothing half-written');
      await page.reload();
      await page.evaluate(() => window.ready);
      await open(user);
      assert.deepEqual(await page.evaluate(() => ({ pending: db.pending().length, rows: db.rows('sets').length })), { pending: 1, rows: 1 },
        'nothing half-written on disk');
      // Room again: the same edits are recorded.
      await cdp.send('Storage.overrideQuotaForOrigin', { origin: server.url });
      await page.reload();
      await page.evaluate(() => window.ready);
      await open(user);
      const n = await page.evaluate(async () => {
        const edits = Array.from({ length: 2000 }, (_, i) => ({ table: 'sets', rowId: `big-${i}`, fields: { exercise: 'x'.repeat(500), weightKg: i, reps: 1 } }));
        await db.changeMany(edits);
        return db.pending().length;
      });
      assert.equal(n, 2001);
      await context.close();
    });
  });
}
