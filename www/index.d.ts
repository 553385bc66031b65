/** A field value: string, finite number, boolean or null. */
export type Value = string | number | boolean | null;

/** The fields of an edit: 1 to 64 entries; names `[A-Za-z][A-Za-z0-9_]{0,63}`. */
export type Fields = Record<string, Value>;

/** A visible row: its fields, plus `_id`, its rowId. */
export type Row = Readonly<{ _id: string } & Fields>;

/** Where a row stands with the server. */
export type Phase = 'synced' | 'pending' | 'awaiting-ack' | 'unknown-outcome' | 'rejected' | 'recovery-required';

export interface RowStatus {
  phase: Phase;
  /** The server's reason (rejected) or what blocks sync (recovery-required). */
  reason: string | null;
  code: string | null;
  pendingOps: number;
  /** The most times a pending op of the row was sent. */
  attempts: number;
  /** When the next retry is due (ms since the epoch), if waiting. */
  nextRetryAt: number | null;
}

export interface Op {
  opId: string;
  table: string;
  rowId: string;
  fields: Fields;
  at: number;
  schema: number;
}

export interface Rejection {
  op: Op;
  reason: string;
  code: string;
}

export interface SyncReport {
  /** True when the cycle pushed everything and pulled to the server's head. */
  ok: boolean;
  pushed: number;
  applied: number;
  duplicate: number;
  rejected: number;
  pulled: number;
  cursor: number;
  ignoredStaleAcks: number;
  /** Set when the cycle stopped on a failure and a retry is scheduled. */
  retryAt: number | null;
  error: string | null;
}

export interface Metrics {
  attempts: number;
  unknownOutcomes: number;
  staleAcksIgnored: number;
  applied: number;
  duplicates: number;
  rejected: number;
  recoveryRequired: number;
  pulls: number;
  pendingOps: number;
  cursor: number;
  /** What sync is blocked on (`unauthorized`, `schema_too_new`, `storage`, …), or null. */
  recovery: string | null;
}

export interface StorageInfo {
  persisted?: boolean;
  usage?: number;
  quota?: number;
}

export type TokenSource = string | (() => string | Promise<string>);

export interface OpenOptions {
  /** The server's base URL, e.g. `https://sync.example.com` or `''` for same origin. */
  endpoint: string;
  /** A bearer token, or a function giving one (called again after a 401). */
  token?: TokenSource;
  /** The IndexedDB database name (one per app database). Default `"marksync"`. */
  name?: string;
  /** Sync after each edit and retry with backoff on its own. Default true. */
  autoSync?: boolean;
  /** Per request timeout. Default 15000. */
  timeoutMs?: number;
  /** The app schema version written into new ops. Default 1. */
  schema?: number;
  /** Ask the browser for persistent storage. Default true. */
  persist?: boolean;
  /** Listen to the server's `/v1/events` pokes and pull at once. Default: `autoSync`. */
  live?: boolean;
  /** Where to load the wasm from (default: next to this module). */
  wasm?: string | URL;
}

/** Errors thrown by marksync carry a stable `code`. */
export interface MarksyncError extends Error {
  code: 'bad_input' | 'storage_unavailable' | 'storage_failed' | 'recovery_required' | 'closed' | 'ids_exhausted';
  /** For `recovery_required`: `unauthorized`, `schema_too_new`, `refused`, `storage`, `payload_too_large`. */
  recovery?: string;
}

/** An open marksync database. */
export interface Database {
  /** This device's id (UUID v4, born at the first open of the database). */
  readonly deviceId: string;
  /** A new rowId for an insert, unique on this device forever. */
  newRowId(): string;
  /** Records `table/rowId: fields`. Resolves with the opId once the op is in IndexedDB. */
  change(table: string, rowId: string, fields: Fields): Promise<string>;
  /**
   * Records many edits in one IndexedDB transaction, all or none (every edit is checked first). Resolves with the opIds, in order.
   * For many new rows at once, name them yourself (any unique rowId): `newRowId()` hands out a reserved block of ids and
   * throws `ids_exhausted` when called many times without an await.
   */
  changeMany(edits: readonly { table: string; rowId: string; fields: Fields }[]): Promise<string[]>;
  /** Deletes a row (a tombstone). Resolves with the opId. */
  remove(table: string, rowId: string): Promise<string>;
  /** Restores a deleted row. Resolves with the opId. */
  restore(table: string, rowId: string): Promise<string>;
  /** The visible rows of a table; the same frozen array until something changes. */
  rows(table: string): readonly Row[];
  /** One visible row, or null (absent or deleted). */
  row(table: string, rowId: string): Row | null;
  /** Calls `listener` after every change of rows or statuses; returns the unsubscribe function. */
  subscribe(listener: () => void): () => void;
  status(table: string, rowId: string): RowStatus;
  /** The pending ops, in the order they will be sent. */
  pending(): Op[];
  /**
   * Asks for a sync: when a Service Worker holds this database's queue, a
   * message to it plus a Background Sync registration where available; else
   * a sync in the page.
   */
  requestSync(): Promise<{ via: 'background-sync' | 'worker' | 'page'; report?: SyncReport }>;
  /** Runs a sync cycle now. Rejects with code `recovery_required` when sync cannot go on alone. */
  sync(): Promise<SyncReport>;
  /** Refused ops with the server's reasons, until dismissed. */
  rejections(): Rejection[];
  dismiss(opId: string): Promise<boolean>;
  metrics(): Metrics;
  storage(): Promise<StorageInfo>;
  /** Replaces the token and resumes a sync blocked on auth. */
  setToken(token: TokenSource): void;
  close(): void;
}

export declare const Marksync: {
  open(options: OpenOptions): Promise<Database>;
};

/** Loads the WebAssembly module early (optional). */
export declare function load(wasm?: string | URL | BufferSource | WebAssembly.Module): Promise<unknown>;

export default Marksync;
