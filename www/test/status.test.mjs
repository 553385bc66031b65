// What the screen says about an edit is true in every tab and after every
// reload; retries are bounded; a server older than the app is waited for
// and healed from alone (docs/protocol.md §5, §7). Real Chromium, real
// IndexedDB, the real server on SQLite and PostgreSQL.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { backends, startServer, launch, newUser } from './helpers.mjs';

const schema = (version) => ({
  version,
  tables: {
    sets: {
      fields: {
        exercise: { type: 'string', required: true, maxLength: 100 },
        weightKg: { type: 'number', required: true, min: 0, max: 1000 },
        reps: { type: 'integer', required: true, min: 1, max: 100 },
      },
    },
  },
});

for (const backend of backends()) {
  describe(`status and retries on ${backend}`, () => {
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

    /** Two tabs of one browser profile: one IndexedDB, one BroadcastChannel, one Web Lock. */
    async function tabs(user, n, opts = {}, srv = server) {
      const context = await browser.newContext();
      const pages = [];
      for (let i = 0; i < n; i++) {
        const page = await context.newPage();
        page.on('pageerror', (e) => console.log('# pageerror', e.message));
        await page.goto(`${srv.url}/test/harness.html`);
        await page.evaluate(() => window.ready);
        await openIn(page, user, opts);
        pages.push(page);
      }
      return { context, pages };
    }

    async function openIn(page, user, opts = {}) {
      await page.evaluate(async ({ user, opts }) => {
        window.db = await window.Marksync.open({ endpoint: location.origin, token: `dev:${user}`, name: 'status', autoSync: false, live: false, ...opts });
      }, { user, opts });
    }

    const phaseIn = (page, rowId) => page.evaluate((id) => db.status('sets', id), rowId);

    async function waitPhase(page, rowId, phase) {
      await page.waitForFunction(({ id, phase }) => db.status('sets', id).phase === phase, { id: rowId, phase }, { timeout: 10_000 });
    }

    /** An edit in `page` whose push the server holds 1.5 s; the sync is not awaited: the tab may go away with it out. */
    async function editWithRequestHeld(page) {
      await server.faults({ delayMs: 1500 });
      return page.evaluate(async () => {
        const id = db.newRowId();
        await db.change('sets', id, { exercise: 'squat', weightKg: 100, reps: 5 });
        db.sync();
        return id;
      });
    }

    test('a request out shows awaiting-ack in every tab; a tab closed with it out leaves unknown-outcome, never queued', async () => {
      const user = newUser('inflight');
      const { context, pages: [a, b] } = await tabs(user, 2);
      const rowId = await editWithRequestHeld(a);
      await waitPhase(a, rowId, 'awaiting-ack');
      await waitPhase(b, rowId, 'awaiting-ack');
      assert.equal((await phaseIn(b, rowId)).attempts, 1, 'the other tab knows the attempt count');
      await a.close(); // the request's tab closes before any answer
      await server.faults({ delayMs: 0 });
      // A new tab opens the database: the flight has no owner any more.
      const c = await context.newPage();
      await c.goto(`${server.url}/test/harness.html`);
      await c.evaluate(() => window.ready);
      await openIn(c, user);
      const st = await phaseIn(c, rowId);
      assert.equal(st.phase, 'unknown-outcome', 'never "queued" after the request went out');
      assert.equal(st.attempts, 1);
      await waitPhase(b, rowId, 'unknown-outcome');
      const [mb, mc] = await Promise.all([b.evaluate(() => db.metrics()), c.evaluate(() => db.metrics())]);
      assert.equal(mc.unknownOutcomes, 1, 'counted once');
      assert.deepEqual({ ...mb, pendingOps: 0 }, { ...mc, pendingOps: 0 }, 'every tab reads the same counters');
      const r = await c.evaluate(() => db.sync());
      assert.equal(r.ok, true);
      assert.equal((await server.rows(user)).size, 1, 'once, however many times it was sent');
      await waitPhase(b, rowId, 'synced');
      await context.close();
    });

    test('a tab closed with its request out: the tab left open reads unknown-outcome by itself, without syncing', async () => {
      const user = newUser('orphan');
      const { context, pages: [a, b] } = await tabs(user, 2);
      const rowId = await editWithRequestHeld(a);
      await waitPhase(b, rowId, 'awaiting-ack');
      await a.close();
      await server.faults({ delayMs: 0 });
      // b neither syncs nor opens anything: no context has the request out now.
      await waitPhase(b, rowId, 'unknown-outcome');
      assert.equal(await b.evaluate(() => db.diagnostics().flight), null, 'no request is shown as out');
      assert.equal(await b.evaluate(() => db.metrics().unknownOutcomes), 1);
      await context.close();
    });

    test('retries stop at the limit, the server is asked, and what it cannot settle waits for a person', async () => {
      const user = newUser('bounded');
      const { context, pages: [a, b] } = await tabs(user, 2, { retry: { maxAttempts: 2 } });
      // Attempt 1 is judged and its answer lost; then the server fails before judging.
      await server.faults({ loseResponses: 1 });
      const ids = await a.evaluate(async () => {
        const first = db.newRowId();
        await db.change('sets', first, { exercise: 'row', weightKg: 50, reps: 10 });
        await db.sync();
        const second = db.newRowId();
        await db.change('sets', second, { exercise: 'row', weightKg: 55, reps: 10 });
        return { first, second };
      });
      await server.faults({ failBeforeCommit: 5 });
      // Each sync at its scheduled time is one attempt that fails (one pressed
      // within the backoff would not count); the limit is reached within a few.
      const err = await a.evaluate(async () => {
        for (let i = 0; i < 5; i++) {
          const due = db.metrics().nextRetryAt;
          if (due) await new Promise((r) => setTimeout(r, Math.max(0, due - Date.now()) + 20));
          const e = await db.sync().then(() => null, (e) => ({ code: e.code, recovery: e.recovery, message: e.message }));
          if (e) return e;
        }
        return null;
      });
      assert.equal(err?.code, 'recovery_required');
      assert.equal(err.recovery, 'retries_exhausted');
      assert.equal((await phaseIn(a, ids.first)).phase, 'synced', 'the server remembered it: settled by /v1/verdicts');
      const st = await phaseIn(a, ids.second);
      assert.equal(st.phase, 'recovery-required');
      assert.equal(st.code, 'retries_exhausted');
      await waitPhase(b, ids.second, 'recovery-required');
      assert.equal((await b.evaluate(() => db.metrics())).recovery, 'retries_exhausted');
      // Nothing is sent automatically, from any tab.
      await server.faults({ failBeforeCommit: 0 });
      const again = await b.evaluate(() => db.sync().then(() => 'sent', (e) => e.code));
      assert.equal(again, 'recovery_required');
      assert.equal((await server.rows(user)).size, 1);
      // reconcile() asks, never pushes.
      const rec = await b.evaluate(() => db.reconcile());
      assert.equal(rec.unknown, 1);
      assert.equal((await server.rows(user)).size, 1);
      // The server answered: what it never judged is safe to send again, the stop is lifted.
      assert.equal((await b.evaluate(() => db.metrics())).recovery, null);
      // A person confirms.
      const out = await b.evaluate(() => db.retry());
      assert.equal(out.ok, true);
      assert.equal((await server.rows(user)).size, 2);
      await waitPhase(a, ids.second, 'synced');
      await context.close();
    });

    test('a server older than the app: the queue waits whole and drains by itself once the server is updated', async () => {
      const v1 = join(server.dir, 'schema-v1.json');
      const v2 = join(server.dir, 'schema-v2.json');
      writeFileSync(v1, JSON.stringify(schema(1)));
      writeFileSync(v2, JSON.stringify(schema(2)));
      const old = await startServer(backend, { extra: ['--schema', v1] });
      try {
        const user = newUser('older');
        const { context, pages: [a] } = await tabs(user, 1, { schema: 2, autoSync: true, live: true }, old);
        const rowId = await a.evaluate(async () => {
          const id = db.newRowId();
          await db.change('sets', id, { exercise: 'press', weightKg: 40, reps: 8 });
          return id;
        });
        // Once the first attempts settle: waiting on the server, a probe scheduled.
        const handle = await a.waitForFunction((id) => {
          const s = db.status('sets', id);
          return s.code === 'schema_too_new' && s.nextRetryAt > Date.now() && db.metrics().recovery === 'schema_too_new' && s;
        }, rowId, { timeout: 10_000 });
        const st = await handle.jsonValue();
        assert.equal(st.code, 'schema_too_new');
        assert.match(st.reason, /server/, 'the words point at the server');
        assert.ok(st.nextRetryAt > Date.now() + 60_000, 'a probe is scheduled, minutes away');
        assert.equal((await a.evaluate(() => db.pending().length)), 1, 'the queue is whole');
        // The server is updated; the page does nothing.
        await old.kill();
        await old.restart(['--schema', v2]);
        await waitPhase(a, rowId, 'synced');
        assert.equal((await old.rows(user)).size, 1);
        assert.equal(await a.evaluate(() => db.metrics().recovery), null);
        await context.close();
      } finally {
        await old.stop();
      }
    });

    test('an edit larger than the server takes is rejected in its words; the queue behind it and the pulls go on', async () => {
      const small = await startServer(backend, { extra: ['--max-body-bytes', '6000'] });
      try {
        const user = newUser('toolarge');
        const { context, pages: [a] } = await tabs(user, 1, {}, small);
        const { pages: [other] } = await tabs(user, 1, { name: 'status-other' }, small);
        const ids = await a.evaluate(async () => {
          // Well formed (each value under 4096 bytes), but ~12 KB as one op.
          const big = db.newRowId();
          const note = 'x'.repeat(4000);
          await db.change('sets', big, { a: note, b: note, c: note }, { check: false });
          const smalls = [];
          for (let i = 0; i < 3; i++) {
            const id = db.newRowId();
            await db.change('sets', id, { exercise: 'row', weightKg: 50, reps: i + 1 });
            smalls.push(id);
          }
          return { big, smalls };
        });
        const theirs = await other.evaluate(async () => {
          const id = db.newRowId();
          await db.change('sets', id, { exercise: 'dip', weightKg: 0, reps: 9 });
          await db.sync();
          return id;
        });
        const report = await a.evaluate(() => db.sync());
        assert.equal(report.ok, true, JSON.stringify(report));
        const st = await phaseIn(a, ids.big);
        assert.deepEqual([st.phase, st.code, st.reason], ['rejected', 'payload_too_large', 'the body is larger than 6000 bytes']);
        for (const id of ids.smalls) assert.equal((await phaseIn(a, id)).phase, 'synced');
        const seen = await a.evaluate(() => ({
          rejections: db.rejections().map((r) => [r.code, r.reason]),
          pending: db.pending().length,
          recovery: db.metrics().recovery,
        }));
        assert.deepEqual(seen, { rejections: [['payload_too_large', 'the body is larger than 6000 bytes']], pending: 0, recovery: null });
        assert.ok(await a.evaluate((id) => db.row('sets', id) !== null, theirs), 'the row of the other device came down');
        assert.equal(await a.evaluate((id) => db.row('sets', id), ids.big), null, 'the refused row is not shown');
        assert.equal((await small.rows(user)).size, 4, 'three rows of this device, one of the other');
        await context.close();
      } finally {
        await small.stop();
      }
    });

    test('open() never waits on a permission prompt for persistent storage', async () => {
      const user = newUser('persist');
      const context = await browser.newContext();
      const page = await context.newPage();
      await page.goto(`${server.url}/test/harness.html`);
      await page.evaluate(() => window.ready);
      const out = await page.evaluate(async (user) => {
        // As Firefox does: the answer waits for the person.
        let answer;
        navigator.storage.persist = () => new Promise((resolve) => { answer = resolve; });
        const db = await window.Marksync.open({ endpoint: location.origin, token: `dev:${user}`, name: 'persist', autoSync: false });
        const before = (await db.storage()).persistence;
        const heard = new Promise((resolve) => db.addEventListener('storage', (e) => resolve(e.persistence)));
        answer(true);
        return { before, heard: await heard, after: (await db.storage()).persistence };
      }, user);
      assert.deepEqual(out, { before: 'prompting', heard: 'granted', after: 'granted' });
      await context.close();
    });
  });
}
