// What a person does in the demo app (www/dist), as Playwright steps; shared
// by demo.test.mjs and screenshots.mjs.

/** A phone-sized page of the demo in a fresh context (a fresh device), opened as `user`. */
export async function openDemo(browser, server, user) {
  const context = await browser.newContext({
    viewport: { width: 390, height: 844 },
    deviceScaleFactor: 2,
    isMobile: true,
    hasTouch: true,
  });
  const page = await context.newPage();
  page.on('pageerror', (e) => console.log('# pageerror', e.message));
  page.on('console', (m) => { if (m.type() === 'error') console.log('# console.error', m.text()); });
  await page.goto(`${server.url}/?user=${encodeURIComponent(user)}`);
  await page.getByRole('heading', { name: 'Log a set' }).waitFor();
  return { context, page };
}

const rows = (page) => page.locator('[data-testid=set-row]');

/** Logs a set with the form and waits for its row. */
export async function addSet(page, exercise, weight, reps) {
  const before = await rows(page).count();
  const form = page.locator('form.add');
  await form.locator('input[name=exercise]').fill(exercise);
  await form.locator('input[name=weightKg]').fill(weight);
  await form.locator('input[name=reps]').fill(reps);
  await form.getByRole('button', { name: 'Add set' }).click();
  await page.waitForFunction((n) => document.querySelectorAll('[data-testid=set-row]').length === n, before + 1);
}

/** The `index`-th set of an exercise's group. */
export const rowOf = (page, exercise, index) =>
  page.locator(`.group[data-exercise="${exercise}"] [data-testid=set-row]`).nth(index);

/**
 * Opens a row's inline edit and types `fields` (input name → text: exercise,
 * weightKg, reps) without saving. Returns the row's id and its locator (which
 * stays valid while the row turns into its edit form and back).
 */
export async function typeEdit(row, fields) {
  const id = await row.getAttribute('data-row-id');
  const li = row.page().locator(`[data-row-id="${id}"]`);
  await li.getByRole('button', { name: 'Edit set' }).click();
  for (const [name, text] of Object.entries(fields)) await li.locator(`input[name=${name}]`).fill(text);
  return { id, li };
}

/** Edits a row inline and saves: `fields` as for `typeEdit`. */
export async function editSet(row, fields) {
  const page = row.page();
  const { id, li } = await typeEdit(row, fields);
  await li.getByRole('button', { name: 'Save' }).click();
  await page.locator(`[data-row-id="${id}"]:not(.editing)`).waitFor();
  return id;
}

/** Waits until `n` rows show and every one is synced. */
export async function waitAllSynced(page, n) {
  await page.waitForFunction((n) => {
    const all = [...document.querySelectorAll('[data-testid=set-row]')];
    return all.length === n && all.every((r) => r.dataset.phase === 'synced');
  }, n, { timeout: 30000 });
}

/** Takes the phone back online, syncs with "Sync now" and waits until `n` rows show, all synced. */
export async function backOnlineAndSynced(context, page, n) {
  await context.setOffline(false);
  await page.getByTestId('connection').getByText('Online').waitFor();
  await page.getByRole('button', { name: 'Sync now' }).click();
  await waitAllSynced(page, n);
}

/** Shares the person's diary with `user` as `role` (`viewer` or `editor`): an invitation, waited for in the list. */
export async function shareWith(page, user, role) {
  const card = page.getByTestId('sharing');
  await card.locator('input[name=user]').fill(user);
  await card.locator('select[name=role]').selectOption(role);
  await card.getByRole('button', { name: 'Share' }).click();
  await card.locator(`[data-user="${user}"]`).first().waitFor();
}

/** Accepts the invitation to `owner`'s diary, once it shows. */
export async function acceptInvitation(page, owner) {
  const invitation = page.locator(`[data-testid=invitation][data-space="~${owner}"]`);
  await invitation.waitFor({ timeout: 30000 });
  await invitation.getByRole('button', { name: 'Accept' }).click();
}
