// Concurrent overwrites shown on the device whose edit lost (PROTOCOL §2a), in
// Chromium on the real server: two devices of one user and two members of a
// space, each in its own browser context (its own IndexedDB). An offline edit
// that loses to a later one; an applied edit overwritten by a concurrent one;
// sequential edits and edits of other fields (none); still there after a
// reload; dismissed in one tab, dismissed in every tab and after a reload.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { backends, serverAndBrowser, device, newUser, until } from './helpers.mjs';

for (const backend of backends()) {
  describe(`conflicts on ${backend}`, () => {
    const env = serverAndBrowser(backend);

    /** A device of `user`: its own context, the database opened without timers (each sync is the test's). */
    async function gadget(user) {
      const d = await device(env.browser, env.server);
      const open = (page) => page.evaluate(async (user) => {
        window.db = await window.Marksync.open({ endpoint: location.origin, token: `dev:${user}`, name: 'conflicts', autoSync: false });
      }, user);
      await open(d.page);
      return {
        ...d,
        user,
        open,
        run: (fn, arg) => d.page.evaluate(fn, arg),
        reload: async () => {
          await d.page.reload();
          await d.page.waitForFunction(() => window.ready);
          await d.page.evaluate(() => window.ready);
          await open(d.page);
        },
      };
    }

    // Each device stamps `at` from the server's clock as it measured it (an
    // offset good to about half a round trip), so two edits a few ms apart on
    // two devices may be stamped in either order. The edit meant to be later
    // waits this long, far past that error.
    const later = () => new Promise((r) => setTimeout(r, 500));

    const told = (g) => g.run(() => db.conflicts().map((c) => [c.field, c.mine.value, c.theirs.value]));
    const sync = (g) => g.run(async () => { await db.sync(); await db.sync(); });

    async function twoDevices() {
      const user = newUser('ann');
      const phone = await gadget(user);
      const tablet = await gadget(user);
      const id = await phone.run(async () => {
        const id = db.newRowId();
        await db.change('sets', id, { exercise: 'squat', weightKg: 80, reps: 5 });
        await db.sync();
        return id;
      });
      await sync(tablet);
      return { user, phone, tablet, id };
    }

    test('an offline edit that loses to a later one is told on its device, stays after a reload, and is dismissed everywhere', async () => {
      const { user, phone, tablet, id } = await twoDevices();
      await phone.context.setOffline(true);
      await phone.run((id) => db.change('sets', id, { reps: 6 }), id);
      await later();
      await tablet.run(async (id) => { await db.change('sets', id, { reps: 7 }); await db.sync(); }, id);
      await phone.context.setOffline(false);
      await sync(phone);

      const [c] = await phone.run(() => db.conflicts());
      assert.equal(c.table, 'sets');
      assert.equal(c.rowId, id);
      assert.equal(c.field, 'reps');
      assert.equal(c.space, undefined, 'the personal space');
      assert.deepEqual([c.mine.value, c.theirs.value, c.theirs.user], [6, 7, user]);
      assert.ok(c.mine.at < c.theirs.at && c.mine.opId && c.theirs.opId && c.id.startsWith(c.mine.opId));
      assert.equal((await phone.run((id) => db.status('sets', id), id)).conflicts, 1);
      assert.equal((await phone.run((id) => db.row('sets', id), id)).reps, 7, 'the later edit stands');
      await sync(tablet);
      assert.deepEqual(await told(tablet), [], 'the edit that won lost nothing');

      await phone.reload();
      assert.deepEqual(await told(phone), [['reps', 6, 7]], 'stored: there after a reload');

      // A second tab of the phone: the same conflict; dismissed there, gone from the first too.
      const tab = await phone.context.newPage();
      await tab.goto(`${env.server.url}/test/harness.html`);
      await tab.waitForFunction(() => window.ready);
      await tab.evaluate(() => window.ready);
      await phone.open(tab);
      assert.deepEqual(await tab.evaluate(() => db.conflicts().map((x) => x.id)), [c.id]);
      assert.equal(await tab.evaluate((id) => db.dismissConflict(id), c.id), true);
      assert.equal(await tab.evaluate((id) => db.dismissConflict(id), c.id), false, 'once');
      await until(() => told(phone).then((t) => t.length === 0), 'the dismissal heard in the first tab');
      assert.equal((await phone.run((id) => db.status('sets', id), id)).conflicts, 0);
      await phone.reload();
      assert.deepEqual(await told(phone), [], 'dismissed after a reload too');
      await tab.close();
      await phone.context.close();
      await tablet.context.close();
    });

    test('an applied edit overwritten by a concurrent later one is told where it lost; sequential edits and other fields are not', async () => {
      const { phone, tablet, id } = await twoDevices();
      await phone.run(async (id) => { await db.change('sets', id, { reps: 6 }); await db.sync(); }, id);
      // The tablet has not pulled the 6 when it sets 7.
      await later();
      await tablet.run(async (id) => { await db.change('sets', id, { reps: 7 }); await db.sync(); }, id);
      await sync(phone);
      assert.deepEqual(await told(phone), [['reps', 6, 7]]);
      assert.deepEqual(await told(tablet), []);

      // Sequential: the phone pulled the 7 before setting 8; the tablet pulls, then sets 9.
      await phone.run(async (id) => { await db.change('sets', id, { reps: 8 }); await db.sync(); }, id);
      await sync(tablet);
      await tablet.run(async (id) => { await db.change('sets', id, { reps: 9 }); await db.sync(); }, id);
      // Concurrent, but of different fields: both stand.
      await phone.run((id) => db.change('sets', id, { weightKg: 90 }), id);
      await tablet.run(async (id) => { await db.change('sets', id, { reps: 10 }); await db.sync(); }, id);
      await sync(phone);
      await sync(tablet);
      assert.deepEqual(await told(phone), [['reps', 6, 7]], 'nothing new');
      assert.deepEqual(await told(tablet), []);
      const row = await phone.run((id) => db.row('sets', id), id);
      assert.deepEqual([row.weightKg, row.reps], [90, 10]);
      await phone.context.close();
      await tablet.context.close();
    });

    test('in a shared space the member who wrote it is named', async () => {
      const ann = await gadget(newUser('ann'));
      const bob = await gadget(newUser('bob'));
      const diary = `~${ann.user}`;
      const id = await ann.run(async () => {
        const id = db.newRowId();
        await db.change('sets', id, { exercise: 'squat', weightKg: 80, reps: 5 });
        await db.sync();
        return id;
      });
      await ann.run(({ diary, bob }) => db.setMember(diary, bob, 'editor'), { diary, bob: bob.user });
      await bob.run((diary) => db.accept(diary), diary);
      await until(() => sync(bob).then(() => bob.run(({ id, diary }) => db.row('sets', id, { space: diary }), { id, diary })), 'the diary on bob');
      await bob.run(({ id, diary }) => db.change('sets', id, { reps: 6 }, { space: diary }), { id, diary });
      await later();
      await ann.run(async (id) => { await db.change('sets', id, { reps: 7 }); await db.sync(); }, id);
      await sync(bob);
      const [c] = await bob.run(() => db.conflicts());
      assert.deepEqual([c.space, c.theirs.user, c.mine.value, c.theirs.value], [diary, ann.user, 6, 7]);
      assert.equal((await bob.run(({ id, diary }) => db.status('sets', id, { space: diary }), { id, diary })).conflicts, 1);
      await sync(ann);
      assert.deepEqual(await told(ann), []);
      await ann.context.close();
      await bob.context.close();
    });
  });
}
