// The npm package in real Chromium against the real server (PROTOCOL §3–7).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { backends, startServer, launch, device, newUser } from './helpers.mjs';

for (const backend of backends()) {
  describe(`client on ${backend}`, () => {
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

    /** Opens a database in a page; returns a function to run code with `db` in that page. */
    async function open(user, opts = {}) {
      const d = await device(browser, server);
      await d.page.evaluate(async ({ user, opts }) => {
        window.db = await window.Marksync.open({ endpoint: location.origin, token: `dev:${user}`, name: 'e2e', autoSync: false, ...opts });
      }, { user, opts });
      return {
        ...d,
        run: (fn, arg) => d.page.evaluate(fn, arg),
        close: () => d.context.close(),
      };
    }

    test('two devices edit, sync and converge', async () => {
      const user = newUser('converge');
      const a = await open(user);
      const b = await open(user);
      const rowId = await a.run(async () => {
        const id = db.newRowId();
        await db.change('sets', id, { exercise: 'squat', weightKg: 100, reps: 5 });
        await db.sync();
        return id;
      });
      await b.run(() => db.sync());
      // Different fields on the two devices: both survive. Same field: one winner everywhere.
      await a.run(async (id) => { await db.change('sets', id, { reps: 6 }); }, rowId);
      await b.run(async (id) => { await db.change('sets', id, { weightKg: 105 }); }, rowId);
      await a.run(async (id) => { await db.change('sets', id, { exercise: 'front squat' }); }, rowId);
      await b.run(async (id) => { await db.change('sets', id, { exercise: 'back squat' }); }, rowId);
      for (let i = 0; i < 2; i++) {
        await a.run(() => db.sync());
        await b.run(() => db.sync());
      }
      const ra = await a.run((id) => db.row('sets', id), rowId);
      const rb = await b.run((id) => db.row('sets', id), rowId);
      assert.deepEqual(ra, rb);
      assert.equal(ra.reps, 6);
      assert.equal(ra.weightKg, 105);
      const srv = (await server.rows(user)).get(`sets/${rowId}`);
      assert.equal(srv.fields.exercise, ra.exercise);
      assert.equal(await a.run((id) => db.status('sets', id).phase, rowId), 'synced');
      await a.close();
      await b.close();
    });

    test('offline edits survive a reload and reach the server once', async () => {
      const user = newUser('offline');
      const a = await open(user);
      await a.context.setOffline(true);
      const first = await a.run(async () => {
        const ids = [];
        for (let i = 0; i < 3; i++) {
          const id = db.newRowId();
          ids.push(id);
          await db.change('sets', id, { exercise: 'row', weightKg: 40 + i, reps: 10 });
        }
        const r = await db.sync();
        return { ids, ok: r.ok, phase: db.status('sets', ids[0]).phase };
      });
      assert.equal(first.ok, false);
      assert.equal(first.phase, 'pending', 'offline: nothing was sent, nothing is in doubt');
      await a.context.setOffline(false);
      await a.page.reload();
      await a.page.evaluate(() => window.ready);
      const pending = await a.run(async (user) => {
        window.db = await window.Marksync.open({ endpoint: location.origin, token: `dev:${user}`, name: 'e2e', autoSync: false });
        return db.pending().length;
      }, user);
      assert.equal(pending, 3, 'the edits survived the reload');
      const r = await a.run(() => db.sync());
      assert.equal(r.ok, true);
      assert.equal(r.applied + r.duplicate, 3);
      const second = await a.run(() => db.sync());
      assert.equal(second.pushed, 0);
      assert.equal((await server.rows(user)).size, 3);
      await a.close();
    });

    // The server commits, then drops the connection. Chromium may itself
    // resend the POST on a fresh connection (it does when the dropped
    // connection was a reused keep-alive one): either way the server's
    // memory answers `duplicate` and there is one row.
    test('a lost answer produces no duplicate', async () => {
      const user = newUser('lost');
      const a = await open(user);
      await server.faults({ loseResponses: 1 });
      const out = await a.run(async () => {
        window.rowId = db.newRowId();
        await db.change('sets', rowId, { exercise: 'bench', weightKg: 60, reps: 8 });
        const first = await db.sync();
        const phase = db.status('sets', rowId).phase;
        const second = first.ok ? null : await db.sync();
        return { first, phase, second, end: db.status('sets', rowId).phase };
      });
      if (!out.first.ok) assert.equal(out.phase, 'unknown-outcome');
      assert.equal(out.first.duplicate + (out.second?.duplicate ?? 0), 1, 'the server remembered its verdict');
      assert.equal(out.first.applied + (out.second?.applied ?? 0), 0);
      assert.equal((await server.rows(user)).size, 1);
      assert.equal(out.end, 'synced');
      await a.close();
    });

    test('a 5xx before commit is an unknown outcome, then retried and synced', async () => {
      const user = newUser('fail');
      const a = await open(user);
      await server.faults({ failBeforeCommit: 1 });
      const first = await a.run(async () => {
        window.rowId = db.newRowId();
        await db.change('sets', rowId, { exercise: 'dip', weightKg: 0, reps: 12 });
        const r = await db.sync();
        return { ...r, phase: db.status('sets', rowId).phase, m: db.metrics() };
      });
      assert.equal(first.ok, false);
      assert.equal(first.phase, 'unknown-outcome');
      assert.equal(first.m.unknownOutcomes, 1);
      const second = await a.run(() => db.sync());
      assert.equal(second.applied, 1, 'never counted as delivered before');
      await a.close();
    });

    test('a rejected edit is removed with its reason, even when the first answer was lost', async () => {
      const user = newUser('reject');
      const a = await open(user);
      const rowId = await a.run(async () => {
        const id = db.newRowId();
        await db.change('sets', id, { exercise: 'curl', weightKg: 15, reps: 10 });
        await db.sync();
        return id;
      });
      await server.faults({ loseResponses: 1 });
      const out = await a.run(async (id) => {
        // The device knows the server's schema now: only an app's explicit
        // choice records what it refuses — the server stays the judge.
        await db.change('sets', id, { reps: 1000 }, { check: false });
        const visibleBefore = db.row('sets', id).reps;
        const first = await db.sync();
        const second = first.ok ? { rejected: 0 } : await db.sync();
        return { visibleBefore, first, second, row: db.row('sets', id), status: db.status('sets', id), rej: db.rejections() };
      }, rowId);
      assert.equal(out.visibleBefore, 1000);
      assert.equal(out.first.rejected + out.second.rejected, 1, 'rejected once, the retry got the same verdict');
      assert.equal(out.row.reps, 10, 'the row is rebuilt without the rejected op');
      assert.equal(out.status.phase, 'rejected');
      assert.equal(out.status.reason, 'reps must be at most 100');
      assert.equal(out.rej.length, 1);
      assert.equal(out.rej[0].reason, 'reps must be at most 100');
      assert.equal(await a.run((op) => db.dismiss(op), out.rej[0].op.opId), true);
      assert.equal(await a.run((id) => db.status('sets', id).phase, rowId), 'synced');
      await a.close();
    });

    test('the server\'s schema on the device: check() and change() refuse offline, in its words, after a reopen too', async () => {
      const user = newUser('schema');
      const a = await open(user);
      const before = await a.run(async () => {
        const id = db.newRowId();
        // No schema known yet: recorded as before, the server judges.
        const known = db.schema();
        const verdict = db.check('sets', id, { exercise: 'row', weightKg: 40, reps: 1000 });
        await db.change('sets', id, { exercise: 'row', weightKg: 40, reps: 10 });
        await db.sync();
        return { id, known, verdict, schema: db.schema() };
      });
      assert.equal(before.known, null);
      assert.equal(before.verdict, null);
      assert.equal(before.schema.version, 1);
      assert.ok(before.schema.etag, 'the ETag is kept');
      await a.context.setOffline(true);
      const out = await a.run(async ({ id, user }) => {
        const t0 = performance.now();
        let verdict;
        for (let i = 0; i < 1000; i++) verdict = db.check('sets', id, { reps: 500 });
        const perCheckMs = (performance.now() - t0) / 1000;
        const ok = db.check('sets', id, { reps: 12 });
        const unknown = db.check('sets', id, { rpe: 8 });
        const err = await db.change('sets', id, { reps: 500 }).then(() => null, (e) => ({ code: e.code, reason: e.reason, refusal: e.refusal, field: e.field, message: e.message }));
        const many = await db.changeMany([{ table: 'sets', rowId: id, fields: { reps: 11 } }, { table: 'sets', rowId: id, fields: { weightKg: -1 } }])
          .then(() => null, (e) => ({ code: e.code, message: e.message, field: e.field }));
        const pending = db.pending().length;
        // Reopen, still offline: the schema is on disk.
        db.close();
        window.db = await window.Marksync.open({ endpoint: location.origin, token: `dev:${user}`, name: 'e2e', autoSync: false });
        const again = await db.change('sets', id, { reps: 500 }).then(() => null, (e) => e.code);
        return { verdict, perCheckMs, ok, unknown, err, many, pending, again };
      }, { id: before.id, user });
      assert.deepEqual(out.verdict, { code: 'out_of_range', reason: 'reps must be at most 100', field: 'reps' });
      assert.equal(out.ok, null);
      assert.deepEqual(out.unknown, { code: 'unknown_field', reason: 'unknown field: rpe', field: 'rpe' });
      assert.deepEqual(out.err, { code: 'invalid', reason: 'reps must be at most 100', refusal: 'out_of_range', field: 'reps', message: 'reps must be at most 100' });
      assert.deepEqual(out.many, { code: 'invalid', message: 'edits[1]: weightKg must be at least 0', field: 'weightKg' });
      assert.equal(out.pending, 0, 'nothing refused was recorded');
      assert.equal(out.again, 'invalid');
      console.log(`# db.check: ${(out.perCheckMs * 1000).toFixed(1)} µs per call`);
      await a.context.setOffline(false);
      // What the server says of the same edit, recorded anyway: the same words.
      const server_said = await a.run(async (id) => {
        await db.change('sets', id, { reps: 500 }, { check: false });
        await db.sync();
        return db.status('sets', id);
      }, before.id);
      assert.equal(server_said.phase, 'rejected');
      assert.equal(server_said.reason, out.verdict.reason);
      assert.equal(server_said.code, out.verdict.code);
      await a.close();
    });

    test('a 1200-op queue drains in two pushes', async () => {
      const user = newUser('drain');
      const a = await open(user);
      const r = await a.run(async () => {
        // One transaction for all 1200 (changeMany), numbers from many id blocks.
        const ids = await db.changeMany(Array.from({ length: 1200 }, (_, i) => ({ table: 'sets', rowId: `bulk-${i}`, fields: { exercise: 'plank', weightKg: 0, reps: 1 + (i % 100) } })));
        if (new Set(ids).size !== 1200) throw new Error('opIds not unique');
        const before = db.metrics().attempts;
        const r = await db.sync();
        return { ...r, attempts: db.metrics().attempts - before, pending: db.pending().length };
      });
      assert.equal(r.ok, true);
      assert.equal(r.attempts, 2);
      assert.equal(r.applied, 1200);
      assert.equal(r.pending, 0);
      assert.equal((await server.rows(user)).size, 1200);
      await a.close();
    });

    test('bad input is refused with a code and changes nothing', async () => {
      const user = newUser('bad');
      const a = await open(user);
      const errs = await a.run(async () => {
        const out = [];
        for (const [t, f] of [['Sets', { a: 1 }], ['sets', {}], ['sets', { _secret: 1 }], ['sets', { a: { nested: 1 } }], ['sets', [1]]]) {
          try { await db.change(t, 'x-1', f); out.push('accepted'); } catch (e) { out.push(`${e instanceof Error}:${e.code}`); }
        }
        return { out, pending: db.pending().length };
      });
      assert.deepEqual(errs.out, Array(5).fill('true:bad_input'));
      assert.equal(errs.pending, 0);
      // changeMany: one bad edit refuses the whole list, names it, and records nothing.
      const many = await a.run(async () => {
        const good = { table: 'sets', rowId: 'x-2', fields: { exercise: 'a', weightKg: 1, reps: 1 } };
        const out = [];
        for (const edits of [[good, { table: 'sets', rowId: 'x-3', fields: { _secret: 1 } }], [good, { table: 'sets', rowId: 'x-3' }], 'nope']) {
          try { await db.changeMany(edits); out.push('accepted'); } catch (e) { out.push(`${e.code}:${e.message}`); }
        }
        return { out, pending: db.pending().length };
      });
      assert.match(many.out[0], /^bad_input:edits\[1\]/);
      assert.match(many.out[1], /^bad_input:edits\[1\]\.fields/);
      assert.match(many.out[2], /^bad_input:/);
      assert.equal(many.pending, 0);
      await a.close();
    });

    test('an argument whose reading throws is bad_input, and the database goes on', async () => {
      const user = newUser('traps');
      const a = await open(user);
      const r = await a.run(async () => {
        const revoked = () => { const p = Proxy.revocable({ exercise: 'a' }, {}); p.revoke(); return p.proxy; };
        const getter = () => Object.defineProperty({ exercise: 'a', weightKg: 1 }, 'reps', { enumerable: true, get() { throw new Error('boom'); } });
        const keysThrow = new Proxy({}, { ownKeys() { throw new Error('no keys'); } });
        const out = [];
        const attempt = async (f) => {
          try { await f(); out.push('accepted'); } catch (e) { out.push(`${e.code}:${e.message}`); }
        };
        await attempt(() => db.change('sets', 'r-1', revoked()));
        await attempt(() => db.change('sets', 'r-1', getter(), { check: false }));
        await attempt(() => db.change('sets', 'r-1', keysThrow));
        await attempt(() => db.change('sets', 'r-1', { exercise: 'a', weightKg: 1, reps: 1 }, Object.defineProperty({}, 'space', { get() { throw new Error('no space'); } })));
        await attempt(() => db.changeMany(revoked()));
        await attempt(() => db.changeMany([{ table: 'sets', fields: revoked() }]));
        await attempt(() => db.check('sets', 'r-1', revoked()));
        await attempt(() => db.query('sets', { where: revoked() }));
        await attempt(() => db.query('sets', { orderBy: new Proxy([], { get() { throw new Error('no order'); } }) }));
        // A key that is not text is refused, not dropped (it would have matched every row).
        await attempt(() => db.query('sets', { where: { ['reps\ud800']: 99 } }));
        // The database goes on: an id, an edit, a read.
        const id = db.newRowId();
        await db.change('sets', id, { exercise: 'after', weightKg: 1, reps: 1 });
        return { out, pending: db.pending().length, row: db.row('sets', id)?.exercise };
      });
      assert.equal(r.out.length, 10);
      for (const o of r.out) assert.match(o, /^bad_input:/);
      assert.match(r.out[1], /reps could not be read: it threw "boom"/);
      assert.equal(r.pending, 1, 'only the edit after them is queued');
      assert.equal(r.row, 'after');
      await a.close();
    });

    test('rows() is a stable snapshot until something changes', async () => {
      const user = newUser('snap');
      const a = await open(user);
      const r = await a.run(async () => {
        const s1 = db.rows('sets');
        const same = s1 === db.rows('sets');
        let calls = 0;
        const off = db.subscribe(() => { calls += 1; });
        await db.change('sets', db.newRowId(), { exercise: 'x', weightKg: 1, reps: 1 });
        const s2 = db.rows('sets');
        off();
        await db.change('sets', db.newRowId(), { exercise: 'y', weightKg: 1, reps: 1 });
        return { same, changed: s1 !== s2, len: s2.length, frozen: Object.isFrozen(s2) && Object.isFrozen(s2[0]), calls, id: typeof s2[0]._id };
      });
      assert.deepEqual(r, { same: true, changed: true, len: 1, frozen: true, calls: 1, id: 'string' });
      await a.close();
    });

    test('request bodies go gzipped once the server says it takes them, and every op lands once', async () => {
      const user = newUser('gzip');
      const a = await open(user);
      const sent = [];
      a.page.on('request', (r) => {
        const path = new URL(r.url()).pathname;
        if (path.startsWith('/v1/')) sent.push({ path, coding: r.headers()['content-encoding'] ?? null, bytes: r.postDataBuffer()?.length ?? 0 });
      });
      const left = await a.run(async () => {
        for (const round of [0, 1]) {
          await db.changeMany(Array.from({ length: 50 }, (_, i) => ({ table: 'sets', rowId: `r${round}-${i}`, fields: { exercise: 'squat', weightKg: 60 + i, reps: 5 } })));
          await db.sync();
        }
        return db.pending().length;
      });
      assert.equal(left, 0);
      // Before any answer the device cannot know: its first request goes plain.
      assert.equal(sent[0].coding, null, JSON.stringify(sent));
      const zipped = sent.filter((s) => s.path === '/v1/push' && s.coding === 'gzip');
      assert.ok(zipped.length >= 1, JSON.stringify(sent));
      // 50 ops are ~6 KB of JSON; gzipped, a fraction of it.
      assert.ok(zipped.every((s) => s.bytes < 2000), `gzip pays: ${JSON.stringify(sent)}`);
      assert.equal((await server.rows(user)).size, 100);
      await a.close();
    });

    test('a gzipped body answered 415 (a proxy that does not take it) goes again plain, and every op lands once', async () => {
      const user = newUser('gzip415');
      const a = await open(user);
      const seen = [];
      // A proxy before the server that refuses encoded bodies, with no body of its own.
      await a.page.route((url) => url.pathname === '/v1/push', async (route) => {
        const coding = route.request().headers()['content-encoding'] ?? null;
        seen.push(coding);
        if (coding) await route.fulfill({ status: 415, body: '' });
        else await route.continue();
      });
      const left = await a.run(async () => {
        for (const round of [0, 1, 2]) {
          await db.changeMany(Array.from({ length: 50 }, (_, i) => ({ table: 'sets', rowId: `r${round}-${i}`, fields: { exercise: 'squat', weightKg: 60 + i, reps: 5 } })));
          await db.sync();
        }
        return { pending: db.pending().length, recovery: db.metrics().recovery ?? null };
      });
      assert.deepEqual(left, { pending: 0, recovery: null });
      const refused = seen.indexOf('gzip');
      assert.ok(refused >= 0, `a body went gzipped: ${JSON.stringify(seen)}`);
      assert.equal(seen[refused + 1], null, `the same push again plain: ${JSON.stringify(seen)}`);
      assert.ok(seen.slice(refused + 1).every((c) => c === null), `plain from then on: ${JSON.stringify(seen)}`);
      assert.equal((await server.rows(user)).size, 150);
      await a.close();
    });
  });
}
