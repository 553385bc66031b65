// Schema versions end to end (PROTOCOL §3b, §9): a device whose app is on
// version 1 and one on version 2 edit the same rows through a server on
// version 2 (which added `rpe` and renamed `weightKg` to `weight`), and
// converge, each showing the row in its own app's names.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { readFileSync, writeFileSync } from 'node:fs';
import { backends, startServer, launch, device, newUser, root } from './helpers.mjs';

for (const backend of backends()) {
  describe(`schema versions on ${backend}`, () => {
    let server;
    let browser;
    before(async () => {
      server = await startServer(backend, { extra: ['--schema', join(root, 'src', 'schema', 'workout-v2.json')] });
      browser = await launch();
    });
    after(async () => {
      await browser?.close();
      await server?.stop();
    });

    async function app(user, schema) {
      const d = await device(browser, server);
      await d.page.evaluate(async ({ user, schema }) => {
        window.db = await window.Marksync.open({ endpoint: location.origin, token: `dev:${user}`, name: 'versions', autoSync: false, schema });
      }, { user, schema });
      return { ...d, run: (fn, arg) => d.page.evaluate(fn, arg) };
    }

    test('an app on v1 and an app on v2 edit the same rows through a v2 server and converge, each in its own names', async () => {
      const user = newUser('versions');
      const v1 = await app(user, 1);
      const v2 = await app(user, 2);
      // The v1 app writes in its names; the server reads the op through the steps.
      const id = await v1.run(async () => {
        const id = db.newRowId();
        await db.change('sets', id, { exercise: 'squat', weightKg: 80, reps: 5 });
        const r = await db.sync();
        if (!r.ok || r.rejected) throw new Error(JSON.stringify(r));
        return id;
      });
      const stored = (await server.rows(user)).get(`sets/${id}`).fields;
      assert.equal(stored.weight, 80, 'stored in the newest names');
      assert.equal(stored.weightKg, undefined);

      // The v2 app sees the row in v2's names, adds rpe and changes the weight.
      const seen2 = await v2.run(async (id) => {
        await db.sync();
        const before = db.row('sets', id);
        await db.change('sets', id, { weight: 82.5, rpe: 8 });
        await db.sync();
        return { before, schema: db.schema().version };
      }, id);
      assert.equal(seen2.schema, 2);
      assert.deepEqual({ ...seen2.before }, { _id: id, exercise: 'squat', weight: 80, reps: 5 });

      // The v1 app: its own name for the weight, rpe passed through untouched;
      // its edits still checked by the server's rules in its own names.
      const seen1 = await v1.run(async (id) => {
        await db.sync();
        const row = db.row('sets', id);
        const refused = db.check('sets', id, { weightKg: 2000 });
        await db.change('sets', id, { reps: 6 });
        await db.sync();
        return { row, refused, after: db.row('sets', id) };
      }, id);
      assert.equal(seen1.row.weightKg, 82.5, 'the renamed field under the v1 name');
      assert.equal(seen1.row.weight, undefined);
      assert.equal(seen1.row.rpe, 8, 'a field v1 does not know is kept');
      assert.deepEqual(seen1.refused, { code: 'out_of_range', reason: 'weight must be at most 1000', field: 'weight' });
      assert.equal(seen1.after.reps, 6);

      // Both converge on the server's row, each in its names.
      const final2 = await v2.run(async (id) => { await db.sync(); return db.row('sets', id); }, id);
      const final1 = await v1.run((id) => db.row('sets', id), id);
      assert.deepEqual({ ...final2 }, { _id: id, exercise: 'squat', weight: 82.5, reps: 6, rpe: 8 });
      assert.deepEqual({ ...final1 }, { _id: id, exercise: 'squat', weightKg: 82.5, reps: 6, rpe: 8 });
      const server_row = (await server.rows(user)).get(`sets/${id}`).fields;
      assert.deepEqual(server_row, { exercise: 'squat', weight: 82.5, reps: 6, rpe: 8 });
      await v1.context.close();
      await v2.context.close();
    });
  });
}

// A schema file edited under the same version (a limit relaxed in place,
// the server restarted): devices never fetched it again, and went on
// refusing, by the old limit, edits the server now took.
describe('a schema changed under the same version', () => {
  let server;
  let browser;
  const v2 = join(root, 'src', 'schema', 'workout-v2.json');
  before(async () => {
    server = await startServer('sqlite', { extra: ['--schema', v2] });
    browser = await launch();
  });
  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  test('reaches the device at its next pull, and its edits are checked by it', async () => {
    const user = newUser('inplace');
    const d = await device(browser, server);
    const run = (fn, arg) => d.page.evaluate(fn, arg);
    await run(async (user) => {
      window.db = await window.Marksync.open({ endpoint: location.origin, token: `dev:${user}`, name: 'inplace', autoSync: false, live: false, schema: 2 });
      await db.sync();
    }, user);
    assert.equal((await run(() => db.check('sets', 'r1', { exercise: 'squat', weight: 80, reps: 300 })))?.reason, 'reps must be at most 100');

    const relaxed = join(server.dir, 'relaxed.json');
    writeFileSync(relaxed, readFileSync(v2, 'utf8').replace('"min": 1, "max": 100', '"min": 1, "max": 500'));
    await server.kill();
    await server.restart(['--schema', relaxed]);
    const after = await run(async () => {
      await db.sync();
      const check = db.check('sets', 'r1', { exercise: 'squat', weight: 80, reps: 300 });
      await db.change('sets', 'r1', { exercise: 'squat', weight: 80, reps: 300 });
      const report = await db.sync();
      return { check, applied: report.applied, phase: db.status('sets', 'r1').phase, version: db.schema().version };
    });
    assert.deepEqual(after, { check: null, applied: 1, phase: 'synced', version: 2 });
    assert.equal((await server.rows(user)).get('sets/r1').fields.reps, 300);
    await d.context.close();
  });
});

// A field added with a default (v3's `unit`, "kg") was never shown: rows
// written before lacked it in row(), rows() and every query, eager or lazy,
// while the server judged them as holding "kg" (PROTOCOL §3b).
describe('a field added with a default', () => {
  let server;
  let browser;
  before(async () => {
    server = await startServer('sqlite', { extra: ['--schema', join(root, 'src', 'schema', 'workout-v2.json')] });
    browser = await launch();
  });
  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  test('is shown and found in rows written before it, eager and lazy', async () => {
    const user = newUser('defaults');
    const a = await device(browser, server);
    await a.page.evaluate(async (user) => {
      window.db = await window.Marksync.open({ endpoint: location.origin, token: `dev:${user}`, name: 'defaults', autoSync: false, live: false, schema: 2 });
      await db.change('sets', 'r1', { exercise: 'squat', weight: 80, reps: 5 });
      await db.change('sets', 'r2', { exercise: 'bench', weight: 90, reps: 6 });
      await db.sync();
    }, user);
    await a.context.close();
    await server.kill();
    await server.restart(['--schema', join(root, 'src', 'schema', 'workout-v3.json')]);
    for (const lazy of [false, true]) {
      const d = await device(browser, server);
      const seen = await d.page.evaluate(async ({ user, lazy }) => {
        window.db = await window.Marksync.open({
          endpoint: location.origin, token: `dev:${user}`, name: 'defaults', autoSync: false, live: false, schema: 3, lazy,
          indexes: { sets: [['unit']] },
        });
        await db.sync();
        const ids = async (q) => (await db.query('sets', q)).map((r) => r._id);
        return {
          row: (await db.row('sets', 'r1')).unit,
          rows: (await db.rows('sets')).map((r) => r.unit),
          kg: await ids({ where: { unit: 'kg' } }),
          none: await ids({ where: { unit: null } }),
          count: await db.count('sets', { where: { unit: 'kg' } }),
        };
      }, { user, lazy });
      assert.deepEqual(seen, { row: 'kg', rows: ['kg', 'kg'], kg: ['r1', 'r2'], none: [], count: 2 }, `lazy: ${lazy}`);
      await d.context.close();
    }
  });
});
