// Shared spaces end to end (PROTOCOL §3c, §4b): two people, each in their own
// browser context (their own IndexedDB), on the real server. The owner shares
// her diary (her personal space) with a coach — an invitation he accepts;
// until then nothing of hers reaches him. As a viewer he sees her sets
// live and his edit is refused on his device in the server's words; promoted
// to editor, his edit reaches her; revoked, his copy disappears and an edit he
// queued offline comes back as a rejection with its content. A member who
// leaves has the space's rows taken off their device.
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

        // Shared as viewer: an invitation; accepted, his device pulls and the whole diary arrives.
        const invited = await ann.run(({ diary, coach }) => db.setMember(diary, coach, 'viewer'), { diary, coach: coach.user });
        assert.equal(invited.invited, true);
        await coach.run(async (diary) => db.accept(diary), diary);
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

    test('an invitation brings nothing until accepted; leaving takes the rows off the device', async () => {
      const alice = await person(newUser('alice'));
      const bob = await person(newUser('bob'));
      const club = `club-${alice.user}`;
      try {
        await alice.run(async (club) => {
          await db.createSpace(club);
          await db.change('sets', db.newRowId(), { exercise: 'row', weightKg: 50, reps: 10 }, { space: club });
          await db.sync();
        }, club);
        const answer = await alice.run(({ club, bob }) => db.setMember(club, bob, 'editor'), { club, bob: bob.user });
        assert.deepEqual(answer, { user: bob.user, role: 'editor', invited: true });

        // Invited only: his device holds nothing of the club, and knows no such space.
        await bob.run(() => db.sync());
        assert.deepEqual(await bob.run(() => db.rows('sets')), []);
        assert.equal(await bob.run(() => db.spaces().length), 1, 'his own space only');
        const pending = await bob.run(() => db.invitations());
        assert.equal(pending.length, 1);
        assert.deepEqual({ ...pending[0], expiresAt: typeof pending[0].expiresAt }, { space: club, role: 'editor', from: alice.user, expiresAt: 'number' });
        assert.ok(pending[0].expiresAt > Date.now(), 'it lapses later');
        // The owner sees the same invitation among the club's pending ones.
        const asOwner = [{ ...pending[0], user: bob.user }];
        assert.deepEqual(await alice.run((club) => db.invited(club), club), asOwner);
        assert.deepEqual(await alice.run((club) => db.invited(club, { after: '', limit: 1 }), club), asOwner);
        assert.deepEqual(await alice.run((club) => db.invited(club, { limit: 0 }).catch((e) => e.code), club), 'bad_input');

        // Accepted: the rows flow.
        assert.deepEqual(await bob.run((club) => db.accept(club), club), { space: club, role: 'editor' });
        await until(() => bob.run(() => db.rows('sets')).then((r) => r.length === 1), 'the club on his device');
        assert.deepEqual(await bob.run(() => db.invitations()), []);
        assert.deepEqual(await alice.run((club) => db.invited(club), club), [], 'accepted: no longer pending');
        const notOwner = await bob.run((club) => db.invited(club).then(() => null, (e) => [e.code, e.refusal]), club);
        assert.deepEqual(notOwner, ['refused', 'forbidden'], 'an editor does not see the invitations');
        const firstMember = await alice.run((club) => db.members(club, { limit: 1 }), club);
        assert.deepEqual(firstMember, { space: club, members: [{ user: alice.user, role: 'owner' }] }, 'a page asked for, by user id');

        // Errors are Errors with stable codes.
        const errors = await bob.run(async (club) => {
          const code = (p) => p.then(() => null, (e) => [e instanceof Error, e.code, e.refusal ?? null]);
          return [await code(db.accept('nowhere')), await code(db.accept(42)), await code(db.leave(`~${club}`))];
        }, club);
        assert.deepEqual(errors[0], [true, 'refused', 'not_found']);
        assert.deepEqual(errors[1], [true, 'bad_input', null]);
        // A name the server would refuse is refused on the device, in its words, before any request: `bad_input`.
        let asked = 0;
        const count = (r) => { if (/^\/v1\/(spaces|invitations)/.test(new URL(r.url()).pathname)) asked++; };
        bob.page.on('request', count);
        const names = await bob.run(async (club) => {
          const code = (p) => p.then(() => null, (e) => [e instanceof Error, e.code, e.message]);
          return [await code(db.accept('')), await code(db.createSpace('~mine')), await code(db.setMember(club, 'a\nb', 'viewer')),
            await code(db.leave('a b')), await code(db.members('')), await code(db.decline('x'.repeat(129)))];
        }, club);
        bob.page.off('request', count);
        for (const n of names) assert.deepEqual(n?.slice(0, 2), [true, 'bad_input'], JSON.stringify(n));
        assert.match(names[0][2], /^space: must be 1 to 128 characters/);
        assert.match(names[2][2], /^user: /);
        assert.equal(asked, 0, 'no request for a name refused on the device');
        const lastOwner = await alice.run((club) => db.leave(club).then(() => null, (e) => [e.code, e.refusal]), club);
        assert.deepEqual(lastOwner, ['refused', 'conflict'], 'the last owner stays');

        // He leaves: the club's rows go from his device.
        await bob.run((club) => db.leave(club), club);
        await until(() => bob.run(() => db.rows('sets')).then((r) => r.length === 0), 'the club gone from his device');
        assert.equal(await bob.run(() => db.spaces().length), 1);
        const members = await alice.run((club) => db.members(club), club);
        assert.deepEqual(members.members.map((m) => m.user), [alice.user]);

        // A declined invitation is gone.
        await alice.run(({ club, bob }) => db.setMember(club, bob, 'viewer'), { club, bob: bob.user });
        await bob.run((club) => db.decline(club), club);
        assert.deepEqual(await bob.run(() => db.invitations()), []);
      } finally {
        await alice.context.close();
        await bob.context.close();
      }
    });
  });
}
