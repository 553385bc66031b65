// Shared spaces end to end (PROTOCOL §3c, §4b): two people, each in their own
// browser context (their own IndexedDB), on the real server. The owner shares
// her diary (her personal space) with a coach: as a viewer he sees her sets
// live and his edit is refused on his device in the server's words; promoted
// to editor, his edit reaches her; revoked, his copy disappears and an edit he
// queued offline comes back as a rejection with its content.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { backends, startServer, launch, device, newUser, until } from './helpers.mjs';

for (const backend of backends()) {
  describe(`shared spaces on ${backend}`, () => {
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

    async function person(user) {
      const d = await device(browser, server);
      const openDb = () => d.page.evaluate(async (user) => {
        window.db = await window.Marksync.open({ endpoint: location.origin, token: `dev:${user}`, name: 'spaces' });
      }, user);
      await openDb();
      return {
        ...d,
        user,
        run: (fn, arg) => d.page.evaluate(fn, arg),
        reload: async () => {
          await d.page.reload();
          await d.page.waitForFunction(() => window.ready);
          await d.page.evaluate(() => window.ready);
          await openDb();
        },
      };
    }

    test('share as viewer, promote, revoke: live, refused on the device, gone after the revoke', async () => {
      const ann = await person(newUser('ann'));
      const coach = await person(newUser('coach'));
      const diary = `~${ann.user}`;
      try {
        const first = await ann.run(async () => {
          const id = db.newRowId();
          await db.change('sets', id, { exercise: 'squat', weightKg: 100, reps: 5 });
          await db.sync();
          return id;
        });
        await coach.run(() => db.sync());
        assert.deepEqual(await coach.run(() => db.rows('sets')), [], 'not shared yet: nothing of hers');
        assert.equal(await ann.run(() => db.spaces()[0].space), diary, 'her personal space, named after a sync');

        // Shared as viewer: the membership poke makes his device pull; the whole diary arrives.
        await ann.run(({ diary, coach }) => db.setMember(diary, coach, 'viewer'), { diary, coach: coach.user });
        const seen = await until(() => coach.run(() => db.rows('sets')).then((r) => r.length === 1 && r), 'the diary on the coach');
        assert.equal(seen[0]._id, first);
        assert.equal(seen[0]._space, diary);
        assert.deepEqual(await coach.run(() => db.spaces().map((s) => [s.space !== null && !s.personal ? s.space : 'mine', s.role])),
          [['mine', 'owner'], [diary, 'viewer']]);

        // Live: a set she records reaches him without him asking.
        const second = await ann.run(async () => {
          const id = db.newRowId();
          await db.change('sets', id, { exercise: 'deadlift', weightKg: 140, reps: 3 });
          return id;
        });
        await until(() => coach.run((id) => db.row('sets', id), second), 'her new set on the coach, live');

        // A viewer's edit: refused at once on his device, the server's code and words, nothing queued.
        const refused = await coach.run(async (id) => {
          try {
            await db.change('sets', id, { reps: 9 });
            return null;
          } catch (e) {
            return { code: e.code, message: e.message, pending: db.pending().length };
          }
        }, first);
        assert.deepEqual(refused, { code: 'read_only', message: `you are a viewer of space ${diary}: viewers cannot edit its rows`, pending: 0 });

        // Promoted to editor: his edit goes to her space and reaches her.
        await ann.run(({ diary, coach }) => db.setMember(diary, coach, 'editor'), { diary, coach: coach.user });
        await until(() => coach.run(() => db.spaces().some((s) => s.role === 'editor')), 'the promotion on the coach');
        await coach.run((id) => db.change('sets', id, { reps: 9 }), first);
        await until(() => ann.run((id) => db.row('sets', id)?.reps === 9, first), 'his edit on her device');
        const mine = await ann.run((id) => db.row('sets', id), first);
        assert.equal(mine._space, undefined, 'on her device it is still her own row');
        assert.equal((await server.rows(ann.user)).get(`sets/${first}`).fields.reps, 9);

        // Offline, he edits; she revokes him meanwhile.
        await coach.context.setOffline(true);
        const queued = await coach.run((id) => db.change('sets', id, { reps: 11 }), second);
        await ann.run(({ diary, coach }) => db.setMember(diary, coach, null), { diary, coach: coach.user });
        await coach.context.setOffline(false);
        await coach.run(() => db.sync().catch(() => null));
        await until(async () => (await coach.run(() => db.rows('sets'))).length === 0 && (await coach.run(() => db.rejections().length)) === 1,
          'his copy gone and the queued edit back');
        const back = await coach.run(() => db.rejections()[0]);
        assert.equal(back.code, 'forbidden');
        assert.equal(back.reason, `you are not a member of space ${diary}`);
        assert.equal(back.op.opId, queued);
        assert.equal(back.op.fields.reps, 11, 'with its content, to copy elsewhere');
        const status = await coach.run((id) => db.status('sets', id), second);
        assert.equal(status.phase, 'rejected', 'the row is gone, its refusal still shows');
        assert.equal(status.code, 'forbidden');
        assert.equal(await coach.run(() => db.spaces().length), 1);
        assert.equal((await server.rows(ann.user)).get(`sets/${second}`).fields.reps, 3, 'the refused edit never landed');

        // After a reload the device still holds nothing of hers.
        await coach.reload();
        assert.deepEqual(await coach.run(() => db.rows('sets')), []);
        assert.equal(await coach.run(() => db.rejections().length), 1);
        const again = await coach.run(({ id, diary }) => db.change('sets', id, { reps: 1 }, { space: diary }).then(() => 'recorded', (e) => e.code), { id: second, diary });
        assert.equal(again, 'forbidden', 'an edit in a space he left is refused on his device');
      } finally {
        await ann.context.close();
        await coach.context.close();
      }
    });
  });
}
