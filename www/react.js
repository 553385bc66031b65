// React bindings: `useRows(db, table)` and `useRowStatus(db, table, rowId)`,
// both on useSyncExternalStore (db.rows() is a stable snapshot).
import { useCallback, useRef, useSyncExternalStore } from 'react';

/** The visible rows of `table`, re-rendering when they change. */
export function useRows(db, table) {
  const subscribe = useCallback((cb) => db.subscribe(cb), [db]);
  return useSyncExternalStore(subscribe, () => db.rows(table));
}

/** The sync status of one row, re-rendering when it changes. */
export function useRowStatus(db, table, rowId) {
  const last = useRef({ key: '', value: null });
  const subscribe = useCallback((cb) => db.subscribe(cb), [db]);
  const snapshot = () => {
    const value = db.status(table, rowId);
    const key = JSON.stringify(value);
    if (key !== last.current.key) last.current = { key, value };
    return last.current.value;
  };
  return useSyncExternalStore(subscribe, snapshot);
}
