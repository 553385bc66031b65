// The Service Worker holds the queue (PROTOCOL §7), in real Chromium, against
// the real server, under real faults.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { backends, startServer, launch, newUser, until, workerDevice } from './helpers.mjs';

const NAME = 'e2e-sw';

for (const backend of backends()) {
  describe(`service worker on ${backend}`, () => {
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

    /** A device: a context with the worker installed and a page with `db` open. */
    const deviceWithWorker = (user, options) => workerDevice(browser, server, NAME, user, options);

    test('a Background Sync dispatched by CDP pushes the queue with no page doing it', async () => {
      const user = newUser('bgsync');
      const d = await deviceWithWorker(user, { autoSync: false });
      const [page] = d.pages;
      await page.evaluate(async () => {
        for (let i = 0; i < 5; i++) await db.change('sets', db.newRowId(), { exercise: 'lunge', weightKg: 20, reps: 10 + i });
      });
      assert.equal((await server.rows(user)).size, 0, 'nothing pushed by the page');
      await d.dispatchSync();
      await until(async () => (await server.rows(user)).size === 5, 'the worker to push');
      // The page hears the worker's steps over BroadcastChannel, without reload.
      await until(() => page.evaluate(() => db.pending().length === 0), 'the page to see the outbox drained');
      const phases = await page.evaluate(() => db.rows('sets').map((r) => db.status('sets', r._id).phase));
      assert.deepEqual([...new Set(phases)], ['synced']);
      await d.context.close();
    });

    test("the worker, given another user's token, never pushes this database's queue to that account", async () => {
      // Failed before the device named its user: the worker pushed alice's queue into bob's account.
      const alice = newUser('sw-alice');
      const bob = newUser('sw-bob');
      const d = await deviceWithWorker(alice, { autoSync: false });
      const [page] = d.pages;
      await page.evaluate(async () => {
        await db.change('sets', 'a-synced', { exercise: 'squat', weightKg: 80, reps: 5 });
        await db.sync();
        await db.change('sets', 'a-pending', { exercise: 'bench', weightKg: 60, reps: 8 });
      });
      await page.evaluate((t) => db.setToken(t), `dev:${bob}`); // shared with the worker
      await new Promise((r) => setTimeout(r, 300));
      await d.dispatchSync().catch(() => {});
      await until(() => page.evaluate(() => db.status('sets', 'a-pending').code === 'wrong_user'), 'the worker to be refused');
      assert.equal((await server.rows(bob)).size, 0, "nothing of alice's queue reached bob");
      assert.deepEqual(await page.evaluate(() => db.rows('sets')), [], 'nor are her rows shown');
      await page.evaluate((t) => db.setToken(t), `dev:${alice}`);
      await new Promise((r) => setTimeout(r, 300));
      await d.dispatchSync().catch(() => {});
      await until(async () => (await server.rows(alice)).size === 2, "alice's queue to reach alice");
      await d.context.close();
    });

    test('offline edits reach the server exactly once when the network returns', async () => {
      const user = newUser('offline-sw');
      const d = await deviceWithWorker(user);
      const [page] = d.pages;
      await d.context.setOffline(true);
      await page.evaluate(async () => {
        for (let i = 0; i < 3; i++) await db.change('sets', db.newRowId(), { exercise: 'pushup', weightKg: 0, reps: 20 + i });
      });
      const r = await page.evaluate(() => db.sync());
      assert.equal(r.error, 'offline');
      // The worker may already be trying (its `navigator.onLine` can lag): the
      // page sees its request out (awaiting-ack, the attempt is recorded before
      // it leaves), then a failed fetch, an unknown outcome — never delivered.
      const phases = await page.evaluate(() => db.rows('sets').map((x) => db.status('sets', x._id).phase));
      assert.equal(phases.length, 3);
      for (const p of phases) assert.ok(['pending', 'awaiting-ack', 'unknown-outcome'].includes(p), `phase ${p} while offline`);
      assert.equal((await server.rows(user)).size, 0, 'nothing reached the server while offline');
      await d.context.setOffline(false);
      // The sync registered while offline fires when the network is back.
      await until(async () => (await server.rows(user)).size === 3, 'the queue to reach the server');
      await until(() => page.evaluate(() => db.pending().length === 0), 'the outbox to drain');
      await new Promise((r) => setTimeout(r, 500));
      assert.equal((await server.rows(user)).size, 3, 'exactly once');
      await d.context.close();
    });

    test('requestSync() while the page knows it is offline sends nothing: rows stay pending, no attempt is charged', async () => {
      const user = newUser('sw-offline-ask');
      const d = await deviceWithWorker(user, { autoSync: false });
      const [page] = d.pages;
      await d.context.setOffline(true);
      await page.evaluate(() => db.change('sets', 'r1', { exercise: 'squat', weightKg: 80, reps: 5 }));
      for (let i = 0; i < 3; i++) {
        await page.evaluate(() => db.requestSync());
        await new Promise((r) => setTimeout(r, 500));
      }
      const seen = await page.evaluate(() => {
        const s = db.status('sets', 'r1');
        return { phase: s.phase, attempts: s.attempts, unknown: db.metrics().unknownOutcomes };
      });
      assert.deepEqual(seen, { phase: 'pending', attempts: 0, unknown: 0 });
      await d.context.setOffline(false);
      await until(async () => (await server.rows(user)).size === 1, 'the registered sync to deliver once online');
      await d.context.close();
    });

    test("a cycle of the worker that failed is tried again at its nextRetryAt, with no page syncing", async () => {
      const user = newUser('sw-retry');
      const d = await deviceWithWorker(user, { autoSync: false });
      const [page] = d.pages;
      await page.evaluate(() => db.change('sets', 'r1', { exercise: 'squat', weightKg: 80, reps: 5 }));
      await server.faults({ failBeforeCommit: 1 });
      const dispatched = d.dispatchSync().catch(() => {});
      await until(() => page.evaluate(() => db.status('sets', 'r1').nextRetryAt != null), 'the failed try and its next one');
      const due = await page.evaluate(() => db.status('sets', 'r1').nextRetryAt);
      await until(async () => (await server.rows(user)).size === 1, 'the worker to try again when it said');
      assert.ok(Date.now() >= due - 50, 'not before it said');
      await until(() => page.evaluate(() => db.status('sets', 'r1').phase === 'synced'), 'synced everywhere');
      await dispatched;
      await d.context.close();
    });

    test('the network flipped for 20 s under two tabs, the worker holding the queue: every edit once, all synced, none exhausted', async () => {
      // A guard (it held before the database could be closed under the library): a flapping network never
      // doubles an edit, never loses one, and never runs retries out.
      const user = newUser('flip');
      const d = await deviceWithWorker(user);
      const [a] = d.pages;
      const b = await d.addPage();
      let online = true;
      const flipping = (async () => {
        const t0 = Date.now();
        while (Date.now() - t0 < 20_000) {
          online = !online;
          await d.context.setOffline(!online);
          await new Promise((r) => setTimeout(r, 700 + Math.floor(Math.random() * 900)));
        }
        await d.context.setOffline(false);
      })();
      const edits = await Promise.all([a, b].map((p, n) => p.evaluate(async (n) => {
        const ids = [];
        const t0 = Date.now();
        while (Date.now() - t0 < 18_000) {
          const id = db.newRowId();
          await db.change('sets', id, { exercise: 'flip', weightKg: n, reps: ids.length + 1 });
          ids.push(id);
          db.requestSync().catch(() => {});
          await new Promise((r) => setTimeout(r, 400));
        }
        return ids;
      }, n)));
      await flipping;
      const all = edits.flat();
      await a.evaluate(() => db.requestSync());
      await until(async () => (await server.rows(user)).size === all.length, `all ${all.length} edits on the server`, 60_000);
      await until(() => a.evaluate((ids) => ids.every((id) => db.status('sets', id)?.phase === 'synced'), all), 'every edit synced', 30_000);
      const [ma, mb] = await Promise.all([a, b].map((p) => p.evaluate(() => db.metrics())));
      assert.equal(ma.recovery, null, `no stop: ${ma.recoveryReason}`);
      assert.equal(mb.recovery, null);
      assert.equal((await server.rows(user)).size, all.length, 'each edit exactly once');
      await d.context.close();
    });

    test('two tabs: an edit in one appears in the other without reload, one push at a time', async () => {
      const user = newUser('tabs');
      const d = await deviceWithWorker(user);
      const [a] = d.pages;
      const b = await d.addPage();
      const id = await a.evaluate(async () => {
        const id = db.newRowId();
        await db.change('sets', id, { exercise: 'press', weightKg: 40, reps: 8 });
        return id;
      });
      await until(() => b.evaluate((id) => db.row('sets', id)?.reps === 8, id), 'tab b to see the edit');
      // Both tabs edit and sync at once, many times: Web Locks keep one cycle at a time.
      await Promise.all([a, b].map((p, n) => p.evaluate(async ({ id, n }) => {
        for (let i = 0; i < 10; i++) {
          await db.change('sets', id, { reps: 1 + n * 10 + i });
          db.sync().catch(() => {});
        }
        await db.sync();
      }, { id, n })));
      await until(async () => {
        const ra = await a.evaluate((id) => db.row('sets', id), id);
        const rb = await b.evaluate((id) => db.row('sets', id), id);
        const srv = (await server.rows(user)).get(`sets/${id}`);
        return srv && JSON.stringify(ra) === JSON.stringify(rb) && ra.reps === srv.fields.reps;
      }, 'the tabs and the server to agree');
      const metrics = await server.metrics();
      // The server counts push requests of one device in flight at once (arrival to answer).
      const max = Number(/marksync_push_concurrent_same_device_max (\d+)/.exec(metrics)?.[1]);
      assert.equal(max, 1, `one push of this device at a time, saw ${max}`);
      await d.context.close();
    });

    test('the worker stopped mid-push: the next sync completes, nothing lost or duplicated', async () => {
      const user = newUser('stopped');
      const d = await deviceWithWorker(user, { autoSync: false });
      const [page] = d.pages;
      await page.evaluate(async () => {
        for (let i = 0; i < 20; i++) await db.change('sets', db.newRowId(), { exercise: 'row', weightKg: 30, reps: 1 + i });
      });
      await server.faults({ delayMs: 1500 });
      await d.dispatchSync();
      await new Promise((r) => setTimeout(r, 400));
      await d.cdp.send('ServiceWorker.stopAllWorkers');
      await server.faults({ delayMs: 0 });
      await new Promise((r) => setTimeout(r, 1500));
      await d.dispatchSync();
      await until(() => page.evaluate(() => db.pending().length === 0), 'the outbox to drain', 20000);
      const rows = await server.rows(user);
      assert.equal(rows.size, 20);
      await d.context.close();
    });

    test('a new worker takes over while the old one has a push out: nothing lost, no op renamed, statuses true', async () => {
      const user = newUser('update');
      const d = await deviceWithWorker(user, { autoSync: false });
      const [page] = d.pages;
      const ids = await page.evaluate(async () => {
        const ids = [];
        for (let i = 0; i < 10; i++) ids.push(await db.change('sets', db.newRowId(), { exercise: 'dip', weightKg: 0, reps: 1 + i }));
        return ids;
      });
      await server.faults({ delayMs: 2000 });
      await d.dispatchSync();
      await until(() => page.evaluate(() => db.rows('sets').every((r) => db.status('sets', r._id).phase === 'awaiting-ack')),
        'the old worker to have the push out');
      // The app ships a new worker: it installs, skips waiting and claims the pages while the old one's request is out.
      const swapped = await page.evaluate(async () => {
        const before = navigator.serviceWorker.controller?.scriptURL;
        const changed = new Promise((r) => navigator.serviceWorker.addEventListener('controllerchange', r, { once: true }));
        await navigator.serviceWorker.register('/test/test-sw.js?v=2', { type: 'module', scope: '/test/' });
        await changed;
        return [before, navigator.serviceWorker.controller?.scriptURL];
      });
      assert.notEqual(swapped[0], swapped[1], 'the new worker controls the page');
      // Meanwhile no row reads as merely queued: each was sent, its outcome is not known yet.
      const phases = await page.evaluate(() => db.rows('sets').map((r) => db.status('sets', r._id).phase));
      for (const p of phases) assert.ok(['awaiting-ack', 'unknown-outcome', 'synced'].includes(p), `phase ${p} during the update`);
      await server.faults({ delayMs: 0 });
      await new Promise((r) => setTimeout(r, 2500));
      await d.dispatchSync();
      await until(() => page.evaluate(() => db.pending().length === 0), 'the outbox to drain', 20000);
      const rows = await server.rows(user);
      assert.equal(rows.size, 10, 'every edit reached the server');
      const device = await page.evaluate(() => db.deviceId);
      const marks = new Set(JSON.stringify([...rows.values()]).match(new RegExp(`${device}:\\d+`, 'g')));
      assert.deepEqual([...marks].sort(), [...ids].sort(), 'the server holds exactly the opIds born on the device');
      const after = await page.evaluate(() => db.rows('sets').map((r) => db.status('sets', r._id).phase));
      assert.deepEqual(after, Array(10).fill('synced'));
      await d.context.close();
    });

    test('the server is killed during edits and restarted: everything converges', async () => {
      const user = newUser('restart');
      const own = await startServer(backend);
      const ctx = await browser.newContext();
      const page = await ctx.newPage();
      await page.goto(`${own.url}/test/harness.html`);
      await page.evaluate(() => window.ready);
      await page.evaluate(async (user) => {
        window.db = await window.Marksync.open({ endpoint: location.origin, token: `dev:${user}`, name: 'restart', autoSync: false });
        for (let i = 0; i < 10; i++) await db.change('sets', db.newRowId(), { exercise: 'squat', weightKg: 100, reps: 1 + i });
        window.syncing = (async () => {
          for (let i = 0; i < 5; i++) {
            await db.change('sets', db.newRowId(), { exercise: 'squat', weightKg: 100, reps: 50 + i });
            await db.sync().catch(() => {});
          }
        })();
      }, user);
      await new Promise((r) => setTimeout(r, 20));
      await own.kill();
      await page.evaluate(() => window.syncing);
      await own.restart();
      const final = await page.evaluate(async () => {
        const r = await db.sync();
        return { ok: r.ok, pending: db.pending().length, rows: db.rows('sets').length };
      });
      assert.equal(final.ok, true);
      assert.equal(final.pending, 0);
      assert.equal(final.rows, 15);
      assert.equal((await own.rows(user)).size, 15);
      await ctx.close();
      await own.stop();
    });
  });
}
