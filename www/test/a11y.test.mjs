// The demo app (www/dist) as axe-core sees it, in every state a person meets:
// the first screen before the wasm, an empty diary, sets logged, offline with
// changes waiting, an edit the form refuses, a change the server refused, the
// sharing panel, a diary shared with a coach, a toast — in the light and the
// dark theme. Zero violations is the rule (deterministic: no timing here; the
// Lighthouse scores, which are timings, live in bench/pwa).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { startServer, launch, newUser, root } from './helpers.mjs';
import { acceptInvitation, addSet, backOnlineAndSynced, openDemo, rowOf, shareWith, typeEdit, waitAllSynced } from './demo-steps.mjs';

const dist = join(root, 'www', 'dist');
const built = existsSync(join(dist, 'index.html'));
if (!built && process.env.CI) throw new Error('CI: www/dist is not built (scripts/build-www.sh builds it)');
const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

/** Finite animations (a fresh row's highlight, a toast sliding in) have ended: colours are final. */
async function still(page) {
  await page.waitForFunction(() => document.getAnimations().every((a) => a.playState !== 'running' || a.effect?.getTiming().iterations === Infinity));
}

/** Every axe violation of the page as it stands, in `scheme`, as lines a person can act on. */
async function violations(page, scheme) {
  await page.emulateMedia({ colorScheme: scheme });
  await still(page);
  if (!(await page.evaluate(() => typeof window.axe === 'object'))) await page.addScriptTag({ content: axeSource });
  const found = await page.evaluate(async () => (await window.axe.run(document, { resultTypes: ['violations'] })).violations);
  return found.flatMap((v) => v.nodes.map((n) => `${v.id} (${v.impact}): ${n.target.join(' ')} — ${n.failureSummary?.split('\n').slice(1).join(' ').trim()}`));
}

/** Asserts no violation in either theme; `state` names what is on screen. */
async function clean(page, state) {
  for (const scheme of ['light', 'dark']) {
    const found = await violations(page, scheme);
    assert.deepEqual(found, [], `${state}, ${scheme} theme:\n${found.join('\n')}`);
  }
  await page.emulateMedia({ colorScheme: 'light' });
}

const toastGone = (page) => page.getByTestId('toast').waitFor({ state: 'detached', timeout: 10000 });

describe('the demo as axe-core sees it, every state, light and dark', { skip: !built && 'www/dist is not built' }, () => {
  let server;
  let browser;
  before(async () => {
    server = await startServer('sqlite', { staticDir: dist });
    browser = await launch();
  });
  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  test('the first screen, painted before any script, is already whole', async () => {
    const context = await browser.newContext({ javaScriptEnabled: false });
    const page = await context.newPage();
    await page.goto(`${server.url}/?user=${newUser('a11y-first')}`);
    assert.ok(await page.getByRole('heading', { name: 'Workout diary' }).isVisible(), 'the heading is in the HTML itself');
    assert.equal(await page.getByRole('main').count(), 1);
    // axe itself is a script: run it in a page that has scripts, on the same markup.
    const html = await page.content();
    await context.close();
    const live = await browser.newContext();
    const p = await live.newPage();
    await p.route('**/*', (route) => (route.request().resourceType() === 'document'
      ? route.fulfill({ contentType: 'text/html', body: html.replace(/<script[^>]*src=[^>]*><\/script>/g, '') })
      : route.continue()));
    await p.goto(`${server.url}/first-screen`);
    await clean(p, 'the first screen');
    await live.close();
  });

  test('a diary: empty, with sets and a toast, offline with changes waiting, an edit the form refuses', async () => {
    const { context, page } = await openDemo(browser, server, newUser('a11y-diary'));
    await clean(page, 'an empty diary');
    await addSet(page, 'Squat', '80', '5');
    await page.getByTestId('toast').waitFor();
    await clean(page, 'a set just logged, its toast shown');
    await addSet(page, 'Bench press', '62.5', '8');
    await waitAllSynced(page, 2);
    await toastGone(page);
    await clean(page, 'two sets, synced');

    await context.setOffline(true);
    await page.getByTestId('connection').getByText('Offline').waitFor();
    await addSet(page, 'Squat', '85', '5');
    await page.getByTestId('syncbar').getByText('1 change waiting').waitFor();
    await toastGone(page);
    await clean(page, 'offline, a change waiting');
    await backOnlineAndSynced(context, page, 3);
    await toastGone(page);

    const { li } = await typeEdit(rowOf(page, 'Squat', 0), { reps: '500' });
    await li.getByText('reps must be at most 100', { exact: true }).waitFor();
    await clean(page, 'an edit open, refused as it is typed');
    await context.close();
  });

  test('a change the server refused, shown with its reason', async () => {
    const context = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
    // This device never learns the server's schema, so only the server can refuse.
    await context.route((url) => url.pathname === '/v1/schema', (route) => route.abort());
    const page = await context.newPage();
    await page.goto(`${server.url}/?user=${newUser('a11y-refused')}`);
    await page.getByRole('heading', { name: 'Log a set' }).waitFor();
    // A refused new set never shows in the list: it is read in "Not saved".
    const form = page.locator('form.add');
    await form.locator('input[name=exercise]').fill('Squat');
    await form.locator('input[name=weightKg]').fill('80');
    await form.locator('input[name=reps]').fill('500');
    await form.getByRole('button', { name: 'Add set' }).click();
    await page.getByTestId('rejections').getByText('reps must be at most 100').waitFor({ timeout: 30000 });
    await toastGone(page);
    await clean(page, 'a refusal in the Not saved card');
    await context.close();
  });

  test('sharing: the panel with two people, and the diary as the coach sees it', async () => {
    const owner = newUser('a11y-owner');
    const coach = newUser('a11y-coach');
    const a = await openDemo(browser, server, owner);
    const b = await openDemo(browser, server, coach);
    await addSet(a.page, 'Deadlift', '120', '3');
    await shareWith(a.page, coach, 'viewer');
    await shareWith(a.page, newUser('a11y-friend'), 'editor');
    await toastGone(a.page);
    await clean(a.page, 'the sharing panel with an invitation out');
    await acceptInvitation(b.page, owner);
    const diary = b.page.getByTestId('shared-diary');
    await diary.getByText('view only').waitFor({ timeout: 30000 });
    await diary.locator('[data-testid=set-row]').first().waitFor({ timeout: 30000 });
    await toastGone(b.page);
    await clean(b.page, 'a shared diary, view only');
    await a.context.close();
    await b.context.close();
  });
});
