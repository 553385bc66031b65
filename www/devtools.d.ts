import type { Database, Diagnostics, LazyDatabase, StorageInfo } from './index';

/** `db.diagnostics()` with the metrics, storage persistence and usage, and when and where it was taken: one bug report. Never a token. */
export interface DiagnosticsExport extends Diagnostics {
  kind: 'marksync-diagnostics';
  version: 1;
  exportedAt: string;
  userAgent: string | null;
  metrics: ReturnType<Database['metrics']>;
  storage: StorageInfo | { error: string } | null;
}

export interface MountedInspector {
  /** Renders again now (it renders on every change of the database on its own). */
  refresh(): void;
  /** Saves the diagnostics as a JSON file (a download) and resolves with them. */
  exportDiagnostics(): Promise<DiagnosticsExport>;
  unmount(): void;
}

/** Shows the sync of `db` in `element`, live: outbox, cycles, rejections, conflicts, spaces, schema, storage, metrics; Sync, Reconcile, Retry, Export diagnostics. */
export declare function mountInspector(db: Database | LazyDatabase, element: HTMLElement): MountedInspector;
/** Everything a bug report needs, as one object. */
export declare function diagnostics(db: Database | LazyDatabase): Promise<DiagnosticsExport>;
/** Saves `diagnostics(db)` as a JSON file. */
export declare function exportDiagnostics(db: Database | LazyDatabase): Promise<DiagnosticsExport>;
/** `<marksync-inspector>`: set its `db` property. */
export declare class MarksyncInspector extends HTMLElement {
  db: Database | LazyDatabase | undefined;
}
declare global {
  interface HTMLElementTagNameMap {
    'marksync-inspector': MarksyncInspector;
  }
}
