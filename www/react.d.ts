import type { Database, Row, RowStatus } from './index';
/** The visible rows of `table`, re-rendering when they change. */
export declare function useRows(db: Database, table: string): readonly Row[];
/** The sync status of one row, re-rendering when it changes. */
export declare function useRowStatus(db: Database, table: string, rowId: string): RowStatus;
