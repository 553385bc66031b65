// An app developer's first day: the promises that broke on it, each checked
// in real Chromium against the real server (docs/protocol.md §5, §7).
// Each test failed against the code before this file: a token of another
// user pushed the queue to that user's account, status() said `synced` for
// rows that never existed, an old refusal pinned a row, the event stream
// died for good after a token change, clicks spent the retry budget, a
// throwing token function parked sync, and bad arguments crashed the wasm.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { backends, startServer, launch, device, newUser, until } from './helpers.mjs';

const SECRET = 'first-day-secret-of-at-least-32-bytes';

/** An HS256 JWT for `sub`, valid `ttl` seconds. */
function jwt(sub, ttl = 600) {
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const head = b64({ alg: 'HS256', typ: 'JWT' });
  const body = b64({ sub, exp: Math.floor(Date.now() / 1000) + ttl });
  const sig = createHmac('sha256', SECRET).update(`${head}.${body}`).digest('base64url');
  return `${head}.${body}.${sig}`;
}

const SET = { exercise: 'squat', weightKg: 80, reps: 5 };

for (const backend of backends()) {
  describe(`first day on ${backend}`, () => {
    let server;
    let browser;
    before(async () => {
      server = await startServer(backend, { extra: ['--jwt-secret', SECRET] });
      browser = await launch();
    });
    after(async () => {
      await browser?.close();
      await server?.stop();
    });

    async function open(opts = {}) {
      const d = await device(browser, server);
      const run = (fn, arg) => d.page.evaluate(fn, arg);
      const openDb = (o) => run(async (o) => {
        window.db = await window.Marksync.open({ endpoint: location.origin, name: 'day1', autoSync: false, live: false, ...o });
      }, o);
      await openDb(opts);
      return { ...d, run, openDb, close: () => d.context.close() };
    }

    for (const kind of ['dev', 'jwt']) {
      test(`a token of another user (${kind}) never pushes the queue to that account nor shows the rows`, async () => {
        const alice = newUser('alice');
        const bob = newUser('bob');
        const token = (u) => (kind === 'dev' ? `dev:${u}` : jwt(u));
        const d = await open({ token: token(alice) });
        await d.run(async () => {
          await db.change('sets', 'a-synced', { exercise: 'squat', weightKg: 80, reps: 5 });
          await db.sync();
          await db.change('sets', 'a-pending', { exercise: 'bench', weightKg: 60, reps: 8 });
        });
        assert.equal(await d.run(() => db.user), alice, 'the database learned whose it is');
        await d.run((t) => db.setToken(t), token(bob));
        const err = await d.run(() => db.sync().then(() => null, (e) => ({ code: e.code, recovery: e.recovery, message: e.message })));
        assert.equal(err?.code, 'recovery_required', JSON.stringify(err));
        assert.equal(err.recovery, 'wrong_user');
        assert.match(err.message, /belongs to user/);
        assert.equal((await server.rows(bob)).size, 0, "nothing of alice's queue reached bob");
        assert.equal((await server.rows(alice)).size, 1, 'a-pending was not sent anywhere');
        assert.deepEqual(await d.run(() => db.rows('sets')), [], "bob's session is not shown alice's rows");
        assert.equal(await d.run(() => db.row('sets', 'a-synced')), null);
        assert.deepEqual(await d.run(() => [db.pending().length, db.metrics().pendingOps]), [0, 0], 'the queue hidden, its length too');
        // Bob's own edit is refused: queued, it would reach alice's account with her queue.
        const edit = await d.run(() => db.change('sets', 'bob-private', { exercise: 'row', weightKg: 50, reps: 5 }).then(() => null, (e) => e.code));
        assert.equal(edit, 'wrong_user');
        const st = await d.run(() => db.status('sets', 'a-pending'));
        assert.deepEqual([st.phase, st.code], ['recovery-required', 'wrong_user']);
        // Reopened with bob's token: still alice's database, still refused, still hidden.
        await d.run(() => db.close());
        await d.openDb({ token: token(bob) });
        await d.run(() => db.sync().catch(() => {}));
        assert.deepEqual(await d.run(() => db.rows('sets')), []);
        assert.equal((await server.rows(bob)).size, 0);
        // Naming the user at open refuses another user's database outright.
        await d.run(() => db.close());
        const named = await d.run(async (bob) => {
          try {
            await window.Marksync.open({ endpoint: location.origin, name: 'day1', user: bob, autoSync: false, live: false });
            return null;
          } catch (e) {
            return e.code;
          }
        }, bob);
        assert.equal(named, 'wrong_user');
        // Alice again: her queue goes to her account, her rows come back.
        await d.openDb({ token: token(alice), user: alice });
        const report = await d.run(() => db.sync());
        assert.equal(report.ok, true, JSON.stringify(report));
        assert.equal((await server.rows(alice)).size, 2);
        assert.deepEqual((await d.run(() => db.rows('sets'))).map((r) => r._id), ['a-pending', 'a-synced']);
        await d.close();
      });
    }

    test('a failure names its cause: an unreachable server, a wrong path — in the report, the row and the metrics', async () => {
      // Failed before: the report said "retrying", the row's reason was null; a wrong path gave "refused: 405: ".
      const user = newUser('why');
      const d = await open({ token: `dev:${user}`, endpoint: 'http://127.0.0.1:9' });
      const away = await d.run(async () => {
        await db.change('sets', 'w1', { exercise: 'squat', weightKg: 80, reps: 5 });
        const r = await db.sync();
        return { error: r.error, status: db.status('sets', 'w1'), lastError: db.metrics().lastError };
      });
      assert.match(away.error, /could not be reached \(POST http:\/\/127\.0\.0\.1:9\/v1\/push: .*CORS/, away.error);
      assert.equal(away.status.phase, 'unknown-outcome');
      assert.match(away.status.reason ?? '', /could not be reached/, 'the row says why, in every context');
      assert.match(away.lastError ?? '', /could not be reached/);
      await d.close();
      const wrong = await open({ token: `dev:${user}`, name: 'day1-path', endpoint: `${server.url}/api` });
      const refused = await wrong.run(async () => {
        await db.change('sets', 'w2', { exercise: 'squat', weightKg: 80, reps: 5 });
        try {
          await db.sync();
          return { ok: true };
        } catch (e) {
          return { code: e.code, recovery: e.recovery, message: e.message, reason: db.metrics().recoveryReason };
        }
      });
      assert.equal(refused.code, 'recovery_required', JSON.stringify(refused));
      assert.equal(refused.recovery, 'refused');
      assert.match(refused.reason, /^refused: 405: POST http:\S+\/api\/v1\/push answered 405 with no marksync error: is the endpoint the marksync server's base URL\?$/);
      await wrong.close();
    });

    test("a gateway's 502 and a portal's 200 page name where the answer came from", async () => {
      const d = await open({ token: `dev:${newUser('gateway')}`, name: 'day1-gateway' });
      const reasons = [];
      for (const [status, body] of [[502, ''], [200, '<html>Sign in to the Wi-Fi</html>']]) {
        await d.page.route('**/v1/push**', (route) => route.fulfill({ status, body, contentType: 'text/html' }));
        reasons.push(await d.run(async () => {
          await db.change('sets', db.newRowId(), { exercise: 'squat', weightKg: 80, reps: 5 });
          const r = await db.sync();
          return r.error;
        }));
        await d.page.unroute('**/v1/push**');
      }
      assert.match(reasons[0], /^server error 502: POST http:\S+\/v1\/push answered 502 with no marksync error/, reasons[0]);
      assert.match(reasons[1], /^malformed answer: POST http:\S+\/v1\/push answered 200 with a body that is not the marksync server's/, reasons[1]);
      await d.close();
    });

    test('undefined values are skipped, never written as null; a spread row is a valid edit', async () => {
      const d = await open({ token: `dev:${newUser('undef')}` });
      const row = await d.run(async () => {
        await db.change('sets', 'u-1', { exercise: 'a', weightKg: 50, reps: 1 });
        await db.change('sets', 'u-1', { exercise: 'a', weightKg: undefined, reps: 2 });
        const row = db.row('sets', 'u-1');
        await db.change('sets', row._id, { ...row, reps: 3 }); // the spread-and-edit pattern
        return db.row('sets', 'u-1');
      });
      assert.deepEqual(row, { _id: 'u-1', exercise: 'a', weightKg: 50, reps: 3 });
      const other = await d.run(() => db.change('sets', 'u-1', { _id: 'u-2', reps: 4 }).then(() => null, (e) => e.code));
      assert.equal(other, 'bad_input', 'an _id that is not the row is refused');
      await d.close();
    });

    test('a row the device never saw has no status; an old refusal does not pin the row', async () => {
      const d = await open({ token: `dev:${newUser('status')}` });
      const out = await d.run(async () => {
        const thrown = await db.change('sets', 'bad-1', { reps: {} }).then(() => null, (e) => e.code);
        return {
          thrown,
          unknownRow: db.status('sets', 'nope'),
          unknownTable: db.status('nope', 'x'),
          badTable: db.status('Bad Table!', 'x'),
          refusedRow: db.status('sets', 'bad-1'),
        };
      });
      assert.deepEqual(out, { thrown: 'bad_input', unknownRow: null, unknownTable: null, badTable: null, refusedRow: null });
      await d.run(() => db.sync()); // learn the server's schema
      const st = await d.run(async () => {
        await db.change('sets', 'r2', { exercise: 'row', weightKg: 40, reps: 0 }, { check: false });
        await db.sync();
        const refused = db.status('sets', 'r2');
        await db.change('sets', 'r2', { exercise: 'row', weightKg: 40, reps: 8 });
        const pending = db.status('sets', 'r2').phase;
        await db.sync();
        return { refused, pending, now: db.status('sets', 'r2'), rejections: db.rejections() };
      });
      assert.equal(st.refused.phase, 'rejected');
      assert.equal(st.refused.attempts, 1, 'the refused op was sent once');
      assert.equal(st.pending, 'pending');
      assert.equal(st.now.phase, 'synced', 'where the row stands now');
      assert.equal(st.rejections.length, 1, 'the refusal stays listed');
      assert.equal(st.rejections[0].superseded, true);
      await d.close();
    });

    test('the event stream reopens with a new token, and a dead stream shows in metrics', async () => {
      const user = newUser('live');
      const d = await open({ token: 'not-a-token', live: true });
      await until(() => d.run(() => db.metrics().live === 'closed'), 'the refused stream to show as closed');
      assert.match(await d.run(() => db.metrics().liveError), /refused or closed/);
      await d.run((t) => db.setToken(t), `dev:${user}`);
      await until(() => d.run(() => db.metrics().live === 'open'), 'the stream to open with the new token');
      // Another device's edit arrives without any local edit.
      const other = await open({ token: `dev:${user}` });
      await other.run(async () => {
        await db.change('sets', 'from-other', { exercise: 'dip', weightKg: 0, reps: 10 });
        await db.sync();
      });
      await until(() => d.run(() => db.row('sets', 'from-other') !== null), 'the poke to bring the other edit');
      // The server goes away and comes back: the stream opens again by itself.
      await server.kill();
      await until(() => d.run(() => db.metrics().live !== 'open'), 'the stream to notice');
      await server.restart();
      await until(() => d.run(() => db.metrics().live === 'open'), 'the stream to open again', 30_000);
      await other.close();
      await d.close();
    });

    test('clicks while the server is down do not spend the retry budget, and the server coming back heals the queue', async () => {
      const user = newUser('clicks');
      const d = await open({ token: `dev:${user}`, autoSync: true });
      await d.run(() => db.sync());
      await server.kill();
      await d.run(async () => {
        await db.change('sets', 'c-1', { exercise: 'squat', weightKg: 80, reps: 5 });
        for (let i = 0; i < 8; i++) await db.sync();
      });
      const m = await d.run(() => db.metrics());
      assert.equal(m.recovery, null, JSON.stringify(m));
      assert.notEqual((await d.run(() => db.status('sets', 'c-1'))).phase, 'recovery-required');
      await server.restart();
      await until(() => d.run(() => db.status('sets', 'c-1').phase === 'synced'), 'autoSync to deliver the queue', 30_000);
      assert.equal((await server.rows(user)).size, 1);
      await d.close();
    });

    test('a token function that throws is retried, and its own words are reported', async () => {
      const user = newUser('tokenfn');
      const d = await open({ token: 'placeholder' });
      const out = await d.run(async (user) => {
        window.calls = 0;
        window.fail = true;
        db.setToken(async () => {
          window.calls += 1;
          if (window.fail) throw new Error('session store unreachable');
          return `dev:${user}`;
        });
        await db.change('sets', 't-1', { exercise: 'squat', weightKg: 80, reps: 5 });
        const first = await db.sync();
        const status = db.status('sets', 't-1');
        window.fail = false;
        const second = await db.sync();
        return { first, status, second, calls: window.calls, metrics: db.metrics() };
      }, user);
      assert.equal(out.first.ok, false);
      assert.match(out.first.error, /session store unreachable/);
      assert.deepEqual([out.status.phase, out.status.attempts], ['pending', 0], 'nothing was sent');
      assert.equal(out.second.ok, true, JSON.stringify(out.second));
      assert.ok(out.calls >= 2, 'the function was called again');
      assert.equal(out.metrics.recovery, null);
      assert.equal((await server.rows(user)).size, 1);
      await d.close();
    });

    test('every public method checks its arguments: bad_input, nothing recorded, no id spent', async () => {
      const d = await open({ token: `dev:${newUser('args')}` });
      const out = await d.run(async () => {
        const code = (f) => {
          try {
            const r = f();
            return r && typeof r.then === 'function' ? r.then(() => 'resolved', (e) => e.code ?? `no code: ${e}`) : 'returned';
          } catch (e) {
            return e.code ?? `no code: ${e}`;
          }
        };
        const n = (id) => Number(id.split('-').pop());
        const before = n(db.newRowId());
        const codes = {
          rowIdNumber: await code(() => db.change('sets', 5, { reps: 1 })),
          tableNumber: await code(() => db.change(5, 'x', { reps: 1 })),
          tableNull: await code(() => db.change(null, 'x', { reps: 1 })),
          rowIdUndefined: await code(() => db.change('sets', undefined, { reps: 1 })),
          statusNumber: await code(() => db.status('sets', 7)),
          dismissNumber: await code(() => db.dismiss(5)),
          rowsNumber: await code(() => db.rows(5)),
          removeNumber: await code(() => db.remove('sets', 9)),
          bigint: await code(() => db.change('sets', 'x', { reps: 10n })),
          loneSurrogate: await code(() => db.change('sets', 'x', { exercise: '\ud800' })),
          nan: await code(() => db.change('sets', 'x', { reps: NaN })),
          deletedAlias: await code(() => db.change('sets', 'x', { _deleted: true })),
          subscribeNumber: await code(() => db.subscribe(123)),
        };
        const objectMessage = await db.change('sets', 'x', { reps: { n: 1 } }).catch((e) => e.message);
        const after = n(db.newRowId());
        return { codes, spent: after - before - 1, pending: db.pending().length, objectMessage };
      });
      for (const [what, c] of Object.entries(out.codes)) assert.equal(c, 'bad_input', what);
      assert.equal(out.spent, 0, 'no id spent');
      assert.equal(out.pending, 0, 'nothing recorded');
      assert.match(out.objectMessage, /got object/, 'errors name JS types');
      await d.close();
    });

    test('open() validates its options', async () => {
      const d = await device(browser, server);
      const codes = await d.page.evaluate(async () => {
        const bad = [
          { schema: -1 }, { schema: 1.5 }, { schema: '1' }, { schema: 2 ** 33 }, { timeoutMs: 0 },
          { endpoint: 'not a url' }, { autoSync: 'yes' }, { name: '' }, { token: 5 },
          // A misspelt key was read as absent: `autosync: false` synced, `maxAtempts` kept 10.
          { autosync: false }, { cachebytes: 5 }, { retry: { maxAtempts: 3 } },
        ];
        const out = [];
        for (const o of bad) {
          out.push(await window.Marksync.open({ endpoint: location.origin, name: 'opts', autoSync: false, live: false, ...o })
            .then((db) => { db.close(); return `opened with ${JSON.stringify(o)}`; }, (e) => e.code));
        }
        return out;
      });
      assert.deepEqual(codes, codes.map(() => 'bad_input'));
      await d.context.close();
    });

    test('a module download that failed is load_failed, and the next open() downloads it again', async () => {
      // Failed: the rejected load was kept for the page's life (every open() rejected, "Failed to fetch", no code).
      const context = await browser.newContext();
      let aborted = 0;
      await context.route('**/marksync_bg.wasm', (route) => (aborted++ === 0 ? route.abort() : route.continue()));
      const page = await context.newPage();
      await page.goto(`${server.url}/test/harness.html`);
      const first = await page.evaluate(() => window.ready.then(() => 'loaded', (e) => e.code));
      assert.equal(first, 'load_failed');
      const again = await page.evaluate(async () => {
        const db = await window.Marksync.open({ endpoint: location.origin, name: 'reload', autoSync: false, live: false });
        db.close();
        return 'opened';
      });
      assert.equal(again, 'opened');
      await context.close();
    });

    test('listeners fire once per change that altered something; unsubscribe twice is fine; closed means closed', async () => {
      const d = await open({ token: `dev:${newUser('listen')}` });
      const out = await d.run(async () => {
        await db.sync(); // the schema is learned once: a change of its own
        let n = 0;
        const off = db.subscribe(() => { n += 1; });
        await db.change('sets', 'l-1', { exercise: 'squat', weightKg: 80, reps: 5 });
        await db.sync();
        const oneEdit = n;
        await db.sync();
        const idle = n - oneEdit;
        off();
        off();
        db.close();
        const closed = {
          dismiss: await db.dismiss('x').then(() => 'resolved', (e) => e.code),
          check: (() => { try { db.check('sets', 'l-1', { reps: 1 }); return 'returned'; } catch (e) { return e.code; } })(),
          change: await db.change('sets', 'l-1', { reps: 1 }).then(() => 'resolved', (e) => e.code),
        };
        return { oneEdit, idle, closed };
      });
      assert.ok(out.oneEdit >= 1 && out.oneEdit <= 3, `recorded, sent, acknowledged: ${out.oneEdit}`);
      assert.equal(out.idle, 0, 'a sync that changed nothing tells no one');
      assert.deepEqual(out.closed, { dismiss: 'closed', check: 'closed', change: 'closed' });
      await d.close();
    });

    test('a listener that throws is reported as the platform reports an event listener, and the others are still told', async () => {
      const d = await open({ token: `dev:${newUser('throws')}`, name: 'day1-throws' });
      const out = await d.run(async () => {
        const reported = [];
        window.addEventListener('error', (e) => { reported.push(e.error?.message); e.preventDefault(); });
        let after = 0;
        let watched = 0;
        db.subscribe(() => { throw new Error('the app listener broke'); });
        db.subscribe(() => { after += 1; });
        db.watch('sets', {}, () => { watched += 1; if (watched > 1) throw new Error('the app watcher broke'); });
        await db.change('sets', 'th-1', { exercise: 'squat', weightKg: 80, reps: 5 });
        await new Promise((r) => setTimeout(r, 50));
        return { reported: [...new Set(reported)].sort(), toldAfter: after > 0, watched: watched > 1 };
      });
      assert.deepEqual(out, { reported: ['the app listener broke', 'the app watcher broke'], toldAfter: true, watched: true });
      await d.close();
    });

    test("a device's own push told back by its event stream costs no second pull", async () => {
      const user = newUser('told-back');
      const d = await open({ token: `dev:${user}`, live: true, autoSync: true });
      await until(() => d.run(() => db.metrics().live === 'open'), 'the event stream to open');
      await new Promise((r) => setTimeout(r, 500)); // the connect's poke and the open's sync are over
      const pulls = await d.run(async () => {
        const pulls = [];
        const fetch0 = window.fetch;
        window.fetch = (req, init) => {
          const url = typeof req === 'string' ? req : req.url;
          if (url.includes('/v1/pull')) pulls.push(url);
          return fetch0.call(window, req, init);
        };
        for (let i = 0; i < 3; i += 1) {
          await db.change('sets', `own-${i}`, { exercise: 'squat', weightKg: 80, reps: 5 });
          const t0 = Date.now();
          while (db.status('sets', `own-${i}`).phase !== 'synced' && Date.now() - t0 < 10_000) await new Promise((r) => setTimeout(r, 20));
          await new Promise((r) => setTimeout(r, 700)); // the poke of this push is heard
        }
        return pulls.length;
      });
      // Each edit's cycle pulls once after its push; the poke of the same head asks for nothing more.
      assert.equal(pulls, 3, 'one pull per edit, not two');
      await d.close();
    });

    test('a push repeated after a refreshed token counts its op once; sync() calls during a cycle share the next one', async () => {
      const user = newUser('pushed');
      const d = await open({ token: 'placeholder' });
      const report = await d.run(async (user) => {
        let calls = 0;
        db.setToken(() => (++calls === 1 ? 'expired-token' : `dev:${user}`));
        await db.change('sets', 'p-1', { exercise: 'squat', weightKg: 80, reps: 5 });
        return db.sync();
      }, user);
      assert.deepEqual([report.ok, report.pushed, report.applied], [true, 1, 1], JSON.stringify(report));
      // Ten sync() calls while one cycle runs: the first runs, the nine others share the next one.
      const burst = await d.run(async () => {
        const before = db.metrics().pulls;
        await db.change('sets', 'p-2', { exercise: 'squat', weightKg: 80, reps: 6 });
        const reports = await Promise.all(Array.from({ length: 10 }, () => db.sync()));
        return { pulls: db.metrics().pulls - before, ok: reports.every((r) => r.ok) };
      });
      assert.deepEqual(burst, { pulls: 2, ok: true }, 'two cycles for ten calls');
      await d.close();
    });
  });
}

// A device the server is refusing (429) is poked by every push of the
// user's other devices: each poke started a cycle at once, as a person's
// sync() would, so a rate-limited device knocked again on every push,
// whatever its `Retry-After` said. A poke now waits for it (docs/protocol.md §5).
describe('pokes while the server asks for time', () => {
  let server;
  let browser;
  before(async () => {
    // Half a read a second: a few pulls spend the budget, and its refusal
    // asks for seconds; refusals are answered at once.
    server = await startServer('sqlite', { extra: ['--read-rate', '0.5', '--read-burst', '8', '--refusal-delay-ms', '0'] });
    browser = await launch();
  });
  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  test('a poke during a 429 wait sends nothing until the wait is over, then brings the edits', async () => {
    const user = `dev:${newUser('poked')}`;
    const open = async (opts) => {
      const d = await device(browser, server);
      const run = (fn, arg) => d.page.evaluate(fn, arg);
      await run(async (o) => {
        window.sent = [];
        const fetch0 = window.fetch;
        window.fetch = (req, init) => {
          window.sent.push([Date.now(), typeof req === 'string' ? req : req.url]);
          return fetch0.call(window, req, init);
        };
        window.db = await window.Marksync.open({ endpoint: location.origin, name: 'poked', autoSync: false, ...o });
      }, { token: user, ...opts });
      return { ...d, run };
    };
    const a = await open({ live: true, autoSync: true });
    await until(() => a.run(() => db.metrics().live === 'open'), 'the event stream to open');
    // Pull until the server refuses: the device then knows when to come back.
    const retryAt = await until(() => a.run(async () => {
      const r = await db.sync();
      return r.ok ? null : db.metrics().nextRetryAt;
    }), 'a refusal for the read budget');
    const b = await open({ live: false });
    const sentBefore = await a.run(() => window.sent.length);
    // The other device pushes (its own pulls are refused too: the budget is the user's).
    for (let i = 0; i < 4; i += 1) {
      await b.run((i) => db.change('sets', `b-${i}`, { exercise: 'squat', weightKg: 80, reps: 5 }).then(() => db.sync()), i);
      await new Promise((r) => setTimeout(r, 150));
    }
    const during = await a.run((at) => window.sent.filter(([t]) => t < at - 100).length, retryAt);
    assert.ok(retryAt - Date.now() > 200, `the wait outlasted the pushes (${retryAt - Date.now()} ms left)`);
    assert.equal(during, sentBefore, 'no request while the server had asked for time, however many pokes');
    // After the wait (and any the server asks for again), the edits come.
    await new Promise((r) => setTimeout(r, Math.max(0, retryAt - Date.now()) + 2500));
    await b.run(() => db.change('sets', 'b-last', { exercise: 'squat', weightKg: 80, reps: 5 }).then(() => db.sync()));
    await until(() => a.run(() => db.row('sets', 'b-last') !== null && db.row('sets', 'b-0') !== null), 'the edits after the wait', 30_000);
    await a.context.close();
    await b.context.close();
  });
});
