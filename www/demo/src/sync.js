// "Sync now". marksync's db.requestSync() hands the work to the Service Worker
// when one holds this database's queue (Background Sync or a message), and
// syncs in the page otherwise.

/**
 * Runs or requests a sync. Resolves with the cycle's report when the page
 * synced, or null when the worker took it (statuses follow as it commits).
 */
export async function syncNow(db) {
  const answer = await db.requestSync();
  return answer?.report ?? null;
}
