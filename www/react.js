// React bindings: `useQuery(db, table, query)`, `useRows(db, table,
// options)`, `useRowStatus(db, table, rowId, options)`, `useSpaces(db)` and
// `useConflicts(db)`,
// on useSyncExternalStore. `options.space` names a space (PROTOCOL §4b).
import { useCallback, useMemo, useRef, useSyncExternalStore } from 'react';

/**
 * A live query (`db.watch`): the rows `query` answers, re-rendering only
 * when they change — not on every change of the database. `undefined` until
 * the first result is in. The query is compared by its JSON, so an object
 * literal written in the render is fine.
 */
export function useQuery(db, table, query) {
  const key = JSON.stringify(query ?? null);
  const live = useMemo(() => {
    const q = query;
    const state = { rows: undefined };
    return {
      subscribe: (cb) => db.watch(table, q, (rows) => {
        state.rows = rows;
        cb();
      }),
      read: () => state.rows,
    };
    // The query's identity changes every render; its JSON says when it is another.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [db, table, key]);
  return useSyncExternalStore(live.subscribe, live.read);
}

const NONE = Object.freeze([]);

/**
 * The visible rows of `table` (of every space, or of `options.space`), in
 * rowId order: `useQuery` of every row. Until its first result, a full read
 * — or, over a database opened lazily (whose reads are Promises), no rows.
 */
export function useRows(db, table, options) {
  const space = options?.space;
  const rows = useQuery(db, table, space == null ? undefined : { space });
  if (rows) return rows;
  return db.lazy ? NONE : db.rows(table, { space });
}

/**
 * `read()`, re-read after every change of the database, as one snapshot
 * until its JSON changes (the values are built fresh on each read). With
 * `promised` (a read of rows over a database opened lazily) `read()`
 * answers a Promise: each change reads again, and the render shows the last
 * answer (`null` until the first).
 */
function useStable(db, read, deps, promised = false) {
  // What is read, by its JSON: an answer is shown only for what it was read for.
  const of = JSON.stringify(deps);
  const last = useRef({ of, key: 'null', value: null });
  const take = (value, what) => {
    const key = JSON.stringify(value);
    if (key === last.current.key && what === last.current.of) return false;
    last.current = { of: what, key, value };
    return true;
  };
  const subscribe = useCallback((cb) => {
    if (!promised) return db.subscribe(cb);
    if (take(null, of)) cb();
    let live = true;
    const again = () => new Promise((resolve) => resolve(read())).then((v) => live && take(v, of) && cb(), () => {});
    again();
    const off = db.subscribe(again);
    return () => {
      live = false;
      off();
    };
    // `deps` name what `read` reads.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [db, promised, of]);
  return useSyncExternalStore(subscribe, () => {
    if (!promised) take(read(), of);
    // Never the answer for what was read before (another row): the render
    // that asks for another row comes before its subscription.
    return last.current.of === of ? last.current.value : null;
  });
}

/** The sync status of one row, re-rendering when it changes. */
export function useRowStatus(db, table, rowId, options) {
  const space = options?.space;
  return useStable(db, () => db.status(table, rowId, { space }), [table, rowId, space], db.lazy);
}

/** The user's spaces (`db.spaces()`), re-rendering when a sync learns a grant, a role change or a revoke. */
export function useSpaces(db) {
  return useStable(db, () => db.spaces(), []);
}

/** The conflicts not yet dismissed (`db.conflicts()`), re-rendering when one is found or dismissed, in any context. */
export function useConflicts(db) {
  return useStable(db, () => db.conflicts(), []);
}
