// A small W3C WebDriver client (sessions, navigation, async scripts, timeouts)
// for the cross-browser suite. Hand-written rather than webdriverio or
// selenium-webdriver: the suite needs five endpoints of the standard, and
// those packages bring tens of dependencies and download managers for
// drivers that this project installs itself (geckodriver from crates.io,
// chromedriver and the browsers from Debian).
import { spawn } from 'node:child_process';
import { freePort } from './helpers.mjs';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Debian's MiniBrowser, for this machine's architecture (set MINIBROWSER elsewhere). */
function miniBrowser() {
  const dirs = ['x86_64-linux-gnu', 'aarch64-linux-gnu'].map((a) => `/usr/lib/${a}/webkit2gtk-4.1/MiniBrowser`);
  return dirs.find((p) => existsSync(p)) ?? dirs[0];
}

/** The engines the suite drives, each with its driver and the capabilities of a fresh, headless profile. */
export const ENGINES = {
  firefox: {
    driver: 'geckodriver',
    args: (port) => ['--port', String(port), '--host', '127.0.0.1'],
    capabilities: () => ({
      browserName: 'firefox',
      'moz:firefoxOptions': {
        binary: process.env.FIREFOX || '/usr/bin/firefox-esr',
        args: ['-headless'],
        // No network of its own: updates, telemetry and the like stay off.
        prefs: { 'app.update.enabled': false, 'datareporting.policy.dataSubmissionEnabled': false, 'network.captive-portal-service.enabled': false },
      },
    }),
  },
  // WebKitGTK, the engine of Safari, as Debian ships it: WebKitWebDriver
  // starts MiniBrowser in automation mode. MiniBrowser has no headless mode,
  // so the driver gets a virtual X display of its own (Xvfb).
  webkit: {
    driver: 'WebKitWebDriver',
    display: true,
    args: (port) => [`--port=${port}`],
    capabilities: () => ({
      browserName: 'MiniBrowser',
      'webkitgtk:browserOptions': {
        binary: process.env.MINIBROWSER || miniBrowser(),
        args: ['--automation'],
      },
    }),
  },
  chromium: {
    driver: 'chromedriver',
    args: (port) => [`--port=${port}`],
    capabilities: () => {
      const dir = mkdtempSync(join(tmpdir(), 'marksync-wd-'));
      return {
        browserName: 'chrome',
        'goog:chromeOptions': {
          binary: process.env.CHROMIUM || '/usr/bin/chromium',
          args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
            '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage', `--user-data-dir=${dir}`],
        },
        cleanup: dir,
      };
    },
  },
};

/**
 * Starts a virtual X display (Xvfb picks a free number and writes it to fd 3);
 * resolves with its name (`:N`) and a stop function.
 */
async function startDisplay() {
  const proc = spawn('Xvfb', ['-displayfd', '3', '-screen', '0', '1280x1024x24', '-nolisten', 'tcp'], { stdio: ['ignore', 'ignore', 'pipe', 'pipe'] });
  let err = '';
  proc.stderr.on('data', (d) => { err += d; });
  const display = await new Promise((resolve, reject) => {
    let out = '';
    proc.stdio[3].on('data', (d) => {
      out += d;
      if (out.includes('\n')) resolve(`:${out.trim()}`);
    });
    proc.once('exit', () => reject(new Error(`Xvfb exited: ${err}`)));
  });
  return {
    display,
    async stop() {
      if (proc.exitCode === null) {
        proc.kill('SIGTERM');
        await new Promise((r) => proc.once('exit', r));
      }
    },
  };
}

/** Starts a driver for `engine`; resolves once it answers `/status`. */
export async function startDriver(engine) {
  const e = ENGINES[engine];
  const port = await freePort();
  const x = e.display ? await startDisplay() : null;
  const env = x ? { ...process.env, DISPLAY: x.display } : process.env;
  const proc = spawn(e.driver, e.args(port), { stdio: ['ignore', 'pipe', 'pipe'], env });
  let log = '';
  proc.stdout.on('data', (d) => { log += d; });
  proc.stderr.on('data', (d) => { log += d; });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    if (proc.exitCode !== null) {
      await x?.stop();
      throw new Error(`${e.driver} exited: ${log}`);
    }
    try {
      if ((await fetch(`${url}/status`)).ok) break;
    } catch { /* not yet */ }
    if (i > 200) {
      proc.kill('SIGKILL');
      await x?.stop();
      throw new Error(`${e.driver} did not start: ${log}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url,
    log: () => log,
    async stop() {
      if (proc.exitCode === null) {
        proc.kill('SIGTERM');
        await new Promise((r) => proc.once('exit', r));
      }
      await x?.stop();
    },
  };
}

async function call(method, url, body) {
  const r = await fetch(url, { method, headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  const j = await r.json().catch(() => ({}));
  if (!r.ok || (j.value && j.value.error)) throw new Error(`webdriver ${method} ${url}: ${j.value?.error ?? r.status}: ${j.value?.message ?? ''}`);
  return j.value;
}

/**
 * A new browser session with a driver of its own (geckodriver serves one
 * session at a time): a fresh profile, i.e. a fresh device. `run(fn, arg)`
 * runs `fn` (an async function, serialised by its source) in the page and
 * resolves with its result; an exception comes back as `{ error, code }` thrown here.
 */
export async function session(engine) {
  const driver = await startDriver(engine);
  const { cleanup, ...caps } = ENGINES[engine].capabilities();
  let value;
  try {
    value = await call('POST', `${driver.url}/session`, { capabilities: { alwaysMatch: caps } });
  } catch (e) {
    await driver.stop();
    throw new Error(`${e.message}\n${driver.log()}`);
  }
  const base = `${driver.url}/session/${value.sessionId}`;
  await call('POST', `${base}/timeouts`, { script: 60_000, pageLoad: 30_000 });
  return {
    browserVersion: value.capabilities?.browserVersion,
    goto: (url) => call('POST', `${base}/url`, { url }),
    /** Opens a new tab of the same profile (the same device) and returns its handle; the current tab stays current. */
    newTab: async () => (await call('POST', `${base}/window/new`, { type: 'tab' })).handle,
    /** The current tab's handle. */
    tab: () => call('GET', `${base}/window`),
    /** Makes the tab with `handle` current: `goto` and `run` go to it from now on. */
    switchTo: (handle) => call('POST', `${base}/window`, { handle }),
    async run(fn, arg) {
      const script = `const done = arguments[arguments.length - 1];
        Promise.resolve().then(() => (${fn.toString()})(arguments[0]))
          .then((v) => done({ ok: v === undefined ? null : v }), (e) => done({ error: String(e && e.message || e), code: e && e.code }));`;
      let out;
      try {
        out = await call('POST', `${base}/execute/async`, { script, args: [arg ?? null] });
      } catch (e) {
        // A script that never finished: say what the page's database was doing, so that a stall seen once on a
        // loaded machine names itself instead of leaving only "script timeout".
        if (!/timeout/i.test(e.message)) throw e;
        // The Web Locks held and waited for too (a sync waits for its database's lock), unless asking them stalls.
        const state = await call('POST', `${base}/execute/async`, {
          script: `const done = arguments[arguments.length - 1];
            const d = window.db?.diagnostics?.();
            const asked = navigator.locks?.query ? navigator.locks.query().then((q) => ({ held: q.held.map((l) => l.name), pending: q.pending.map((l) => l.name) }), (e) => String(e)) : Promise.resolve('no Web Locks');
            Promise.race([asked, new Promise((r) => setTimeout(() => r('locks.query() did not answer in 5 s'), 5000))]).then((locks) =>
              done(JSON.stringify({ visibility: document.visibilityState, focus: document.hasFocus(), locks,
                diagnostics: d && { flight: d.flight, lastError: d.lastError, nextRetryAt: d.nextRetryAt, recovery: d.recovery,
                  outbox: d.outbox.map((o) => [o.phase, o.attempts, o.unknown]), lastCycle: d.cycles.at(-1) } })));`,
          args: [],
        }).catch((e2) => `unreadable: ${e2.message}`);
        throw new Error(`${e.message}; the page then: ${state}`);
      }
      if (out && 'error' in out) throw Object.assign(new Error(out.error), { code: out.code });
      return out?.ok;
    },
    async close() {
      await call('DELETE', base).catch(() => {});
      await driver.stop();
      if (cleanup) rmSync(cleanup, { recursive: true, force: true });
    },
  };
}
