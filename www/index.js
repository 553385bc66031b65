// marksync — offline-first sync for web apps. The JS glue: it loads the
// WebAssembly module once, re-exports it, and wires the browser's page-side
// events (Service Worker, Background Sync, online, server pokes). Every rule
// (ids, merge, outbox, verdicts, retries, one cycle at a time) lives in the
// Rust core compiled to that module.
import init, { Marksync as Native } from './pkg/marksync.js';

let ready;

/**
 * Loads the WebAssembly module once (`open()` calls it): call it to start
 * early, or to pass the module's URL or bytes (first call only). A failed
 * load rejects with code `load_failed`; the next call tries again.
 */
export function load(wasm) {
  ready ??= init(wasm === undefined ? undefined : { module_or_path: wasm }).catch((cause) => {
    ready = undefined;
    const e = new Error(`marksync: the module did not load: ${cause?.message ?? cause}`, { cause });
    e.code = 'load_failed';
    throw e;
  });
  return ready;
}

const pageSide = new WeakMap();
const inPage = typeof window !== 'undefined' && typeof document !== 'undefined';

async function resolveToken(token) {
  if (typeof token === 'function') return token();
  return token ?? null;
}

function controller() {
  return (inPage && navigator.serviceWorker && navigator.serviceWorker.controller) || null;
}

/** Sends this page's token to the Service Worker that holds the queue. */
async function shareToken(state) {
  const c = controller();
  if (!c) return;
  const token = await resolveToken(state.token);
  if (typeof token === 'string') c.postMessage({ type: 'marksync:token', name: state.name, token });
}

/**
 * Asks for persistent storage without waiting for the answer: Firefox holds
 * it behind a permission prompt, and nothing in `open()` may wait on a
 * person. The answer lands in `storage().persistence` and fires a `storage`
 * event on the database.
 */
function askPersistence(state) {
  const sm = globalThis.navigator && globalThis.navigator.storage;
  if (!sm || typeof sm.persist !== 'function') {
    state.persistence = 'unsupported';
    return;
  }
  state.persistence = 'prompting';
  Promise.resolve()
    .then(() => sm.persist())
    .then((granted) => (granted ? 'granted' : 'denied'), () => 'denied')
    .then((answer) => {
      state.persistence = answer;
      if (!state.closed) state.target.dispatchEvent(Object.assign(new Event('storage'), { persistence: answer }));
    });
}

function attachPageSide(db, options) {
  const state = {
    name: options.name ?? 'marksync',
    endpoint: options.endpoint,
    token: options.token,
    cleanup: [],
    events: null,
    target: new EventTarget(),
    persistence: 'not-asked',
  };
  pageSide.set(db, state);
  if (options.persist !== false) askPersistence(state);
  if (!inPage) return;
  const on = (target, type, fn) => {
    target.addEventListener(type, fn);
    state.cleanup.push(() => target.removeEventListener(type, fn));
  };
  if (options.autoSync !== false) {
    on(window, 'online', () => db.requestSync().catch(() => {}));
    // Browsers without Background Sync (Firefox, Safari) deliver the queue
    // when the app comes back to the foreground, too.
    on(document, 'visibilitychange', () => {
      if (document.visibilityState === 'visible' && navigator.onLine !== false) db.requestSync().catch(() => {});
    });
  }
  const sw = navigator.serviceWorker;
  if (sw) {
    shareToken(state);
    on(sw, 'controllerchange', () => shareToken(state));
    on(sw, 'message', async (e) => {
      const m = e.data;
      if (m && m.type === 'marksync:need-token' && m.name === state.name) {
        const token = await resolveToken(state.token);
        if (typeof token === 'string') e.source?.postMessage({ type: 'marksync:token', name: state.name, token });
      }
    });
  }
  state.liveWanted = (options.live ?? options.autoSync ?? true) && typeof EventSource !== 'undefined';
  if (state.liveWanted) openLive(db, state);
}

/** Longest wait between two tries to open the event stream again (ms). */
const LIVE_CAP_MS = 60_000;

function setLive(state, live, error = null) {
  if (state.live === live && state.liveError === error) return;
  state.live = live;
  state.liveError = error;
  if (!state.closed) state.target.dispatchEvent(Object.assign(new Event('live'), { live, error }));
}

/**
 * Opens the server's event stream with the current token (the token
 * function is called again each time) and keeps it open: a stream the
 * browser gave up on (a 401 after the token expired, a server restarted,
 * a token of another user) is opened again with a fresh token, backing off
 * from 1 s to a minute; a new token (`setToken`) reopens it at once. Its
 * state is `metrics().live` (`connecting`, `open`, `closed`), with
 * `metrics().liveError` saying why it is not open.
 */
function openLive(db, state) {
  clearTimeout(state.liveTimer);
  state.events?.close();
  state.events = null;
  if (state.closed || !state.liveWanted) return;
  const generation = (state.liveGeneration = (state.liveGeneration ?? 0) + 1);
  const again = (why) => {
    if (state.closed || generation !== state.liveGeneration) return;
    state.events?.close();
    state.events = null;
    state.liveFailures = (state.liveFailures ?? 0) + 1;
    const wait = Math.min(LIVE_CAP_MS, 1000 * 2 ** Math.min(state.liveFailures - 1, 6));
    setLive(state, 'closed', `${why}; opening again in ${Math.round(wait / 1000)} s`);
    state.liveTimer = setTimeout(() => openLive(db, state), wait);
  };
  setLive(state, 'connecting', state.liveError);
  resolveToken(state.token).then((token) => {
    if (state.closed || generation !== state.liveGeneration) return;
    const params = new URLSearchParams();
    if (typeof token === 'string') params.set('token', token);
    const user = db.user;
    if (typeof user === 'string') params.set('user', user);
    const es = new EventSource(`${state.endpoint.replace(/\/$/, '')}/v1/events?${params}`);
    // A poke is no person's sync: it waits for a wait the server asked for,
    // and one of a head already pulled asks for nothing. The first, on
    // connect, names the personal space alone: it pulls whatever moved.
    let connected = false;
    es.addEventListener('poke', (e) => {
      db.poked(connected ? e.data : undefined);
      connected = true;
    });
    es.addEventListener('open', () => {
      state.liveFailures = 0;
      setLive(state, 'open');
      // A stream that opens again means the server is back (perhaps a newer
      // one a waiting queue was waiting for), and pokes may have been missed.
      if (state.liveOpened) db.sync().catch(() => {});
      state.liveOpened = true;
    });
    es.addEventListener('error', () => {
      // CONNECTING: the browser retries by itself. CLOSED: it gave up (an
      // answer that is no stream: 401, 403, a server that is not there yet).
      if (es.readyState === EventSource.CLOSED) again('the event stream was refused or closed');
      else setLive(state, 'connecting', 'the event stream was interrupted; reconnecting');
    });
    state.events = es;
  }, (e) => again(`the token function failed: ${e?.message ?? e}`));
}

/** Whether the worker runs `installSyncWorker` for database `name` (asked once per worker). */
const holders = new WeakMap();
function workerHolds(worker, name) {
  let byName = holders.get(worker);
  if (!byName) holders.set(worker, (byName = new Map()));
  if (!byName.has(name)) {
    byName.set(name, new Promise((resolve) => {
      const channel = new MessageChannel();
      const timer = setTimeout(() => resolve(false), 500);
      channel.port1.onmessage = (e) => {
        clearTimeout(timer);
        resolve(e.data?.holds === true);
      };
      worker.postMessage({ type: 'marksync:ping', name }, [channel.port2]);
    }));
  }
  return byName.get(name);
}

/**
 * A database as the app holds it: the module's database with the page's
 * side (requestSync, the live stream, persistence, events). A subclass, so
 * the module's own methods stay as they are and each addition is written once.
 */
class Database extends Native {
  /**
   * Asks for a sync. When a Service Worker that holds this database's queue
   * controls the page: a message to it (now) and, where the browser has it, a
   * Background Sync registration (which survives the page). Else a sync right
   * here in the page. Resolves with `{ via }` (and the report when the page
   * synced itself).
   */
  async requestSync() {
    const state = pageSide.get(this);
    const name = state?.name ?? 'marksync';
    const c = controller();
    if (c && (await workerHolds(c, name))) {
      // Now, by message; and, where the browser has Background Sync, also as a
      // registered sync that survives this page (the worker's cycles take turns
      // under the database's Web Lock, so a second one only finds less to do).
      // Not while the page knows it is offline: that try could only fail, its rows in doubt.
      if (navigator.onLine !== false) c.postMessage({ type: 'marksync:sync', name });
      try {
        const reg = await navigator.serviceWorker.ready;
        if (reg.sync) {
          await reg.sync.register(`marksync:${name}`);
          return { via: 'background-sync' };
        }
      } catch { /* the message is enough */ }
      return { via: 'worker' };
    }
    return { via: 'page', report: await this.sync() };
  }

  setToken(token) {
    super.setToken(token);
    const state = pageSide.get(this);
    if (state) {
      state.token = token;
      shareToken(state);
      // The stream was opened with the old token: open it with the new one.
      state.liveFailures = 0;
      openLive(this, state);
    }
  }

  /** The counters, plus `live` (the event stream: `off`, `connecting`, `open`, `closed`) and `liveError`. */
  metrics() {
    const m = super.metrics();
    const state = pageSide.get(this);
    m.live = state?.liveWanted ? state.live ?? 'connecting' : 'off';
    m.liveError = state?.liveWanted ? state.liveError ?? null : null;
    return m;
  }

  /** `{ persisted, usage, quota, persistence }`: `persistence` is the answer to the request for persistent storage (`prompting` until the person answers). */
  async storage() {
    const info = await super.storage();
    const state = pageSide.get(this);
    return { ...info, persistence: state?.persistence ?? 'not-asked' };
  }

  /** Database events: `storage` (the answer to the persistent-storage request arrived), `live`. */
  addEventListener(type, listener, options) {
    pageSide.get(this)?.target.addEventListener(type, listener, options);
  }

  removeEventListener(type, listener, options) {
    pageSide.get(this)?.target.removeEventListener(type, listener, options);
  }

  close() {
    const state = pageSide.get(this);
    if (state) {
      state.closed = true;
      state.cleanup.forEach((f) => f());
      clearTimeout(state.liveTimer);
      state.events?.close();
    }
    super.close();
  }
}

/** The marksync database class. `await Marksync.open({ endpoint, token, name })`. */
export const Marksync = {
  async open(options) {
    await load(options?.wasm);
    // Persistence is asked for here, never awaited (see askPersistence).
    const db = Object.setPrototypeOf(await Native.open(options), Database.prototype);
    attachPageSide(db, options ?? {});
    return db;
  },
};

export default Marksync;
