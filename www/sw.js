// marksync/sw — make an app's Service Worker hold the queue.
//
//   import { installSyncWorker } from 'marksync/sw';
//   installSyncWorker(self, { endpoint: self.location.origin, name: 'diary' });
//
// The worker pushes and pulls on a Background Sync `sync` event (tag
// `marksync:<name>`), on a page's message, and when the network comes back.
// A failed cycle throws from the sync event, so the browser retries it later.
// Pages hear every committed step over BroadcastChannel('marksync:<name>').
// One cycle runs at a time per database across the worker and all tabs
// (Web Locks, inside the wasm client).
import { Marksync, load } from './index.js';

// Start loading the module at the top level, without awaiting it here:
// top-level await would make the worker's registration fail.
load();

const AUTH_DB = 'marksync-auth';

function authStore(mode, fn) {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open(AUTH_DB, 1);
    open.onupgradeneeded = () => open.result.createObjectStore('tokens');
    open.onerror = () => reject(open.error);
    open.onsuccess = () => {
      const tx = open.result.transaction('tokens', mode);
      const req = fn(tx.objectStore('tokens'));
      tx.oncomplete = () => { open.result.close(); resolve(req && req.result); };
      tx.onerror = () => { open.result.close(); reject(tx.error); };
    };
  });
}

/**
 * Installs the sync handlers on a Service Worker global scope.
 * @param {ServiceWorkerGlobalScope} scope `self`
 * @param {{ endpoint: string, name?: string, token?: string | (() => string | Promise<string>) }} options
 */
export function installSyncWorker(scope, { endpoint, name = 'marksync', token } = {}) {
  const tag = `marksync:${name}`;
  let stored = typeof token === 'string' ? token : null;
  let calls = 0;
  let waiting = [];
  let dbPromise = null;

  // The token: the app's own function if given; else the one a page sent
  // (kept in IndexedDB so a worker woken by a sync event with no page open
  // still has it); after a 401 (a second call), ask the open pages.
  async function getToken() {
    if (typeof token === 'function') return token();
    calls += 1;
    if (calls === 1) {
      if (!stored) stored = await authStore('readonly', (s) => s.get(name)).catch(() => null);
      if (stored) return stored;
    }
    return askPages();
  }

  async function askPages() {
    const pages = await scope.clients.matchAll({ type: 'window', includeUncontrolled: true });
    if (pages.length === 0) return stored;
    const reply = new Promise((resolve) => {
      waiting.push(resolve);
      setTimeout(() => resolve(null), 3000);
    });
    pages.forEach((p) => p.postMessage({ type: 'marksync:need-token', name }));
    return (await reply) ?? stored;
  }

  function db() {
    // `resumeExhausted: false`: when retries ran out, only a person (or the
    // app's next open) sends again — never a worker woken in the background.
    // Lazy: it reads only the rows its sync needs; it never queries, so it
    // asks the store to keep no index entries of its own (those a page asked
    // for are kept up by every context's writes all the same).
    dbPromise ??= Marksync.open({
      endpoint, name, token: getToken, autoSync: false, persist: false, live: false, resumeExhausted: false,
      lazy: true, indexesOnDisk: false,
    })
      .catch((e) => { dbPromise = null; throw e; });
    return dbPromise;
  }

  // A failed cycle's next try, when it is due this soon, is made inside the
  // same event (kept alive by `waitUntil`): the statuses say when the next
  // try is (`nextRetryAt`), and with no page syncing on its own nothing else
  // would make it then. A later one is the browser's (the event fails, and
  // Background Sync fires it again).
  const HOLD_MS = 60_000;

  async function cycle() {
    const started = Date.now();
    for (;;) {
      const d = await db();
      // A database closed under the library heals inside the instance (it
      // opens it again and puts back the queue it holds); an instance that
      // cannot is dropped, never kept on a dead connection: the next cycle
      // opens a new one.
      const report = await d.sync().catch((e) => {
        if (e && (e.code === 'closed' || e.code === 'storage_unavailable')) {
          dbPromise = null;
          try { d.close(); } catch (_) { /* already closed */ }
        }
        throw e;
      });
      if (report.ok) return report;
      if (report.retryAt == null || report.retryAt - started > HOLD_MS) {
        throw new Error(`marksync: sync incomplete (${report.error}); retrying later`);
      }
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, report.retryAt - Date.now())));
    }
  }

  scope.addEventListener('sync', (event) => {
    if (event.tag === tag) event.waitUntil(cycle());
  });

  scope.addEventListener('message', (event) => {
    const m = event.data;
    if (!m || m.name !== name) return;
    if (m.type === 'marksync:ping') {
      event.ports[0]?.postMessage({ holds: true });
    } else if (m.type === 'marksync:token' && typeof m.token === 'string') {
      stored = m.token;
      calls = 0;
      waiting.forEach((w) => w(m.token));
      waiting = [];
      event.waitUntil(Promise.all([
        authStore('readwrite', (s) => s.put(m.token, name)).catch(() => {}),
        dbPromise ? dbPromise.then((d) => d.setToken(getToken)).catch(() => {}) : null,
      ]));
    } else if (m.type === 'marksync:sync') {
      event.waitUntil(cycle().catch(() => scope.registration.sync?.register(tag).catch(() => {})));
    }
  });

  // Where there is no Background Sync (Firefox, Safari), the worker syncs itself.
  function registerOrSync() {
    const sync = scope.registration && scope.registration.sync;
    const registered = sync ? sync.register(tag) : Promise.reject(new Error('no Background Sync here'));
    return registered.catch(() => cycle().catch(() => {}));
  }

  scope.addEventListener('online', () => {
    registerOrSync();
  });
}
