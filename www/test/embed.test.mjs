// The npm package syncing through an app that embeds marksync at /sync
// (server/examples/embed.rs): the app's own sign-in gives the session the
// device sends as its token; the page is served from another origin (CORS).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer, launch, device, newUser, freePort, until, root } from './helpers.mjs';

/** Starts the example app; resolves when its /sync/readyz answers. */
async function startApp() {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'marksync-embed-'));
  const bin = join(root, 'target', 'debug', 'examples', 'embed');
  let log = '';
  const proc = spawn(bin, [], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, PORT: String(port), DATABASE: `sqlite://${join(dir, 'app.db')}`, RUST_LOG: 'warn' },
  });
  proc.stdout.on('data', (d) => { log += d; });
  proc.stderr.on('data', (d) => { log += d; });
  const url = `http://127.0.0.1:${port}`;
  await until(async () => {
    if (proc.exitCode !== null) throw new Error(`the app exited: ${log}`);
    try { return (await fetch(`${url}/sync/readyz`)).ok; } catch { return false; }
  }, 'the app to start');
  return {
    url,
    async login(user) {
      const r = await fetch(`${url}/login?user=${encodeURIComponent(user)}`, { method: 'POST' });
      assert.equal(r.status, 200);
      return r.text();
    },
    async stop() {
      if (proc.exitCode === null) {
        proc.kill('SIGINT');
        await new Promise((r) => proc.once('exit', r));
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

describe('marksync inside an app\'s own server', () => {
  let pages;
  let app;
  let browser;
  before(async () => {
    pages = await startServer('sqlite');
    app = await startApp();
    browser = await launch();
  });
  after(async () => {
    await browser?.close();
    await app?.stop();
    await pages?.stop();
  });

  async function open(session, name) {
    const d = await device(browser, pages);
    await d.page.evaluate(async ({ endpoint, session, name }) => {
      window.db = await window.Marksync.open({ endpoint, token: session, name, autoSync: false });
    }, { endpoint: `${app.url}/sync`, session, name });
    return { ...d, run: (fn, arg) => d.page.evaluate(fn, arg) };
  }

  test('an edit goes through the app\'s /sync with its session, once, and reaches another device', async () => {
    const user = newUser('embed');
    const session = await app.login(user);
    const a = await open(session, 'embed-a');
    const id = await a.run(async () => {
      const id = db.newRowId();
      await db.change('sets', id, { exercise: 'squat', weightKg: 80, reps: 5 });
      await db.sync();
      await db.sync();
      return id;
    });
    assert.equal(await a.run((id) => db.status('sets', id).phase, id), 'synced');
    const page = await (await fetch(`${app.url}/sync/v1/pull`, { headers: { authorization: `Bearer ${session}` } })).json();
    assert.equal(page.changes.length, 1, 'one row on the server');
    assert.equal(page.changes[0].fields.reps, 5);

    const b = await open(await app.login(user), 'embed-b');
    const row = await b.run(async (id) => { await db.sync(); return db.row('sets', id); }, id);
    assert.equal(row.reps, 5);
    await a.context.close();
    await b.context.close();
  });

  test('a session the app does not know is refused in the app\'s words', async () => {
    const d = await open('no-such-session', 'embed-c');
    const report = await d.run(async () => {
      await db.change('sets', db.newRowId(), { exercise: 'row', weightKg: 40, reps: 8 });
      const refused = await db.sync().then(() => null, (e) => ({ code: e.code, message: e.message }));
      return { refused, recovery: db.metrics().recovery, pending: db.metrics().pendingOps };
    });
    assert.equal(report.refused?.code, 'recovery_required', JSON.stringify(report));
    assert.match(report.refused.message, /this session has ended: sign in again/, 'the app\'s own words');
    assert.equal(report.recovery, 'unauthorized');
    assert.equal(report.pending, 1, 'the edit stays queued for when the person signs in');
    await d.context.close();
  });
});
