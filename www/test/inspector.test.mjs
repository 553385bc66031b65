// marksync/devtools in Chromium against the real server: the inspector shows
// the outbox, the cycles (attemptKeys, verdicts, who ran them — a cycle the
// Service Worker ran, seen from a page), conflicts and spaces, live; its
// buttons sync; Export diagnostics saves one JSON file with no token in it.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { backends, serverAndBrowser, device, newUser, until, workerDevice } from './helpers.mjs';

for (const backend of backends()) {
  describe(`the inspector on ${backend}`, () => {
    const env = serverAndBrowser(backend);

    const section = (page, name) => page.locator(`[data-marksync-inspector] [data-section="${name}"]`);

    test('outbox, cycles, buttons and Export diagnostics, live, in a page', async () => {
      const user = newUser('inspect');
      const { context, page } = await device(env.browser, env.server);
      await page.evaluate(async (user) => {
        window.db = await window.Marksync.open({ endpoint: location.origin, token: `dev:${user}`, name: 'inspect', autoSync: false });
        const { mountInspector } = await import('/devtools.js');
        const box = document.createElement('div');
        document.body.append(box);
        window.inspector = mountInspector(window.db, box);
      }, user);
      const opId = await page.evaluate(() => db.change('sets', 'r1', { exercise: 'squat', weightKg: 80, reps: 5 }));
      await section(page, 'Outbox').getByText(opId, { exact: true }).waitFor();
      await section(page, 'Outbox').getByText('pending', { exact: true }).waitFor();

      // The inspector's own Sync button runs a cycle; it shows with its attemptKey and verdict.
      await page.locator('[data-marksync-inspector] button', { hasText: 'Sync' }).first().click();
      await section(page, 'Outbox').getByText('none').waitFor();
      const cycles = section(page, 'Cycles');
      await cycles.getByText(`${opId} applied`, { exact: false }).waitFor();
      const d = await page.evaluate(() => db.diagnostics());
      const last = d.cycles.at(-1);
      assert.equal(last.by, 'tab');
      assert.equal(last.outcome, 'done');
      assert.equal(last.applied, 1);
      assert.match(last.attempts[0], new RegExp(`^${d.deviceId}:a\\d+$`));
      await cycles.getByText(last.attempts[0]).waitFor();
      assert.deepEqual(d.spaces.map((s) => [s.space, s.personal, s.role, s.cursor]), [[`~${user}`, true, 'owner', 1]]);
      await section(page, 'Spaces').getByText(`~${user}`).waitFor();

      // Export diagnostics: one JSON file, never the token.
      const [download] = await Promise.all([
        page.waitForEvent('download'),
        page.locator('[data-marksync-inspector] button', { hasText: 'Export diagnostics' }).click(),
      ]);
      const text = readFileSync(await download.path(), 'utf8');
      const saved = JSON.parse(text);
      assert.equal(saved.kind, 'marksync-diagnostics');
      assert.equal(saved.deviceId, d.deviceId);
      assert.equal(saved.cycles.at(-1).attempts[0], last.attempts[0]);
      assert.equal(typeof saved.metrics.applied, 'number');
      assert.ok(!text.includes(`dev:${user}`), 'no token in the file');

      // The element form, on the same database.
      await page.evaluate(() => {
        const el = document.createElement('marksync-inspector');
        el.id = 'el';
        document.body.append(el);
        el.db = window.db;
      });
      await page.locator('#el [data-section="Cycles"]').waitFor();
      await context.close();
    });

    test('a cycle the Service Worker ran shows in the page, by the worker', async () => {
      const user = newUser('inspect-sw');
      // The test worker serves the database `e2e-sw`.
      const d = await workerDevice(env.browser, env.server, 'e2e-sw', user, { autoSync: false });
      const [page] = d.pages;
      await page.evaluate(async () => {
        const { mountInspector } = await import('/devtools.js');
        const box = document.createElement('div');
        document.body.append(box);
        mountInspector(window.db, box);
        await db.change('sets', 'w1', { exercise: 'lunge', weightKg: 20, reps: 10 });
      });
      await d.dispatchSync();
      await until(async () => (await env.server.rows(user)).size === 1, 'the worker to push');
      await until(() => page.evaluate(() => db.diagnostics().cycles.some((c) => c.by === 'worker' && c.applied === 1)), 'the worker’s cycle in the page');
      await section(page, 'Cycles').getByText('worker', { exact: true }).waitFor();
      await d.context.close();
    });
  });
}
