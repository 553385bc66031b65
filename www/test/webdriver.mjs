// A small W3C WebDriver client (sessions, navigation, async scripts, timeouts)
// for the cross-browser suite. Hand-written rather than webdriverio or
// selenium-webdriver: the suite needs five endpoints of the standard, and
// those packages bring tens of dependencies and download managers for
// drivers that this project installs itself (geckodriver from crates.io,
// chromedriver and the browsers from Debian).
import { spawn } from 'node:child_process';
import { freePort } from './helpers.mjs';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

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

/** Starts a driver for `engine`; resolves once it answers `/status`. */
export async function startDriver(engine) {
  const e = ENGINES[engine];
  const port = await freePort();
  const proc = spawn(e.driver, e.args(port), { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  proc.stdout.on('data', (d) => { log += d; });
  proc.stderr.on('data', (d) => { log += d; });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    if (proc.exitCode !== null) throw new Error(`${e.driver} exited: ${log}`);
    try {
      if ((await fetch(`${url}/status`)).ok) break;
    } catch { /* not yet */ }
    if (i > 200) throw new Error(`${e.driver} did not start: ${log}`);
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
    async run(fn, arg) {
      const script = `const done = arguments[arguments.length - 1];
        Promise.resolve().then(() => (${fn.toString()})(arguments[0]))
          .then((v) => done({ ok: v === undefined ? null : v }), (e) => done({ error: String(e && e.message || e), code: e && e.code }));`;
      const out = await call('POST', `${base}/execute/async`, { script, args: [arg ?? null] });
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
