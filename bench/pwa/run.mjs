// The demo (www/dist) as Lighthouse sees it on a phone: mobile preset
// (simulated slow 4G, 4× CPU slowdown), a fresh browser profile each run (a
// first visit: nothing cached, no service worker yet), three runs, medians.
// Served by the release marksync-server with --static, as `make demo` does.
//
//   scripts/build-www.sh && cargo build --release -p marksync-server
//   (cd bench/pwa && npm ci && node run.mjs)            # or: make bench (step 6)
//
// Goals (issue "the newcomer's path"): performance ≥ 90, accessibility 100,
// best practices 100. axe-core's zero violations in every state of the demo
// is a test, not a timing: www/test/a11y.test.mjs.
//
// PWA_RUNS (3), MARKSYNC_SERVER_BIN (target/release/marksync-server),
// CHROME_PATH (/usr/bin/chromium), PWA_JSON (write the results there).
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const runs = Number(process.env.PWA_RUNS || 3);
const bin = process.env.MARKSYNC_SERVER_BIN || join(root, 'target', 'release', 'marksync-server');
const chrome = process.env.CHROME_PATH || '/usr/bin/chromium';
const dist = join(root, 'www', 'dist');
for (const [path, how] of [[bin, 'cargo build --release -p marksync-server'], [join(dist, 'index.html'), 'scripts/build-www.sh']]) {
  if (!existsSync(path)) throw new Error(`${path} is missing: ${how}`);
}

const port = await new Promise((resolve) => {
  const s = createServer().listen(0, '127.0.0.1', () => {
    const { port } = s.address();
    s.close(() => resolve(port));
  });
});
const dir = mkdtempSync(join(tmpdir(), 'marksync-pwa-'));
const server = spawn(bin, ['--listen', `127.0.0.1:${port}`, '--database', `sqlite://${join(dir, 'demo.db')}`, '--static', dist, '--dev-auth'],
  { stdio: 'ignore' });
const base = `http://127.0.0.1:${port}`;
for (let i = 0; ; i++) {
  try {
    if ((await fetch(`${base}/readyz`)).ok) break;
  } catch { /* not yet */ }
  if (i > 200) throw new Error('the server did not start');
  await new Promise((r) => setTimeout(r, 50));
}

/** One Lighthouse run in a fresh profile: its JSON report. */
function lighthouse(url, out) {
  return new Promise((resolve, reject) => {
    const args = [join(dirname(fileURLToPath(import.meta.url)), 'node_modules', 'lighthouse', 'cli', 'index.js'), url,
      '--quiet', '--output=json', `--output-path=${out}`, '--only-categories=performance,accessibility,best-practices',
      `--chrome-flags=--headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage`];
    const p = spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, CHROME_PATH: chrome } });
    let err = '';
    p.stderr.on('data', (d) => { err += d; });
    p.on('exit', (code) => (code === 0 ? resolve(JSON.parse(readFileSync(out, 'utf8'))) : reject(new Error(`lighthouse exited ${code}: ${err}`))));
  });
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

const results = [];
try {
  for (let i = 0; i < runs; i++) {
    const r = await lighthouse(`${base}/?user=lighthouse-${Date.now()}-${i}`, join(dir, `run-${i}.json`));
    const score = (c) => Math.round(r.categories[c].score * 100);
    const ms = (a) => r.audits[a].numericValue;
    const failed = Object.entries(r.audits)
      .filter(([, a]) => a.score !== null && a.score < 1 && ['binary', 'numeric', 'metricSavings'].includes(a.scoreDisplayMode))
      .map(([k]) => k);
    results.push({
      performance: score('performance'), accessibility: score('accessibility'), bestPractices: score('best-practices'),
      fcp: ms('first-contentful-paint'), lcp: ms('largest-contentful-paint'), tbt: ms('total-blocking-time'),
      cls: r.audits['cumulative-layout-shift'].numericValue, si: ms('speed-index'), failed,
    });
    console.error(`run ${i + 1}/${runs}: performance ${score('performance')}, accessibility ${score('accessibility')}, best practices ${score('best-practices')}`);
  }
} finally {
  server.kill();
  rmSync(dir, { recursive: true, force: true });
}

const m = (k) => median(results.map((r) => r[k]));
const summary = {
  runs, lighthouse: JSON.parse(readFileSync(join(dirname(fileURLToPath(import.meta.url)), 'node_modules', 'lighthouse', 'package.json'), 'utf8')).version,
  performance: m('performance'), accessibility: m('accessibility'), bestPractices: m('bestPractices'),
  fcpMs: Math.round(m('fcp')), lcpMs: Math.round(m('lcp')), tbtMs: Math.round(m('tbt')), cls: m('cls'), speedIndexMs: Math.round(m('si')),
  belowFull: [...new Set(results.flatMap((r) => r.failed))].sort(),
  each: results.map(({ failed, ...r }) => r),
};
const goals = summary.performance >= 90 && summary.accessibility === 100 && summary.bestPractices === 100;
console.log(`| Lighthouse ${summary.lighthouse}, mobile, median of ${runs} | performance | accessibility | best practices | FCP | LCP | TBT | CLS | Speed Index |`);
console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|');
console.log(`| the demo, first visit | ${summary.performance} | ${summary.accessibility} | ${summary.bestPractices} | ${summary.fcpMs} ms | ${summary.lcpMs} ms | ${summary.tbtMs} ms | ${summary.cls} | ${summary.speedIndexMs} ms |`);
console.log(`goals (performance ≥ 90, accessibility 100, best practices 100): ${goals ? 'met' : 'not met'}; audits below full marks in some run: ${summary.belowFull.join(', ') || 'none'}`);
if (process.env.PWA_JSON) writeFileSync(process.env.PWA_JSON, JSON.stringify(summary, null, 2));
