import type { Conflict, Database, LazyDatabase, Query, Row, RowStatus, Space, SpaceOption } from './index';
/** A live query (`db.watch`): its rows, re-rendering only when they change; `undefined` until the first result is in. */
export declare function useQuery(db: Database | LazyDatabase, table: string, query?: Query): readonly Row[] | undefined;
/** The visible rows of `table` (of every space, or of `options.space`), re-rendering when they change. */
export declare function useRows(db: Database | LazyDatabase, table: string, options?: SpaceOption): readonly Row[];
/** The sync status of one row, re-rendering when it changes. */
export declare function useRowStatus(db: Database | LazyDatabase, table: string, rowId: string, options?: SpaceOption): RowStatus | null;
/** The user's spaces, re-rendering when a sync learns a grant, a role change or a revoke. */
export declare function useSpaces(db: Database | LazyDatabase): readonly Space[];
/** The conflicts not yet dismissed (`db.conflicts()`), re-rendering when one is found or dismissed, in any context. */
export declare function useConflicts(db: Database | LazyDatabase): readonly Conflict[];
