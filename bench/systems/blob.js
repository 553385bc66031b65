// One IndexedDB database per CRDT system for workload 4: its snapshot as one value.
export function idbOpen(name, upgrade) {
  return new Promise((resolve, reject) => {
    const r = indexedDB.open(name, 1);
    r.onupgradeneeded = () => upgrade(r.result);
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

export function done(tx) {
  return new Promise((resolve, reject) => {
    tx.oncomplete = () => resolve();
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error ?? new Error('transaction aborted'));
  });
}

const upgrade = (db) => db.createObjectStore('snapshots');

export async function seedBlob(name, bytes) {
  const db = await idbOpen(name, upgrade);
  const tx = db.transaction('snapshots', 'readwrite');
  tx.objectStore('snapshots').put(bytes, 'doc');
  await done(tx);
  db.close();
  return bytes.byteLength;
}

export async function readBlob(name) {
  const db = await idbOpen(name, upgrade);
  const tx = db.transaction('snapshots', 'readonly');
  const r = tx.objectStore('snapshots').get('doc');
  await done(tx);
  db.close();
  if (!(r.result instanceof Uint8Array)) throw new Error(`no snapshot in ${name}`);
  return r.result;
}
