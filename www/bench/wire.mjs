// Bytes on the wire, and what compressing them costs the server: a 10k-op
// drain (ten 1000-op pushes) and a 100k-row backfill (pulls of 1000 rows),
// plain, gzip and brotli, against the real server (SQLite), with the server's
// CPU time (utime + stime from /proc) and the judged ops/s of each drain.
//
//   cargo build --release -p marksync-server
//   node www/bench/wire.mjs            # WIRE_ROWS (100000), MARKSYNC_SERVER_BIN
import { spawn } from 'node:child_process';
import { request } from 'node:http';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const bin = process.env.MARKSYNC_SERVER_BIN || join(root, 'target', 'release', 'marksync-server');
const ROWS = Number(process.env.WIRE_ROWS || 100000);

const port = await new Promise((resolve) => {
  const s = createServer().listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
});
const dir = mkdtempSync(join(tmpdir(), 'marksync-wire-'));
const server = spawn(bin, ['--listen', `127.0.0.1:${port}`, '--database', `sqlite://${join(dir, 'w.db')}`, '--dev-auth',
  '--rate-limit', '0', '--ops-rate', '1000000', '--read-rate', '10000000'], { stdio: 'ignore' });
const cpu = () => { const f = readFileSync(`/proc/${server.pid}/stat`, 'utf8').split(') ')[1].split(' '); return (Number(f[11]) + Number(f[12])) * 10; };

/** One request; the raw bytes each way (the body as sent, the answer as received). */
function call(method, path, user, body, { accept = 'identity', encode = null } = {}) {
  return new Promise((resolve, reject) => {
    let sent = body ? Buffer.from(body) : null;
    const headers = { authorization: `Bearer dev:${user}`, 'accept-encoding': accept, 'content-type': 'application/json' };
    if (sent && encode === 'gzip') { sent = gzipSync(sent); headers['content-encoding'] = 'gzip'; }
    if (sent) headers['content-length'] = sent.length;
    const req = request({ host: '127.0.0.1', port, method, path, headers }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, up: sent?.length ?? 0, down: Buffer.concat(chunks).length, encoding: res.headers['content-encoding'] ?? null, raw: Buffer.concat(chunks) }));
    });
    req.on('error', reject);
    if (sent) req.write(sent);
    req.end();
  });
}

for (let i = 0; ; i++) {
  try { if ((await call('GET', '/readyz', 'x')).status === 200) break; } catch { /* not yet */ }
  if (i > 200) throw new Error('server did not start');
  await new Promise((r) => setTimeout(r, 50));
}

const op = (user, i) => ({ opId: `${user}-d:${i}`, table: 'sets', rowId: `${user}-d-${i}`, at: 1700000000000 + i,
  fields: { exercise: ['Squat', 'Bench press', 'Deadlift', 'Overhead press'][i % 4], weightKg: 40 + (i % 80) * 2.5, reps: 1 + (i % 12) } });

async function drain(user, encode) {
  const c0 = cpu(); const t0 = performance.now(); let up = 0; let down = 0;
  for (let b = 0; b < 10; b++) {
    const batch = Array.from({ length: 1000 }, (_, i) => op(user, b * 1000 + i));
    const r = await call('POST', '/v1/push', user, JSON.stringify({ attemptKey: `${user}-d:a${b}`, batch }), { encode, accept: encode ? 'gzip' : 'identity' });
    if (r.status !== 200) throw new Error(`push ${r.status}`);
    up += r.up; down += r.down;
  }
  return { up, down, ms: performance.now() - t0, cpuMs: cpu() - c0 };
}

async function backfill(user, accept) {
  const c0 = cpu(); const t0 = performance.now(); let down = 0; let cursor = 0; let rows = 0;
  for (;;) {
    const r = await call('GET', `/v1/pull?cursor=${cursor}&limit=1000`, user, null, { accept });
    if (r.status !== 200) throw new Error(`pull ${r.status}`);
    down += r.down;
    let text = r.raw;
    if (r.encoding === 'gzip') text = (await import('node:zlib')).gunzipSync(text);
    if (r.encoding === 'br') text = (await import('node:zlib')).brotliDecompressSync(text);
    const page = JSON.parse(text);
    rows += page.changes.length; cursor = page.cursor;
    if (!page.hasMore) break;
  }
  return { down, rows, ms: performance.now() - t0, cpuMs: cpu() - c0 };
}

const kb = (n) => `${(n / 1024).toFixed(1)} KB`;
try {
  console.log('| 10k-op drain (ten 1000-op pushes) | up | down | server CPU | judged ops/s |');
  console.log('|---|---:|---:|---:|---:|');
  for (const [name, encode] of [['plain', null], ['gzip both ways', 'gzip']]) {
    const d = await drain(`drain-${name.split(' ')[0]}`, encode);
    console.log(`| ${name} | ${kb(d.up)} | ${kb(d.down)} | ${d.cpuMs} ms | ${Math.round(10000 / (d.ms / 1000)).toLocaleString('en-US')} |`);
  }
  // The backfill's rows: one user's ROWS ops (pushed plain, not measured).
  for (let b = 0; b < ROWS / 1000; b++) {
    const batch = Array.from({ length: 1000 }, (_, i) => op('fill', b * 1000 + i));
    const r = await call('POST', '/v1/push', 'fill', JSON.stringify({ attemptKey: `fill-d:a${b}`, batch }), { encode: 'gzip' });
    if (r.status !== 200) throw new Error(`push ${r.status}`);
  }
  console.log('');
  console.log(`| ${ROWS.toLocaleString('en-US')}-row backfill (pulls of 1000) | down | server CPU | rows/s |`);
  console.log('|---|---:|---:|---:|');
  for (const accept of ['identity', 'gzip', 'br']) {
    const p = await backfill('fill', accept);
    if (p.rows !== ROWS) throw new Error(`backfill read ${p.rows} rows`);
    console.log(`| ${accept === 'identity' ? 'plain' : accept} | ${kb(p.down)} | ${p.cpuMs} ms | ${Math.round(p.rows / (p.ms / 1000)).toLocaleString('en-US')} |`);
  }
} finally {
  server.kill();
  rmSync(dir, { recursive: true, force: true });
}
