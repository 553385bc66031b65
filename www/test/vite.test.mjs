// Shipping the worker with Vite (`marksync/vite`): a newcomer's app
// (test/vite-app) built by `vite build` has its worker at the root, the real
// server serves the build, and in Chromium the worker takes control and holds
// the queue; `vite dev` answers /service-worker.js with the worker module,
// which Chromium registers and which takes control of the page.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, existsSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { build, createServer } from 'vite';
import { root, startServer, launch, newUser, until } from './helpers.mjs';

const config = join(root, 'www', 'test', 'vite-app', 'vite.config.js');

describe('the worker shipped by marksync/vite', () => {
  let out;
  before(() => {
    out = mkdtempSync(join(tmpdir(), 'marksync-vite-'));
  });
  after(() => rmSync(out, { recursive: true, force: true }));

  test('vite build: the worker at the root holds the queue of the built app', async () => {
    process.env.MARKSYNC_VITE_OUT = out;
    try {
      await build({ configFile: config });
    } finally {
      delete process.env.MARKSYNC_VITE_OUT;
    }
    assert.ok(existsSync(join(out, 'service-worker.js')), 'the worker is emitted at the root of the scope');
    const server = await startServer('sqlite', { staticDir: out });
    const browser = await launch();
    try {
      const context = await browser.newContext();
      const page = await context.newPage();
      page.on('pageerror', (e) => console.log('# pageerror', e.message));
      const user = newUser('vite');
      await page.goto(`${server.url}/?user=${user}`);
      await page.evaluate(() => window.started);
      await until(() => page.evaluate(() => !!navigator.serviceWorker.controller), 'the worker to take control');
      const via = await page.evaluate(async () => {
        await db.change('sets', 'v1', { exercise: 'squat', weightKg: 60, reps: 5 });
        return (await db.requestSync()).via;
      });
      assert.ok(['background-sync', 'worker'].includes(via), `the worker holds the queue (via ${via})`);
      await until(async () => (await server.rows(user)).size === 1, 'the worker to push the edit');
      await context.close();
    } finally {
      await browser.close();
      await server.stop();
    }
  });

  test('vite dev: /service-worker.js is the worker module, and Chromium registers it', async () => {
    const dev = await createServer({ configFile: config, server: { port: 0, host: '127.0.0.1' } });
    await dev.listen();
    try {
      const { port } = dev.httpServer.address();
      const r = await fetch(`http://127.0.0.1:${port}/service-worker.js`);
      assert.equal(r.status, 200);
      assert.match(r.headers.get('content-type') ?? '', /javascript/);
      const text = await r.text();
      assert.match(text, /installSyncWorker/);
      assert.match(readFileSync(join(root, 'www', 'test', 'vite-app', 'service-worker.js'), 'utf8'), /installSyncWorker/);

      // The app's own registration (main.js), under the dev server: the
      // worker installs, activates and controls the page.
      const browser = await launch();
      try {
        const page = await browser.newPage();
        page.on('pageerror', (e) => console.log('# pageerror', e.message));
        await page.goto(`http://127.0.0.1:${port}/?user=${newUser('vite-dev')}`);
        const script = await page.evaluate(async () => (await navigator.serviceWorker.ready).active?.scriptURL);
        assert.equal(new URL(script).pathname, '/service-worker.js');
        await until(() => page.evaluate(() => !!navigator.serviceWorker.controller), 'the dev worker to take control');
      } finally {
        await browser.close();
      }
    } finally {
      await dev.close();
    }
  });

  test("vite dev under a base: the worker is served where the build deploys it (base + its file name)", async () => {
    // Failed: `/app/sync-worker.js` answered the index page, and only `/sync-worker.js`, outside the app, the worker.
    // (Served as `sync-worker.js`: the app's worker module is itself `service-worker.js`, a file Vite serves anyway.)
    Object.assign(process.env, { MARKSYNC_VITE_BASE: '/app/', MARKSYNC_VITE_SW: 'sync-worker.js' });
    const dev = await createServer({ configFile: config, server: { port: 0, host: '127.0.0.1' } }).finally(() => {
      delete process.env.MARKSYNC_VITE_BASE;
      delete process.env.MARKSYNC_VITE_SW;
    });
    await dev.listen();
    try {
      const { port } = dev.httpServer.address();
      const r = await fetch(`http://127.0.0.1:${port}/app/sync-worker.js`);
      assert.equal(r.status, 200);
      assert.match(r.headers.get('content-type') ?? '', /javascript/);
      assert.match(await r.text(), /installSyncWorker/);
    } finally {
      await dev.close();
    }
  });
});
