// React bindings: `useRows(db, table, options)`, `useRowStatus(db, table,
// rowId, options)` and `useSpaces(db)`, on useSyncExternalStore (db.rows() is
// a stable snapshot). `options.space` names a space (PROTOCOL §4b).
import { useCallback, useRef, useSyncExternalStore } from 'react';

/** The visible rows of `table` (of every space, or of `options.space`), re-rendering when they change. */
export function useRows(db, table, options) {
  const subscribe = useCallback((cb) => db.subscribe(cb), [db]);
  const space = options?.space;
  return useSyncExternalStore(subscribe, () => db.rows(table, { space }));
}

/**
 * `read()`, re-read after every change of the database, as one snapshot
 * until its JSON changes (the values are built fresh on each read).
 */
function useStable(db, read) {
  const last = useRef({ key: '', value: null });
  const subscribe = useCallback((cb) => db.subscribe(cb), [db]);
  return useSyncExternalStore(subscribe, () => {
    const value = read();
    const key = JSON.stringify(value);
    if (key !== last.current.key) last.current = { key, value };
    return last.current.value;
  });
}

/** The sync status of one row, re-rendering when it changes. */
export function useRowStatus(db, table, rowId, options) {
  const space = options?.space;
  return useStable(db, () => db.status(table, rowId, { space }));
}

/** The user's spaces (`db.spaces()`), re-rendering when a sync learns a grant, a role change or a revoke. */
export function useSpaces(db) {
  return useStable(db, () => db.spaces());
}
