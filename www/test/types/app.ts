// The README's snippets as an app writes them, compiled by `tsc --strict`
// against the package's own types (imported by the package's name).
import { Marksync, type Database, type Invitation, type MarksyncError, type Row, type SpaceInvitation } from 'marksync';
import { useQuery, useRows, useRowStatus, useSpaces } from 'marksync/react';
import marksync from 'marksync/vite';
import { mountInspector } from 'marksync/devtools';

// vite.config.ts: plugins: [marksync({ worker: 'src/service-worker.ts' })]
export const plugin = marksync({ worker: 'src/service-worker.ts' });

declare const auth: { token(): Promise<string> };
declare const imported: { exercise: string; weightKg: number; reps: number }[];
declare function render(rows: readonly Row[]): void;
declare function showError(reason: string): void;

export async function readme(): Promise<void> {
  const db: Database = await Marksync.open({ endpoint: 'https://sync.example.com', token: () => auth.token(), name: 'diary',
    indexes: { sets: [['exercise', 'weightKg']] } });
  const id = db.newRowId();
  await db.change('sets', id, { exercise: 'squat', weightKg: 82.5, reps: 5 });
  const page = db.query('sets', { where: { exercise: 'squat' }, orderBy: ['weightKg', 'desc'], limit: 50 });
  db.query('sets', { where: { exercise: 'squat' }, orderBy: ['weightKg', 'desc'], limit: 50, after: page.at(-1) });
  const stop = db.watch('sets', { where: { weightKg: { gte: 100 } } }, render);
  stop();
  const phase: 'pending' | 'awaiting-ack' | 'unknown-outcome' | 'rejected' | 'synced' | 'recovery-required' | undefined = db.status('sets', id)?.phase;
  void phase;
  const { rowIds } = await db.changeMany(imported.map((s) => ({ table: 'sets', fields: s })));
  void rowIds;
  await db.remove('sets', id);
  for (const r of db.rejections()) showError(r.reason);
  const refusal = db.check('sets', id, { reps: 500 });
  if (refusal) showError(`${refusal.code}: ${refusal.reason} (${refusal.field ?? 'the row'})`);

  await db.createSpace('team-42');
  await db.setMember('team-42', 'coach', 'viewer');
  const invited: SpaceInvitation[] = await db.invited('team-42');
  for (const i of invited) showError(`${i.user} invited as ${i.role} by ${i.from} until ${i.expiresAt}`);
  const firstMembers = await db.members('team-42', { limit: 50 });
  void firstMembers.members[0]?.user;
  const pending: Invitation[] = await db.invitations({ after: 'team-41' });
  void pending;
  await db.change('sets', db.newRowId(), { exercise: 'row', weightKg: 40, reps: 12 }, { space: 'team-42' });
  db.spaces();
  db.rows('sets', { space: 'team-42' });
  db.explain('sets', { where: { exercise: 'squat' } });
  db.count('sets', { where: { exercise: 'squat' } });

  await db.reconcile();
  await db.retry();
  const other = await Marksync.open({ endpoint: '', token: () => auth.token(), name: 'diary-sam', user: 'sam', retry: { maxAttempts: 10, maxElapsedMs: 3_600_000 } });
  other.status('sets', 'no-such-row');
  const live: 'off' | 'connecting' | 'open' | 'closed' = other.metrics().live;
  void live;

  // A device that holds more rows than it shows: reads of rows are Promises.
  const big = await Marksync.open({ endpoint: '', token: () => auth.token(), name: 'coach', lazy: true });
  const newest: readonly Row[] = await big.query('sets', { orderBy: ['at', 'desc'], limit: 50 });
  const n: number = await big.count('sets', { where: { exercise: 'squat' } });
  const one: Row | null = await big.row('sets', id);
  const st = (await big.status('sets', id))?.phase;
  const no = await big.check('sets', id, { reps: 500 });
  void [newest, n, one, st, no, useRows(big, 'sets'), big.lazy === true];

  try {
    await db.change('sets', id, { reps: 500 });
  } catch (e) {
    const err = e as MarksyncError;
    // Every code the README names is one the types know.
    if (err.code === 'read_only' || err.code === 'forbidden' || err.code === 'refused' || err.code === 'invalid' || err.code === 'storage_full') {
      showError(err.reason ?? err.message);
    }
  }
}

export function Hooks({ db }: { db: Database }): number {
  const rows = useQuery(db, 'sets', { where: { exercise: 'squat' }, limit: 20 });
  const all = useRows(db, 'sets');
  const status = useRowStatus(db, 'sets', 'r1');
  const spaces = useSpaces(db);
  return (rows?.length ?? 0) + all.length + (status ? 1 : 0) + spaces.length;
}

// The database's events, as an app listens to them (and stops).
export function events(db: Database): void {
  const onLive = (e: { live: string; error: string | null }) => void [e.live, e.error];
  db.addEventListener('live', onLive);
  db.removeEventListener('live', onLive);
  const onStorage = (e: Event & { persistence: unknown }) => void e.persistence;
  db.addEventListener('storage', onStorage);
  db.removeEventListener('storage', onStorage);
}

// The inspector, as the README mounts it.
export function inspect(db: Database): () => void {
  const panel = document.createElement('aside');
  document.body.append(panel);
  const inspector = mountInspector(db, panel);
  const el = document.createElement('marksync-inspector');
  el.db = db;
  document.body.append(el);
  return () => inspector.unmount();
}
