// The workout diary's service worker (a module worker, registered by the page
// as /service-worker.js). Its own job is the app shell: after the first visit
// the diary opens without a network. Sync is marksync's job (see the marked
// section at the end); this file never touches sync traffic (/v1/*).
//
// The build (demo/vite.config.js) fills in VERSION and PRECACHE; the copy in
// demo/ is the template.

import { installSyncWorker } from './marksync/sw.js';

const VERSION = /*__VERSION__*/ 'dev';
const PRECACHE = /*__PRECACHE__*/ [];

const PREFIX = 'workout-shell-';
const CACHE = PREFIX + VERSION;
const SHELL = '/index.html';
/** How long a navigation waits for the network before the cached shell is shown. */
const NAVIGATION_TIMEOUT_MS = 4000;

self.addEventListener('install', (event) => {
  event.waitUntil((async () => {
    const cache = await caches.open(CACHE);
    // One by one: a file that fails now is cached on its first fetch instead.
    await Promise.all([SHELL, ...PRECACHE.filter((p) => p !== SHELL)].map(async (path) => {
      try {
        const res = await fetch(new Request(path, { cache: 'reload' }));
        if (res.ok) await cache.put(path, res);
      } catch { /* offline while installing: cached on first fetch */ }
    }));
    await self.skipWaiting();
  })());
});

self.addEventListener('activate', (event) => {
  event.waitUntil((async () => {
    for (const name of await caches.keys()) {
      if (name.startsWith(PREFIX) && name !== CACHE) await caches.delete(name);
    }
    await self.clients.claim();
  })());
});

self.addEventListener('fetch', (event) => {
  const req = event.request;
  if (req.method !== 'GET') return;
  const url = new URL(req.url);
  if (url.origin !== self.location.origin) return;
  // Sync traffic is never cached nor answered from a cache.
  if (url.pathname.startsWith('/v1/')) return;
  if (req.mode === 'navigate') {
    event.respondWith(navigation(event));
  } else if (url.pathname.startsWith('/assets/')) {
    event.respondWith(cacheFirst(req)); // hashed names: a name's content never changes
  } else if (PRECACHE.includes(url.pathname)) {
    event.respondWith(networkFirst(req, url.pathname));
  }
});

/** Network first (the server answers every app route with index.html); the cached shell when offline or slow. */
async function navigation(event) {
  const cache = await caches.open(CACHE);
  const network = fetch(event.request).then(async (res) => {
    const html = (res.headers.get('content-type') || '').includes('text/html');
    if (res.ok && html) await cache.put(SHELL, res.clone());
    return res;
  });
  event.waitUntil(network.catch(() => {}));
  const slow = new Promise((resolve) => setTimeout(resolve, NAVIGATION_TIMEOUT_MS, 'slow'));
  try {
    const first = await Promise.race([network, slow]);
    if (first !== 'slow') return first;
    return (await cache.match(SHELL)) || (await network);
  } catch {
    return (await cache.match(SHELL)) || offlinePage();
  }
}

async function cacheFirst(req) {
  const cache = await caches.open(CACHE);
  const hit = await cache.match(req);
  if (hit) return hit;
  const res = await fetch(req);
  if (res.ok) await cache.put(req, res.clone());
  return res;
}

async function networkFirst(req, key) {
  const cache = await caches.open(CACHE);
  try {
    const res = await fetch(req);
    if (res.ok) await cache.put(key, res.clone());
    return res;
  } catch (e) {
    const hit = await cache.match(key);
    if (hit) return hit;
    throw e;
  }
}

function offlinePage() {
  return new Response(
    '<!doctype html><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
      + '<title>Workout diary</title><p style="font:16px system-ui,sans-serif;padding:24px">'
      + 'You are offline and the diary has not been opened on this device yet. Connect once, then it works offline.</p>',
    { status: 503, headers: { 'content-type': 'text/html; charset=utf-8' } },
  );
}

// ---- marksync sync worker ---------------------------------------------------
// The queue lives here too: marksync pushes and pulls on Background Sync, on
// the pages' messages and when the network returns. The database is per user
// ('workout-' + user); the page registers this worker as
// /service-worker.js?user=<user> so the worker knows which one to hold. The
// token reaches the worker from the pages (marksync posts it).
const user = new URL(self.location.href).searchParams.get('user') || 'demo';
installSyncWorker(self, { endpoint: self.location.origin, name: 'workout-' + user });
