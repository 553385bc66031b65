import { useCallback, useRef, useSyncExternalStore } from 'react';

/** A snapshot of `read()` that keeps its identity while its JSON is unchanged. */
export function useDbValue(db, read) {
  const last = useRef({ key: undefined, value: undefined });
  const subscribe = useCallback((cb) => db.subscribe(cb), [db]);
  return useSyncExternalStore(subscribe, () => {
    const value = read();
    const key = JSON.stringify(value);
    if (key !== last.current.key) last.current = { key, value };
    return last.current.value;
  });
}

export const useRejections = (db) => useDbValue(db, () => db.rejections());
export const useMetrics = (db) => useDbValue(db, () => db.metrics());

function subscribeOnline(cb) {
  window.addEventListener('online', cb);
  window.addEventListener('offline', cb);
  return () => {
    window.removeEventListener('online', cb);
    window.removeEventListener('offline', cb);
  };
}

/** navigator.onLine, live. */
export const useOnline = () => useSyncExternalStore(subscribeOnline, () => navigator.onLine);
