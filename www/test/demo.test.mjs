// The demo app (www/dist) in real Chromium against the real server: what the
// person sees when the server refuses an edit, and when the phone is offline.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { backends, startServer, launch, newUser, root } from './helpers.mjs';
import { acceptInvitation, addSet, backOnlineAndSynced, editSet, openDemo, rowOf, shareWith, typeEdit, waitAllSynced } from './demo-steps.mjs';

const dist = join(root, 'www', 'dist');
const built = existsSync(join(dist, 'index.html'));
if (!built && process.env.CI) throw new Error('CI: www/dist is not built (scripts/build-www.sh builds it)');
if (!built) console.log('# note: www/dist/index.html missing, demo tests skipped (build it: cd www && npx vite build --config demo/vite.config.js)');

for (const backend of built ? backends() : []) {
  describe(`demo app on ${backend}`, () => {
    let server;
    let browser;
    before(async () => {
      server = await startServer(backend, { staticDir: dist });
      browser = await launch();
    });
    after(async () => {
      await browser?.close();
      await server?.stop();
    });

    test('the form shows the server’s reason as the person types, and never offers to save what it would refuse', async () => {
      const user = newUser('demo-rejected');
      const { context, page } = await openDemo(browser, server, user);
      await addSet(page, 'Squat', '80', '5');
      await waitAllSynced(page, 1);
      // The first sync fetched the server's schema: the device now knows its rules.
      await page.waitForFunction(() => window.db?.schema() !== null);

      // Editing: the reason appears while typing, Save is not offered.
      const { id, li } = await typeEdit(rowOf(page, 'Squat', 0), { reps: '500' });
      await li.getByText('reps must be at most 100', { exact: true }).waitFor();
      assert.equal(await li.getByRole('button', { name: 'Save' }).isDisabled(), true);
      await li.locator('input[name=reps]').fill('6');
      assert.equal(await li.getByText('reps must be at most 100', { exact: true }).count(), 0);
      await li.getByRole('button', { name: 'Save' }).click();
      await page.locator(`[data-row-id="${id}"]:not(.editing)`).waitFor();
      await waitAllSynced(page, 1);

      // Logging: the same, in the form.
      const form = page.locator('form.add');
      await form.locator('input[name=exercise]').fill('Squat');
      await form.locator('input[name=weightKg]').fill('1200');
      await form.locator('input[name=reps]').fill('5');
      await form.getByText('weightKg must be at most 1000', { exact: true }).waitFor();
      assert.equal(await form.getByRole('button', { name: 'Add set' }).isDisabled(), true);

      // Nothing refused was recorded or sent: the server has the edit that was saved, only.
      assert.equal(await page.evaluate(() => window.db.pending().length), 0);
      assert.equal((await server.rows(user)).get(`sets/${id}`).fields.reps, 6);
      await context.close();
    });

    test('sharing: a coach sees the diary live, view only; made an editor he edits it; revoked, it leaves his phone', async () => {
      const owner = newUser('demo-owner');
      const coach = newUser('demo-coach');
      const a = await openDemo(browser, server, owner);
      const b = await openDemo(browser, server, coach);
      await addSet(a.page, 'Squat', '80', '5');
      await waitAllSynced(a.page, 1);
      await shareWith(a.page, coach, 'viewer');
      assert.equal(await b.page.evaluate(() => window.db.spaces().length), 1, 'invited only: nothing of hers yet');
      // The pending invitation is the server's: it is still listed after a reload.
      await a.page.reload();
      await a.page.locator(`[data-testid=invited][data-user="${coach}"]`).waitFor();
      await acceptInvitation(b.page, owner);

      const diary = b.page.getByTestId('shared-diary');
      await diary.getByText(`${owner}’s diary`).waitFor();
      await diary.getByText('view only').waitFor();
      await diary.locator('[data-testid=set-row]').first().waitFor();
      assert.equal(await diary.getByRole('button', { name: 'Edit set' }).count(), 0, 'a viewer is offered no edit');

      // Live: her next set shows on his phone without a tap.
      await addSet(a.page, 'Squat', '85', '5');
      await b.page.waitForFunction(() => document.querySelectorAll('[data-testid=shared-diary] [data-testid=set-row]').length === 2);

      // Made an editor: he edits her set, and it reaches her phone.
      await a.page.getByRole('combobox', { name: `Role of ${coach}` }).selectOption('editor');
      await diary.getByText('you can edit').waitFor();
      const row = diary.locator('[data-testid=set-row]').first();
      const id = await row.getAttribute('data-row-id');
      await row.getByRole('button', { name: 'Edit set' }).click();
      const li = diary.locator(`[data-row-id="${id}"]`);
      await li.locator('input[name=reps]').fill('7');
      await li.getByRole('button', { name: 'Save' }).click();
      await a.page.locator(`[data-row-id="${id}"] .figures`).getByText('7', { exact: true }).waitFor();
      assert.equal((await server.rows(owner)).get(`sets/${id}`).fields.reps, 7);

      // Revoked: her diary leaves his phone.
      await a.page.getByTestId('sharing').getByRole('button', { name: 'Revoke' }).click();
      await diary.waitFor({ state: 'detached' });
      assert.equal(await b.page.evaluate(() => window.db.rows('sets').length), 0);
      await a.context.close();
      await b.context.close();
    });

    test('sharing: a name typed while the server answers the last share is kept', async () => {
      const owner = newUser('demo-typing');
      const { context, page } = await openDemo(browser, server, owner);
      await addSet(page, 'Squat', '80', '5');
      await waitAllSynced(page, 1);
      const card = page.getByTestId('sharing');
      await card.waitFor();
      // The members list, read again after each share, answers only when let go.
      let letGo;
      const held = new Promise((resolve) => { letGo = resolve; });
      await page.route((url) => url.pathname === '/v1/spaces/members', async (route) => {
        if (route.request().method() === 'GET') await held;
        await route.continue();
      });
      await shareWith(page, newUser('demo-first'), 'viewer');
      const next = newUser('demo-next');
      await card.locator('input[name=user]').fill(next);
      const listed = page.waitForResponse((r) => new URL(r.url()).pathname === '/v1/spaces/members' && r.request().method() === 'GET');
      letGo();
      await listed;
      await page.waitForTimeout(500); // the list’s answer rendered
      assert.equal(await card.locator('input[name=user]').inputValue(), next, 'the next name, typed meanwhile, is still there');
      assert.equal(await card.getByRole('button', { name: 'Share' }).isEnabled(), true);
      await context.close();
    });

    test('an edit replaced by a concurrent one is said in words; Keep mine puts it back, OK accepts', async () => {
      const user = newUser('demo-conflict');
      const phone = await openDemo(browser, server, user);
      await addSet(phone.page, 'Squat', '80', '5');
      await waitAllSynced(phone.page, 1);
      const tablet = await openDemo(browser, server, user);
      await waitAllSynced(tablet.page, 1);
      const reps = (page, id) => page.evaluate((id) => window.db.row('sets', id)?.reps, id);

      // In the metro: the phone sets 6; a minute later the tablet sets 7 and syncs.
      await phone.context.setOffline(true);
      await phone.page.getByTestId('connection').getByText('Offline').waitFor();
      const id = await editSet(rowOf(phone.page, 'Squat', 0), { reps: '6' });
      await editSet(rowOf(tablet.page, 'Squat', 0), { reps: '7' });
      await waitAllSynced(tablet.page, 1);
      await backOnlineAndSynced(phone.context, phone.page, 1);

      const panel = phone.page.getByTestId('conflicts');
      await panel.getByText(/^Squat: your 6 reps were replaced by 7 from your other device [0-9a-f]{8} \(\d\d.\d\d( [AP]M)?\)$/).waitFor();
      assert.equal(await reps(phone.page, id), 7, 'the later edit stands until the person chooses');
      await panel.getByRole('button', { name: 'Keep mine' }).click();
      await panel.waitFor({ state: 'detached' });
      await waitAllSynced(phone.page, 1);
      await tablet.page.waitForFunction((id) => window.db.row('sets', id)?.reps === 6, id);
      assert.equal(await tablet.page.getByTestId('conflicts').count(), 0, 'a deliberate change after seeing 7 is no conflict');

      // The other way: the tablet's 8 is replaced by the phone's 9, and the tablet accepts it.
      await tablet.context.setOffline(true);
      await tablet.page.getByTestId('connection').getByText('Offline').waitFor();
      await editSet(rowOf(tablet.page, 'Squat', 0), { reps: '8' });
      await editSet(rowOf(phone.page, 'Squat', 0), { reps: '9' });
      await waitAllSynced(phone.page, 1);
      await backOnlineAndSynced(tablet.context, tablet.page, 1);
      const other = tablet.page.getByTestId('conflicts');
      await other.getByText(/your 8 reps were replaced by 9/).waitFor();
      await other.getByRole('button', { name: 'OK' }).click();
      await other.waitFor({ state: 'detached' });
      await tablet.page.reload();
      await tablet.page.getByRole('heading', { name: 'Log a set' }).waitFor();
      assert.equal(await tablet.page.getByTestId('conflicts').count(), 0, 'dismissed for good');
      assert.equal(await reps(tablet.page, id), 9);
      await phone.context.close();
      await tablet.context.close();
    });

    test('offline: the badge says so, new sets wait, and the app opens again without a network', async () => {
      const user = newUser('demo-offline');
      const { context, page } = await openDemo(browser, server, user);
      await page.getByTestId('connection').getByText('Online').waitFor();
      // The app shell is cached once the service worker is active.
      await page.evaluate(() => navigator.serviceWorker.ready);

      await context.setOffline(true);
      await page.getByTestId('connection').getByText('Offline').waitFor();
      await addSet(page, 'Deadlift', '120', '3');
      const row = rowOf(page, 'Deadlift', 0);
      assert.notEqual(await row.getAttribute('data-phase'), 'synced');
      await page.getByTestId('syncbar').getByText('1 change waiting').waitFor();

      const shell = await page.reload();
      assert.ok(shell.fromServiceWorker(), 'the page came from the service worker’s cache');
      await page.getByRole('heading', { name: 'Log a set' }).waitFor();
      await page.getByTestId('connection').getByText('Offline').waitFor();
      await rowOf(page, 'Deadlift', 0).waitFor();

      await context.setOffline(false);
      await page.getByTestId('connection').getByText('Online').waitFor();
      await page.getByRole('button', { name: 'Sync now' }).click();
      await waitAllSynced(page, 1);
      await page.getByTestId('syncbar').getByText('All changes synced').waitFor();
      assert.equal((await server.rows(user)).size, 1);
      await context.close();
    });
  });
}
