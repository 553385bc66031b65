// What an edit costs a device that follows many spaces: two builds of the
// package side by side in one Chromium run, against one server binary each.
// A user owns `SPACES` shared spaces (at most 9,999, the server's cap; made
// over HTTP before the rounds); each round a fresh page opens the user's
// device, syncs once (it follows every space), then records `EDITS` durable
// edits, each awaited. Rounds alternate A and B; prints the p50 of each
// round, the medians and B ÷ A.
//
//   SPACES=9999 EDITS=500 node www/bench/spaces-edit.mjs <www dir A> <www dir B> [rounds]
import { startServer, launch } from '../test/helpers.mjs';

const [dirA, dirB, roundsArg] = process.argv.slice(2);
if (!dirA || !dirB) {
  console.error('usage: SPACES=9999 EDITS=500 node www/bench/spaces-edit.mjs <www dir A> <www dir B> [rounds]');
  process.exit(2);
}
const rounds = Number(roundsArg ?? 5);
const spaces = Number(process.env.SPACES ?? 9_999);
const edits = Number(process.env.EDITS ?? 500);
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// The spaces are the admin's to make, the server's caps on a user's spaces off.
const admin = 'bench-admin-token-of-at-least-32-characters';
async function owner(url, user) {
  const post = (space) => fetch(`${url}/v1/admin/spaces`, { method: 'POST', headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' }, body: JSON.stringify({ space, owner: user }) });
  for (let i = 0; i < spaces; i += 4) {
    const rs = await Promise.all(Array.from({ length: Math.min(4, spaces - i) }, (_, j) => post(`s-${user}-${i + j}`)));
    const bad = rs.find((r) => !r.ok);
    if (bad) throw new Error(`create space: ${bad.status} ${await bad.text()}`);
  }
}

const browser = await launch();
const sides = {};
for (const [side, dir] of [['A', dirA], ['B', dirB]]) {
  const server = await startServer('sqlite', { staticDir: dir, extra: ['--admin-token', admin, '--max-owned-spaces-per-user', '0', '--max-spaces-per-user', '9999'] });
  await owner(server.url, `coach${side}`);
  sides[side] = { server, p50: [] };
}

for (let n = 0; n < rounds; n++) {
  for (const side of n % 2 ? ['B', 'A'] : ['A', 'B']) {
    const context = await browser.newContext();
    const p = await context.newPage();
    await p.goto(`${sides[side].server.url}/test/harness.html`);
    await p.evaluate(() => window.ready);
    const p50 = await p.evaluate(async ({ user, name, edits, spaces }) => {
      const db = await window.Marksync.open({ endpoint: location.origin, token: `dev:${user}`, name, autoSync: false, persist: false });
      await db.sync();
      if (db.spaces().length !== spaces + 1) throw new Error(`follows ${db.spaces().length} spaces`);
      const ms = [];
      for (let i = 0; i < edits; i++) {
        const t = performance.now();
        await db.change('sets', db.newRowId(), { exercise: 'squat', weightKg: 80, reps: 1 + (i % 100) });
        ms.push(performance.now() - t);
      }
      ms.sort((a, b) => a - b);
      return ms[ms.length >> 1];
    }, { user: `coach${side}`, name: `coach-${side}-${n}`, edits, spaces });
    sides[side].p50.push(p50);
    await context.close();
  }
}
await browser.close();
for (const s of Object.values(sides)) await s.server.stop();
const [a, b] = [median(sides.A.p50), median(sides.B.p50)];
console.log(`change() p50 following ${spaces} spaces, ${edits} edits a round`);
console.log(`A ${sides.A.p50.map((x) => x.toFixed(2)).join(' ')} → median ${a.toFixed(2)} ms`);
console.log(`B ${sides.B.p50.map((x) => x.toFixed(2)).join(' ')} → median ${b.toFixed(2)} ms`);
console.log(`B ÷ A ${(b / a).toFixed(2)}`);
