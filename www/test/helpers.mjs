// Test helpers: a real marksync-server (SQLite or PostgreSQL) and Debian's
// Chromium driven by playwright-core. Nothing is mocked.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createServer } from 'node:net';
import { before, after } from 'node:test';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
export const root = join(here, '..', '..');

/** The backends to run against: SQLite always; PostgreSQL when a URL is given (required in CI). */
export function backends() {
  const pg = process.env.MARKSYNC_TEST_POSTGRES_URL;
  if (!pg && process.env.CI) throw new Error('CI: MARKSYNC_TEST_POSTGRES_URL must be set');
  if (!pg) console.log('# note: MARKSYNC_TEST_POSTGRES_URL unset, PostgreSQL variants skipped');
  return pg ? ['sqlite', 'postgres'] : ['sqlite'];
}

/** A free TCP port on the loopback. */
export async function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

/** Starts marksync-server; resolves when /healthz answers. */
export async function startServer(backend, { staticDir = join(root, 'www'), extra = [] } = {}) {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'marksync-e2e-'));
  const database = backend === 'postgres' ? process.env.MARKSYNC_TEST_POSTGRES_URL : `sqlite://${join(dir, 'e2e.db')}`;
  const bin = process.env.MARKSYNC_SERVER_BIN || join(root, 'target', 'debug', 'marksync-server');
  let args = ['--listen', `127.0.0.1:${port}`, '--database', database, '--static', staticDir,
    '--dev-auth', '--enable-faults', '--rate-limit', '0', ...extra];
  let proc;
  let log = '';
  const url = `http://127.0.0.1:${port}`;
  const boot = async () => {
    proc = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, RUST_LOG: 'warn' } });
    proc.stdout.on('data', (d) => { log += d; });
    proc.stderr.on('data', (d) => { log += d; });
    for (let i = 0; ; i++) {
      if (proc.exitCode !== null) throw new Error(`server exited: ${log}`);
      try {
        const r = await fetch(`${url}/healthz`);
        if (r.ok) break;
      } catch { /* not yet */ }
      if (i > 300) throw new Error(`server did not start: ${log}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  await boot();
  return {
    url,
    dir,
    get proc() { return proc; },
    log: () => log,
    /** Kills the server at once (SIGKILL): no graceful shutdown. */
    async kill() {
      if (proc.exitCode === null) {
        proc.kill('SIGKILL');
        await new Promise((r) => proc.once('exit', r));
      }
    },
    /** Starts it again on the same port and database (with other `extra` flags, if given). */
    async restart(newExtra) {
      if (newExtra) {
        args = ['--listen', `127.0.0.1:${port}`, '--database', database, '--static', staticDir,
          '--dev-auth', '--enable-faults', '--rate-limit', '0', ...newExtra];
      }
      await boot();
    },
    async stop() {
      if (proc.exitCode === null) {
        proc.kill('SIGTERM');
        await new Promise((r) => proc.once('exit', r));
      }
      rmSync(dir, { recursive: true, force: true });
    },
    async faults(f) {
      const r = await fetch(`${url}/__faults`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(f) });
      if (!r.ok) throw new Error(`faults: ${r.status} ${await r.text()}`);
    },
    /** Every row of a user, pulled over HTTP (as another device would). */
    async rows(user) {
      const out = new Map();
      let cursor = 0;
      for (;;) {
        const r = await fetch(`${url}/v1/pull?cursor=${cursor}&limit=1000`, { headers: { authorization: `Bearer dev:${user}` } });
        const page = await r.json();
        for (const c of page.changes) out.set(`${c.table}/${c.rowId}`, c);
        cursor = page.cursor;
        if (!page.hasMore) return out;
      }
    },
    async metrics() {
      return (await fetch(`${url}/metrics`)).text();
    },
  };
}

export const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'];

export async function launch() {
  return chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true, args: CHROMIUM_ARGS });
}

/** A page of the harness in a fresh context (a fresh device: its own IndexedDB). */
export async function device(browser, server) {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.on('pageerror', (e) => console.log('# pageerror', e.message));
  await page.goto(`${server.url}/test/harness.html`);
  await page.waitForFunction(() => window.ready);
  await page.evaluate(() => window.ready);
  return { context, page };
}

/**
 * A suite's server (on `backend`) and Chromium, started before its tests and
 * closed after them: read them as `env.server` and `env.browser`.
 */
export function serverAndBrowser(backend, options) {
  const env = {};
  before(async () => {
    env.server = await startServer(backend, options);
    env.browser = await launch();
  });
  after(async () => {
    await env.browser?.close();
    await env.server?.stop();
  });
  return env;
}

let users = 0;
/** A user id no other test uses (the Postgres database is shared). */
export function newUser(tag) {
  users += 1;
  return `${tag}-${process.pid}-${Date.now()}-${users}`;
}

/** Polls `fn` until it returns something truthy (or fails after `ms`). */
export async function until(fn, what, ms = 15000) {
  const t0 = Date.now();
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * A device whose Service Worker holds the queue: a context with the test
 * worker installed (`test/test-sw.js`, database `name`) and a page with `db`
 * open as `user`; `dispatchSync()` fires a Background Sync over CDP.
 */
export async function workerDevice(browser, server, name, user, { autoSync = true } = {}) {
  const context = await browser.newContext();
  const cdp = await context.newCDPSession(await context.newPage());
  await cdp.send('ServiceWorker.enable');
  let registrationId = null;
  cdp.on('ServiceWorker.workerRegistrationUpdated', ({ registrations }) => {
    for (const r of registrations) if (r.scopeURL.endsWith('/test/') && !r.isDeleted) registrationId = r.registrationId;
  });
  const pages = [];
  const addPage = async () => {
    const page = await context.newPage();
    page.on('pageerror', (e) => console.log('# pageerror', e.message));
    await page.goto(`${server.url}/test/sw-harness.html`);
    await page.evaluate(() => window.ready);
    await page.evaluate(async ({ user, autoSync, name }) => {
      window.db = await window.Marksync.open({ endpoint: location.origin, token: `dev:${user}`, name, autoSync });
    }, { user, autoSync, name });
    pages.push(page);
    return page;
  };
  await addPage();
  await until(() => registrationId, 'the worker registration');
  const tag = `marksync:${name}`;
  return {
    context,
    pages,
    addPage,
    cdp,
    dispatchSync: () => cdp.send('ServiceWorker.dispatchSyncEvent', { origin: server.url, registrationId, tag, lastChance: false }),
  };
}
