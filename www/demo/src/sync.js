// "Sync now". marksync's db.requestSync() hands the work to the Service Worker
// when one controls the page. This app's worker caches the app shell and
// runs marksync's sync worker only once that is wired in service-worker.js,
// so the page asks the worker first and syncs itself when the worker does not.

/** True when `worker` says it runs marksync's sync worker (asked once per worker). */
const asked = new WeakMap();
function workerSyncs(worker) {
  if (!asked.has(worker)) {
    asked.set(worker, new Promise((resolve) => {
      const channel = new MessageChannel();
      const timer = setTimeout(() => resolve(false), 1000);
      channel.port1.onmessage = (e) => {
        clearTimeout(timer);
        resolve(e.data?.syncWorker === true);
      };
      worker.postMessage({ type: 'workout:capabilities' }, [channel.port2]);
    }));
  }
  return asked.get(worker);
}

/**
 * Runs or requests a sync. Resolves with the cycle's report when the page
 * synced, or null when the worker took it (statuses follow as it commits).
 */
export async function syncNow(db) {
  if (!db.requestSync) return db.sync();
  const worker = navigator.serviceWorker?.controller;
  if (worker && !(await workerSyncs(worker))) return db.sync();
  const answer = await db.requestSync();
  return answer?.report ?? (answer && 'ok' in answer ? answer : null);
}
