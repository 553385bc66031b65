// Queries on the device in real Chromium over real IndexedDB
// (docs/protocol.md §7, "Queries"): filters, order, keyset pages, counts,
// indexes and explain, bad queries, and live queries that hear a result
// only when it changed — in one tab, across two tabs, after a reload.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, launch, device, newUser, until } from './helpers.mjs';

describe('queries in Chromium', () => {
  let server;
  let browser;
  before(async () => {
    server = await startServer('sqlite');
    browser = await launch();
  });
  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  async function open(user, name = 'q') {
    const d = await device(browser, server);
    const run = (fn, arg) => d.page.evaluate(fn, arg);
    await run(async ({ user, name }) => {
      window.db = await window.Marksync.open({
        endpoint: location.origin, token: `dev:${user}`, name, autoSync: false, live: false,
        indexes: { sets: [['exercise', 'weightKg'], ['weightKg']] },
      });
    }, { user, name });
    return { ...d, run };
  }

  async function seed(d) {
    await d.run(async () => {
      const ex = ['squat', 'bench', 'deadlift'];
      const edits = [];
      for (let i = 0; i < 30; i++) {
        const fields = { exercise: ex[i % 3], weightKg: 20 + (i % 10) * 5, reps: 1 + (i % 7) };
        if (i % 5 === 0) delete fields.reps;
        edits.push({ table: 'sets', rowId: `s${String(i).padStart(2, '0')}`, fields });
      }
      edits.push({ table: 'sets', rowId: 'txt', fields: { exercise: 'squat', weightKg: '9', reps: 3 } });
      await db.changeMany(edits);
    });
  }

  test('where, orderBy, limit and after answer as filter-and-sort over every row; count and explain agree', async () => {
    const d = await open(newUser('q'));
    await seed(d);
    const out = await d.run(async () => {
      const all = db.rows('sets');
      const ref = (pred, key) => all.filter(pred).sort(key);
      const ids = (rows) => rows.map((r) => r._id);
      const heavyFirst = (a, b) => (b.weightKg - a.weightKg) || (a._id < b._id ? -1 : 1);
      const q = { where: { exercise: 'squat', weightKg: { gte: 30, lt: 60 } }, orderBy: ['weightKg', 'desc'], limit: 3 };
      const page1 = db.query('sets', q);
      const page2 = db.query('sets', { ...q, after: page1[page1.length - 1] });
      const want = ids(ref((r) => r.exercise === 'squat' && typeof r.weightKg === 'number' && r.weightKg >= 30 && r.weightKg < 60, heavyFirst));
      return {
        page1: ids(page1), page2: ids(page2), want,
        frozen: Object.isFrozen(page1) && Object.isFrozen(page1[0]),
        awaited: ids(await db.query('sets', { limit: 2 })),
        noReps: ids(db.query('sets', { where: { reps: null } })),
        wantNoReps: ids(all.filter((r) => r.reps === undefined)),
        ltTen: ids(db.query('sets', { where: { weightKg: { lt: 10 } } })),
        prefix: ids(db.query('sets', { where: { exercise: { prefix: 'dead' } }, limit: 2 })),
        inList: db.count('sets', { where: { exercise: { in: ['bench', 'deadlift'] } } }),
        count: db.count('sets', { where: { exercise: 'squat' } }),
        explainIndex: db.explain('sets', q),
        explainScan: db.explain('sets', { where: { reps: 3 } }),
      };
    });
    assert.deepEqual(out.page1, out.want.slice(0, 3));
    assert.deepEqual(out.page2, out.want.slice(3, 6));
    assert.ok(out.frozen, 'results are frozen');
    assert.deepEqual(out.awaited, ['s00', 's01']);
    assert.deepEqual(out.noReps, out.wantNoReps, 'a missing field reads as null');
    assert.deepEqual(out.ltTen, [], "a range keeps to its bound's kind: '9' is a string");
    assert.deepEqual(out.prefix, ['s02', 's05']);
    assert.equal(out.inList, 20);
    assert.equal(out.count, 11);
    assert.deepEqual(out.explainIndex.index, ['exercise', 'weightKg']);
    assert.equal(out.explainIndex.ordered, true);
    assert.equal(out.explainScan.index, null, out.explainScan.plan);
    await d.context.close();
  });

  test('a bad query throws bad_input and changes nothing', async () => {
    const d = await open(newUser('bad'));
    await seed(d);
    const codes = await d.run(() => {
      const code = (q) => { try { db.query('sets', q); return 'none'; } catch (e) { return e.code; } };
      return [
        code({ where: { reps: { near: 3 } } }),
        code({ limit: 1.5 }),
        code({ limit: 0 }),
        code({ orderBy: [['weightKg', 'up']] }),
        code({ orderBy: 7 }),
        code({ where: { reps: [1, 2] } }),
        code({ wher: {} }),
        code('sets'),
        code({ where: { reps: { in: 3 } } }),
        code({ where: { reps: 10n } }),
        // Names no edit could write were read as an empty answer, or ignored.
        code({ where: { 'a b': 1 } }),
        code({ where: { _id: 's01' } }),
        code({ orderBy: ['_id', 'desc'] }),
        code({ orderBy: ['weightKg', 'DESC'] }),
        (() => { try { db.query('No Such'); return 'none'; } catch (e) { return e.code; } })(),
        (() => { try { db.count('No Such'); return 'none'; } catch (e) { return e.code; } })(),
        (() => { try { db.rows('No Such'); return 'none'; } catch (e) { return e.code; } })(),
      ];
    });
    assert.deepEqual(codes, Array(codes.length).fill('bad_input'));
    // An edit of changeMany with a misspelt key made a new row instead of the one named.
    assert.equal(await d.run(() => db.changeMany([{ table: 'sets', rowID: 'mine', fields: { reps: 1 } }]).then(() => 'none', (e) => e.code)), 'bad_input');
    assert.equal(await d.run(() => window.Marksync.open({ endpoint: location.origin, name: 'badix', indexes: { sets: [['a b']] } }).then(() => 'none', (e) => e.code)), 'bad_input');
    assert.equal(await d.run(() => db.pending().length), 31);
    await d.context.close();
  });

  test('a live query hears its first result, then only results that changed', async () => {
    const d = await open(newUser('live'));
    await seed(d);
    const heard = await d.run(async () => {
      const log = { squat: [], bench: [], top: [] };
      window.stops = [
        db.watch('sets', { where: { exercise: 'squat' }, orderBy: 'weightKg', limit: 2 }, (rows) => log.squat.push(rows.map((r) => r._id))),
        db.watch('sets', { where: { exercise: 'bench' } }, (rows) => log.bench.push(rows.length)),
        db.watch('sets', { where: { weightKg: { gte: 0 } }, orderBy: [['weightKg', 'desc']], limit: 1 }, (rows) => log.top.push(rows[0]?._id)),
      ];
      const settle = () => new Promise((r) => setTimeout(r, 50));
      await settle();
      const first = JSON.stringify(log);
      await db.change('sets', 's01', { reps: 9 }); // a bench row: only the bench query's result moves
      await settle();
      const afterBench = JSON.stringify(log);
      await db.change('sets', 's27', { weightKg: 21 }); // a squat row outside the first two
      await settle();
      const afterFar = JSON.stringify(log);
      await db.change('sets', 'new', { exercise: 'squat', weightKg: 500 });
      await settle();
      window.log = log;
      return { first: JSON.parse(first), afterBench: JSON.parse(afterBench), afterFar: JSON.parse(afterFar), last: log };
    });
    assert.deepEqual(heard.first.squat.length, 1);
    assert.deepEqual(heard.first.bench, [10]);
    assert.deepEqual(heard.afterBench.squat, heard.first.squat, 'a change of another row set is not heard');
    assert.deepEqual(heard.afterBench.top, heard.first.top);
    assert.equal(heard.afterBench.bench.length, 2, 'a bench row in the result changed its reps: heard once more');
    assert.deepEqual(heard.afterFar.squat.length, 2, 's27 moved into the two lightest squats');
    assert.deepEqual(heard.last.top.at(-1), 'new');
    // Stopping a live query: not heard again (twice: nothing).
    const after = await d.run(async () => {
      window.stops.forEach((s) => { s(); s(); });
      await db.change('sets', 'new2', { exercise: 'squat', weightKg: 1 });
      await new Promise((r) => setTimeout(r, 50));
      return window.log.squat.length;
    });
    assert.equal(after, heard.last.squat.length);
    await d.context.close();
  });

  // A lazy tab's query reads the indexes on disk in several reads: another
  // tab's steps between two of them (its edits queued, then acknowledged)
  // moved rows the read had met, and they were answered twice (count 370 of
  // 300 rows). A row met twice is answered once, as it was met last.
  test('a lazy tab never answers a row twice while another tab edits and syncs', async () => {
    const user = newUser('twice');
    const context = await browser.newContext();
    const tab = async (lazy) => {
      const page = await context.newPage();
      await page.goto(`${server.url}/test/harness.html`);
      await page.waitForFunction(() => window.ready);
      await page.evaluate(async ({ user, lazy }) => {
        window.db = await window.Marksync.open({
          endpoint: location.origin, token: `dev:${user}`, name: 'twice', live: false, lazy,
          indexes: { sets: [['exercise', 'weightKg']] },
        });
      }, { user, lazy });
      return page;
    };
    const lazy = await tab(true);
    const eager = await tab(false);
    await eager.evaluate(async () => {
      await db.changeMany(Array.from({ length: 300 }, (_, i) => ({ table: 'sets', rowId: `p${i}`, fields: { exercise: 'squat', weightKg: i % 100, reps: 5 } })));
      await db.sync();
    });
    const edits = eager.evaluate(async () => {
      for (let i = 0; i < 150; i += 1) {
        db.change('sets', `p${(i * 13) % 300}`, { weightKg: 100 + (i % 50) });
        if (i % 10 === 0) await new Promise((r) => setTimeout(r, 5));
      }
    });
    const wrong = await lazy.evaluate(async () => {
      const wrong = [];
      const where = { exercise: 'squat' };
      for (let i = 0; i < 150; i += 1) {
        const [rows, n] = await Promise.all([db.query('sets', { where }), db.count('sets', { where })]);
        const ids = new Set(rows.map((r) => r._id));
        if (ids.size !== rows.length) wrong.push(`${rows.length} rows, ${rows.length - ids.size} twice`);
        if (n > 300) wrong.push(`count ${n}`);
        await new Promise((r) => setTimeout(r, 10));
      }
      return wrong;
    });
    await edits;
    assert.deepEqual(wrong, [], 'no answer holds a row twice');
    await until(() => lazy.evaluate(async () => (await db.count('sets', { where: { exercise: 'squat' } })) === 300), 'all 300 rows once quiet');
    await context.close();
  });

  // A lazy read under way when the app called close() rejected with
  // storage_failed, "local storage was closed under the library": an app
  // that tells its user their storage broke would have said so for nothing.
  test('a read under way when the app closes the database rejects with closed, as one after it', async () => {
    const user = newUser('closing');
    const d = await device(browser, server);
    const out = await d.page.evaluate(async (user) => {
      const o = { endpoint: location.origin, token: `dev:${user}`, name: 'closing', autoSync: false, live: false, indexes: { sets: [['weightKg']] } };
      let db = await window.Marksync.open(o);
      await db.changeMany(Array.from({ length: 3000 }, (_, i) => ({ table: 'sets', rowId: `c${i}`, fields: { exercise: 'squat', weightKg: i % 500, reps: 5 } })));
      db.close();
      db = await window.Marksync.open({ ...o, lazy: true, cacheBytes: 1 });
      const said = (p) => p.then((v) => `resolved ${Array.isArray(v) ? v.length : v}`, (e) => e.code);
      const reads = [
        said(db.query('sets', { orderBy: 'weightKg', limit: 1000 })),
        said(db.count('sets', { where: { exercise: 'squat' } })),
        said(db.rows('sets')),
      ];
      db.close();
      const after = await said(Promise.resolve().then(() => db.query('sets', { orderBy: 'weightKg', limit: 10 })));
      return { under: await Promise.all(reads), after };
    }, user);
    assert.equal(out.after, 'closed');
    for (const r of out.under) assert.ok(r === 'closed' || r.startsWith('resolved'), `a read under way at close() ends as closed (got ${r})`);
    assert.ok(out.under.includes('closed'), `some read was under way at close(): ${out.under}`);
    await d.context.close();
  });

  test("another tab's edit reaches this tab's live query; a reload keeps the rows; a restored row shows no _deleted", async () => {
    const user = newUser('tabs');
    const d = await open(user, 'tabs');
    const second = await d.context.newPage();
    await second.goto(`${server.url}/test/harness.html`);
    await second.waitForFunction(() => window.ready);
    await second.evaluate(async (user) => {
      window.db = await window.Marksync.open({ endpoint: location.origin, token: `dev:${user}`, name: 'tabs', autoSync: false, live: false });
    }, user);
    await d.run(() => {
      window.heard = [];
      db.watch('sets', { where: { exercise: 'row' } }, (rows) => window.heard.push(rows.map((r) => r._id)));
    });
    await second.evaluate(() => db.change('sets', 'r1', { exercise: 'row', weightKg: 40 }));
    await until(() => d.run(() => window.heard.at(-1)?.includes('r1')), 'the other tab\'s edit in the live query');
    await second.evaluate(async () => {
      await db.remove('sets', 'r1');
      await db.restore('sets', 'r1');
    });
    await until(() => d.run(() => window.heard.at(-1)?.length === 1 && window.heard.length >= 3), 'remove and restore heard');
    await d.page.reload();
    await d.page.waitForFunction(() => window.ready);
    const row = await d.run(async () => {
      window.db = await window.Marksync.open({ endpoint: location.origin, name: 'tabs', autoSync: false, live: false });
      return db.query('sets', { where: { exercise: 'row' } })[0];
    });
    assert.deepEqual(row, { _id: 'r1', exercise: 'row', weightKg: 40 });
    await d.context.close();
  });

  test('the React hooks over a database opened lazily: useQuery, useRows and useRowStatus follow its edits', async () => {
    const user = newUser('hooks');
    const context = await browser.newContext();
    const page = await context.newPage();
    page.on('pageerror', (e) => console.log('# pageerror', e.message));
    await page.goto(`${server.url}/test/hooks-harness.html`);
    await page.waitForFunction(() => window.ready);
    await page.evaluate(async (user) => {
      window.db = await window.Marksync.open({
        endpoint: location.origin, token: `dev:${user}`, name: 'hooks', autoSync: false, live: false, lazy: true,
        indexes: { sets: [['exercise', 'weightKg']] },
      });
      await db.changeMany([
        { table: 'sets', rowId: 'a', fields: { exercise: 'squat', weightKg: 60, reps: 5 } },
        { table: 'sets', rowId: 'b', fields: { exercise: 'bench', weightKg: 40, reps: 5 } },
      ]);
      const { useQuery, useRows, useRowStatus, useSpaces, useConflicts } = window.hooks;
      window.renders = [];
      // Reads a lazy database answers at once stay answers at once: arrays from the first render.
      window.notArrays = 0;
      const App = () => {
        const squats = useQuery(db, 'sets', { where: { exercise: 'squat' }, orderBy: ['weightKg', 'desc'] });
        const all = useRows(db, 'sets');
        const status = useRowStatus(db, 'sets', 'a');
        if (!Array.isArray(useSpaces(db)) || !Array.isArray(useConflicts(db))) window.notArrays++;
        const seen = { squats: squats && squats.map((r) => `${r._id}:${r.weightKg}`), all: all.length, phase: status && status.phase };
        window.renders.push(seen);
        return window.h('pre', null, JSON.stringify(seen));
      };
      window.render(window.h(App));
    }, user);
    const last = () => page.evaluate(() => window.renders.at(-1));
    await until(async () => JSON.stringify(await last()) === JSON.stringify({ squats: ['a:60'], all: 2, phase: 'pending' }), 'the first results');
    await page.evaluate(() => db.change('sets', 'c', { exercise: 'squat', weightKg: 80, reps: 3 }));
    await until(async () => JSON.stringify((await last()).squats) === JSON.stringify(['c:80', 'a:60']) && (await last()).all === 3, 'a new row heard');
    await page.evaluate(() => db.sync());
    await until(async () => (await last()).phase === 'synced', 'the status follows the sync');
    const text = await page.textContent('#root');
    assert.deepEqual(JSON.parse(text), { squats: ['c:80', 'a:60'], all: 3, phase: 'synced' });
    assert.equal(await page.evaluate(() => window.notArrays), 0, 'useSpaces and useConflicts are arrays in every render');
    await context.close();
  });

  test('useRowStatus over a lazy database never shows one row\'s status under another\'s id', async () => {
    const user = newUser('hookrow');
    const context = await browser.newContext();
    const page = await context.newPage();
    page.on('pageerror', (e) => console.log('# pageerror', e.message));
    await page.goto(`${server.url}/test/hooks-harness.html`);
    await page.waitForFunction(() => window.ready);
    await page.evaluate(async (user) => {
      window.db = await window.Marksync.open({ endpoint: location.origin, token: `dev:${user}`, name: 'hookrow', autoSync: false, live: false, lazy: true });
      await db.change('sets', 'a', { exercise: 'squat', weightKg: 60, reps: 5 });
      await db.sync();
      await db.change('sets', 'b', { exercise: 'bench', weightKg: 40, reps: 5 });
      window.renders = [];
      window.App = ({ rowId }) => {
        const status = window.hooks.useRowStatus(db, 'sets', rowId);
        window.renders.push({ rowId, phase: status ? status.phase : null });
        return window.h('pre', null, rowId);
      };
      window.render(window.h(App, { rowId: 'a' }));
    }, user);
    const truth = { a: 'synced', b: 'pending' };
    await until(() => page.evaluate(() => window.renders.at(-1).phase === 'synced'), 'a synced');
    for (const rowId of ['b', 'a', 'b']) {
      await page.evaluate((rowId) => { window.renders = []; window.render(window.h(App, { rowId })); }, rowId);
      await until(() => page.evaluate((p) => window.renders.at(-1).phase === p, truth[rowId]), `${rowId} shown`);
      for (const r of await page.evaluate(() => window.renders)) {
        assert.ok(r.phase === null || r.phase === truth[r.rowId], `a render of ${r.rowId} showed ${r.phase}`);
      }
    }
    await context.close();
  });
});
