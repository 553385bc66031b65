import { useCallback, useEffect, useMemo, useState } from 'react';
import { useQuery, useSpaces } from 'marksync/react';
import { useMetrics, useOnline } from './hooks.js';
import { formatKg, formatReps, shortDevice } from './format.js';
import { AddSetForm } from './AddSetForm.jsx';
import { SetList } from './SetList.jsx';
import { Rejections } from './Rejections.jsx';
import { Conflicts } from './Conflicts.jsx';
import { Sharing, SharedWithMe, ownerOf } from './Sharing.jsx';
import { Toast } from './Toast.jsx';
import { SyncIcon } from './icons.jsx';
import { syncNow } from './sync.js';

const UNDO_MS = 5000;
const NONE = Object.freeze([]);

/** What blocks sync (metrics().recovery), for people. */
const RECOVERY = {
  unauthorized: 'The server no longer accepts this sign-in.',
  schema_too_new: 'The server is older than this app; your changes are kept and sent once the server is updated.',
  retries_exhausted: 'The server has not confirmed some changes. They are safe on this phone — retry, or check with the server.',
  refused: 'The server refused to go on with this device.',
  storage: 'This device’s storage failed.',
  payload_too_large: 'A change is too large for the server.',
};

const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;

export function App({ db, user }) {
  const online = useOnline();
  const metrics = useMetrics(db);
  const spaces = useSpaces(db);
  const personal = spaces.find((s) => s.personal)?.space ?? null;
  // The person's own diary: a live query of their personal space (every
  // space until the first sync names it; its rows carry no `_space`).
  const mine = useQuery(db, 'sets', personal ? { space: personal } : undefined);
  const rows = useMemo(() => (mine ?? NONE).filter((r) => !r._space), [mine]);
  const shared = spaces.filter((s) => !s.personal);
  const [toast, setToast] = useState(null);
  const [syncing, setSyncing] = useState(false);
  const [lastAdded, setLastAdded] = useState(null);
  const later = useAfterFirstPaint();

  const say = useCallback((text, extra = {}) => setToast({ id: Math.random(), text, ms: 4000, ...extra }), []);
  const fail = useCallback((e) => say(`Not saved on this device: ${e?.message ?? e}`), [say]);

  const sync = useCallback(async ({ quiet = false } = {}) => {
    setSyncing(true);
    try {
      const report = await syncNow(db);
      if (quiet) return;
      if (!report) return say('Syncing in the background.');
      if (report.ok) say(report.rejected ? plural(report.rejected, 'change was refused', 'changes were refused') : 'Up to date with the server');
      else if (!navigator.onLine) say('You’re offline. Your changes are safe here and will be sent later.');
      else say('Could not reach the server. Your changes are safe here; retrying on its own.');
    } catch (e) {
      if (!quiet) say(`Sync is blocked: ${e?.message ?? e}`);
    } finally {
      setSyncing(false);
    }
  }, [db, say]);

  // Back online: send what waited now, not at the next backoff tick.
  useEffect(() => {
    const onOnline = () => sync({ quiet: true });
    window.addEventListener('online', onOnline);
    return () => window.removeEventListener('online', onOnline);
  }, [sync]);

  const remove = useCallback(async (row) => {
    try {
      await db.remove('sets', row._id, { space: row._space });
    } catch (e) {
      fail(e);
      return;
    }
    say(`Deleted ${row.exercise} · ${formatKg(row.weightKg)} kg × ${formatReps(row.reps)}`, {
      ms: UNDO_MS,
      action: { label: 'Undo', run: () => db.restore('sets', row._id, { space: row._space }).catch(fail) },
    });
  }, [db, say, fail]);

  const added = useCallback((id, set) => {
    setLastAdded(id);
    say(`Saved on this phone: ${set.exercise} · ${formatKg(set.weightKg)} kg × ${formatReps(set.reps)}`, { ms: 2500 });
  }, [say]);

  return (
    <div className="app">
      <header className="top">
        <div>
          <h1>Workout diary</h1>
          <p className="who">
            <span>{user}</span>
            <span className="device">device <span className="mono" title={db.deviceId}>{shortDevice(db.deviceId)}</span></span>
          </p>
        </div>
        <span className={`conn ${online ? 'on' : 'off'}`} data-testid="connection" role="status">
          <span className="dot" aria-hidden="true" />
          {online ? 'Online' : 'Offline'}
        </span>
      </header>

      <main className="body">
        <SyncBar metrics={metrics} online={online} syncing={syncing} onSync={() => sync()} />
        <AddSetForm db={db} rows={rows} onAdded={added} onError={fail} />
        <Rejections db={db} />
        <Conflicts db={db} user={user} />
        <SetList db={db} rows={rows} highlight={lastAdded} onDelete={remove} onError={fail} />
        {shared.map((s) => (
          <SharedDiary key={s.space} db={db} space={s} onDelete={remove} onError={fail} />
        ))}
        {later && <SharedWithMe db={db} shared={shared} onError={fail} say={say} />}
        {later && <Sharing db={db} personal={personal} onError={fail} say={say} />}
        <Toast toast={toast} onClose={() => setToast(null)} />
      </main>
    </div>
  );
}

/** A diary shared with the person (the coach's view): a live query of that space alone. */
function SharedDiary({ db, space, onDelete, onError }) {
  const rows = useQuery(db, 'sets', { space: space.space }) ?? NONE;
  return (
    <SetList db={db} rows={rows} title={`${ownerOf(space.space)}’s diary`} role={space.role} onDelete={onDelete} onError={onError} />
  );
}

function SyncBar({ metrics, online, syncing, onSync }) {
  const n = metrics.pendingOps;
  let tone;
  let title;
  let detail;
  if (metrics.recovery) {
    tone = metrics.recovery === 'schema_too_new' ? 'warn' : 'bad';
    title = metrics.recovery === 'schema_too_new' ? 'Waiting for the server' : 'Sync needs attention';
    detail = RECOVERY[metrics.recovery] ?? metrics.recovery;
  } else if (n > 0 && !online) {
    tone = 'warn';
    title = `${plural(n, 'change', 'changes')} waiting`;
    detail = 'Safe on this phone; sent when you’re back online.';
  } else if (n > 0) {
    tone = 'busy';
    title = `${plural(n, 'change', 'changes')} waiting`;
    detail = 'Safe on this phone; on the way to the server.';
  } else {
    tone = 'ok';
    title = 'All changes synced';
    detail = 'On this phone and on the server.';
  }
  return (
    <section className={`syncbar ${tone}`} aria-live="polite" data-testid="syncbar">
      <div className="syncbar-text">
        <strong>{title}</strong>
        <span>{detail}</span>
      </div>
      <button type="button" className="ghost" onClick={onSync} disabled={syncing}>
        <SyncIcon />
        {syncing ? 'Syncing…' : 'Sync now'}
      </button>
    </section>
  );
}

/**
 * False for the first render, true once the browser is idle after it: what
 * sits below the fold (sharing, invitations) mounts in a task of its own, so
 * the diary's first screen is not held up by it on a slow phone.
 */
function useAfterFirstPaint() {
  const [ready, setReady] = useState(false);
  useEffect(() => {
    const idle = window.requestIdleCallback ?? ((f) => setTimeout(f, 50));
    const cancel = window.cancelIdleCallback ?? clearTimeout;
    const id = idle(() => setReady(true), { timeout: 500 });
    return () => cancel(id);
  }, []);
  return ready;
}
