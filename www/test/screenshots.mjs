// Drives the demo app (www/dist) in headless Chromium at a phone viewport and
// writes docs/screenshots/{normal,offline,rejected,sharing,shared,conflict}.png, then
// the inspector (marksync/devtools) over the test harness: inspector.png.
//
//   (cd www && npx vite build --config demo/vite.config.js)   # or scripts/build-www.sh
//   node www/test/screenshots.mjs
//
// Starts its own marksync-server (SQLite, dev auth) on a free port; set
// MARKSYNC_SERVER_BIN to use a server binary other than target/debug's.
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { root, startServer, launch } from './helpers.mjs';
import { acceptInvitation, addSet, backOnlineAndSynced, editSet, openDemo, rowOf, shareWith, typeEdit, waitAllSynced } from './demo-steps.mjs';

const dist = join(root, 'www', 'dist');
const out = join(root, 'docs', 'screenshots');
if (!existsSync(join(dist, 'index.html'))) {
  console.error('www/dist is not built: run (cd www && npx vite build --config demo/vite.config.js) first');
  process.exit(1);
}
mkdirSync(out, { recursive: true });

/** No toast, no focus ring, scrolled to the top: the screen a person looks at. */
async function settle(page) {
  await page.getByTestId('toast').waitFor({ state: 'detached', timeout: 10000 });
  await page.evaluate(() => { document.activeElement?.blur(); window.scrollTo(0, 0); });
  await page.mouse.move(0, 0);
  // Finite animations (a fresh row's highlight) have ended; the "sending" pulse is infinite.
  await page.waitForFunction(() => document.getAnimations().every((a) => a.effect?.getTiming().iterations === Infinity));
}

const server = await startServer('sqlite', { staticDir: dist });
const browser = await launch();
try {
  const { context, page } = await openDemo(browser, server, 'sam');

  // A morning's training, all synced.
  await addSet(page, 'Squat', '80', '5');
  await addSet(page, 'Squat', '85', '5');
  await addSet(page, 'Squat', '87.5', '4');
  await addSet(page, 'Bench press', '60', '8');
  await addSet(page, 'Bench press', '62,5', '6');
  await addSet(page, 'Deadlift', '120', '3');
  await editSet(rowOf(page, 'Squat', 2), { reps: '5' }); // 87.5 × 4 → 87.5 × 5
  // Delete, then undo from the snackbar.
  await rowOf(page, 'Deadlift', 0).getByRole('button', { name: 'Delete set' }).click();
  await page.getByTestId('toast').getByRole('button', { name: 'Undo' }).click();
  await waitAllSynced(page, 6);
  await settle(page);
  await page.screenshot({ path: join(out, 'normal.png') });
  console.log('normal.png');

  // Offline: a new set waits on the phone.
  await context.setOffline(true);
  await page.getByTestId('connection').getByText('Offline').waitFor();
  await addSet(page, 'Bench press', '62.5', '5');
  await addSet(page, 'Bench press', '57.5', '8');
  await page.locator('[data-testid=set-row]:not([data-phase=synced])').first().waitFor();
  await page.getByTestId('syncbar').getByText('2 changes waiting').waitFor();
  await settle(page);
  await page.screenshot({ path: join(out, 'offline.png') });
  console.log('offline.png');

  // Back online, then an edit the server refuses.
  await backOnlineAndSynced(context, page, 8);
  await settle(page);
  // An edit the server would refuse: the form says why as it is typed, in
  // the server's words (the device has its schema), and offers no Save.
  const { li } = await typeEdit(rowOf(page, 'Bench press', 1), { reps: '500' });
  await li.getByText('reps must be at most 100', { exact: true }).waitFor();
  await page.getByTestId('toast').waitFor({ state: 'detached', timeout: 10000 });
  await li.evaluate((el) => window.scrollTo(0, el.getBoundingClientRect().top + window.scrollY - 120));
  await page.screenshot({ path: join(out, 'rejected.png') });
  console.log('rejected.png');
  await li.getByRole('button', { name: 'Cancel' }).click();

  // Sharing: Sam shares the diary with a coach (view only) and a friend (can edit).
  await shareWith(page, 'coach', 'viewer');
  await shareWith(page, 'kim', 'editor');
  await settle(page);
  await page.getByTestId('sharing').evaluate((el) => window.scrollTo(0, el.getBoundingClientRect().bottom + window.scrollY - window.innerHeight + 24));
  await page.screenshot({ path: join(out, 'sharing.png') });
  console.log('sharing.png');

  // The coach's phone: Sam's diary, live and view only, below the coach's own (empty) list.
  const coach = await openDemo(browser, server, 'coach');
  await acceptInvitation(coach.page, 'sam');
  const diary = coach.page.getByTestId('shared-diary');
  await diary.getByText('view only').waitFor();
  await diary.locator('[data-testid=set-row]').nth(7).waitFor();
  await settle(coach.page);
  await diary.evaluate((el) => window.scrollTo(0, el.getBoundingClientRect().top + window.scrollY - 80));
  await coach.page.screenshot({ path: join(out, 'shared.png') });
  console.log('shared.png');
  await coach.context.close();

  // A conflict: Sam's phone, offline, sets 6 reps; the tablet sets 7 and syncs first.
  const tablet = await openDemo(browser, server, 'sam');
  await waitAllSynced(tablet.page, 8);
  await context.setOffline(true);
  await page.getByTestId('connection').getByText('Offline').waitFor();
  await editSet(rowOf(page, 'Squat', 0), { reps: '6' });
  await editSet(rowOf(tablet.page, 'Squat', 0), { reps: '7' });
  await waitAllSynced(tablet.page, 8);
  await tablet.context.close();
  await backOnlineAndSynced(context, page, 8);
  const conflicts = page.getByTestId('conflicts');
  await conflicts.getByText(/your 6 reps were replaced by 7/).waitFor();
  await settle(page);
  await conflicts.evaluate((el) => window.scrollTo(0, el.getBoundingClientRect().top + window.scrollY - 80));
  await page.screenshot({ path: join(out, 'conflict.png') });
  console.log('conflict.png');
  await context.close();

  // The inspector, on a desktop page over the test harness: a few synced
  // edits, one refused by the server, two waiting.
  const harness = await startServer('sqlite');
  try {
    const desk = await browser.newContext({ viewport: { width: 1100, height: 900 } });
    const p = await desk.newPage();
    await p.goto(`${harness.url}/test/harness.html`);
    await p.evaluate(() => window.ready);
    await p.evaluate(async () => {
      window.db = await window.Marksync.open({ endpoint: location.origin, token: 'dev:sam', name: 'inspect', autoSync: false });
      const { mountInspector } = await import('/devtools.js');
      const box = document.createElement('div');
      document.body.append(box);
      mountInspector(window.db, box);
      for (const [exercise, weightKg, reps] of [['Squat', 80, 5], ['Squat', 85, 5], ['Bench press', 60, 8]]) {
        await db.change('sets', db.newRowId(), { exercise, weightKg, reps });
      }
      const id = db.newRowId();
      await db.change('sets', id, { exercise: 'Deadlift', weightKg: 120, reps: 3 });
      await db.change('sets', id, { reps: 500 }, { check: false });
      await db.sync();
      await db.change('sets', db.newRowId(), { exercise: 'Bench press', weightKg: 62.5, reps: 6 });
      await db.change('sets', db.newRowId(), { exercise: 'Row', weightKg: 50, reps: 10 });
    });
    await p.locator('[data-section="Rejections"]').getByText('reps must be at most 100').waitFor();
    await p.locator('[data-section="Outbox"]').getByText('Outbox (2)').waitFor();
    await p.screenshot({ path: join(out, 'inspector.png'), fullPage: true });
    console.log('inspector.png');
    await desk.close();
  } finally {
    await harness.stop();
  }
} finally {
  await browser.close();
  await server.stop();
}
