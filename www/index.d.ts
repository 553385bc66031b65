/** A field value: string, finite number, boolean or null. */
export type Value = string | number | boolean | null;

/** The fields of an edit: 1 to 64 entries; names `[A-Za-z][A-Za-z0-9_]{0,63}` (names starting with `_` are the protocol's: only `_deleted`). */
export type Fields = Record<string, Value>;

/**
 * A visible row: its fields, plus `_id`, its rowId, and `_space`, its space,
 * when it lives in a shared space (absent for the personal space's rows).
 */
export type Row = Readonly<{ _id: string; _space?: string } & Fields>;

/** One field's condition: all given operators must hold. A range keeps to its bound's kind (`{ lt: 10 }`: numbers only). */
export interface Condition {
  eq?: Value;
  in?: readonly Value[];
  gt?: Value;
  gte?: Value;
  lt?: Value;
  lte?: Value;
  /** A string starting with this. */
  prefix?: string;
}

/** A field to order by, ascending, or `[field, 'asc' | 'desc']`. Ties: rowId ascending, then space. */
export type OrderKey = string | readonly [string, ('asc' | 'desc')?];

/**
 * A query of one table. Values order as `null < false < true < numbers < strings` (strings by UTF-16 code units, as
 * JavaScript's `<`); a missing field reads as `null`.
 */
export interface Query {
  /** Field → value (equal) or conditions, all ANDed. */
  where?: Readonly<Record<string, Value | Condition>>;
  /** One key or several. */
  orderBy?: OrderKey | readonly OrderKey[];
  /** At most this many rows (a whole number ≥ 1). */
  limit?: number;
  /** Only rows strictly after this row (one this query returned): keyset pages. */
  after?: Row;
  /** Only rows of this space. */
  space?: string | null;
}

/** How a query is served: the index (its fields) or a scan (`index: null`). */
export interface Explain {
  index: string[] | null;
  /** How many of the index's leading fields are held to one value. */
  equal: number;
  /** The field held to a range after those, if any. */
  range: string | null;
  /** The index gives the query's order: the read stops at the limit. */
  ordered: boolean;
  /** In words. */
  plan: string;
}

/** A page of a list the server keeps: at most `limit` (1 to 1000) entries after the one named `after`. */
export interface ListPage {
  after?: string;
  limit?: number;
}

/** A pending invitation to a space, as its invitee sees it. */
export interface Invitation {
  space: string;
  /** The role accepting gives. */
  role: Role;
  /** The owner who invited. */
  from: string;
  /** When it lapses, in ms since the epoch. */
  expiresAt: number;
}

/** A pending invitation to a space, as the space's owners see it: who is invited. */
export interface SpaceInvitation extends Invitation {
  /** The invitee. */
  user: string;
}

/** A member's role in a space: owners manage members, editors write rows, viewers read. */
export type Role = 'owner' | 'editor' | 'viewer';

/** A space the user is a member of, as this device last learned it. */
export interface Space {
  /** The space's name; `null` for the personal space until the first sync names it (`~` and the user id). */
  space: string | null;
  role: Role;
  /** Whether this is the user's personal space, where rows go unless a space is named. */
  personal: boolean;
}

/** Which space a row is read from or written to: a space's name; absent or `null`: where the row lives, else the personal space. */
export interface SpaceOption {
  space?: string | null;
}

/** Where a row stands with the server. */
export type Phase = 'synced' | 'pending' | 'awaiting-ack' | 'unknown-outcome' | 'rejected' | 'recovery-required';

/**
 * The status is the same in every tab, in the Service Worker and after a
 * reload: attempts are recorded in IndexedDB before a request leaves.
 * `awaiting-ack`: some context has the request out; `unknown-outcome`: no
 * usable answer came (it will be resent, same opIds); `recovery-required`:
 * see `code` — `retries_exhausted` (retry() or reconcile()), `schema_too_new`
 * (the server is older than the app: probed every 5 minutes, heals alone),
 * `unauthorized` (setToken()), `refused` (a 400 or 405: probed every 5 minutes and at each open, heals once answered;
 * retry() at once), `storage` (the device's copy was cleared under the app and is being synced
 * again — heals alone, the queue kept; or its storage cannot be opened again — reload).
 */
export interface RowStatus {
  phase: Phase;
  /**
   * The server's reason (rejected), what blocks sync (recovery-required), or why no usable answer came (unknown-outcome,
   * or pending after a failed send: the server could not be reached — with the URL —, a 5xx in the server's words…).
   */
  reason: string | null;
  code: string | null;
  pendingOps: number;
  /** The most times a pending op of the row was sent. */
  attempts: number;
  /** When the next retry is due (ms since the epoch), if waiting. */
  nextRetryAt: number | null;
  /** Conflicts of the row not yet dismissed: edits of this device there that lost to concurrent ones (`db.conflicts()`). */
  conflicts: number;
}

/** One side of a conflict: a value of the field and the edit that set it. */
export interface ConflictSide {
  value: Value;
  at: number;
  opId: string;
  /** Who wrote it (`theirs` only): the member in a shared space, the owner in a personal one. */
  user?: string;
}

/**
 * An edit of this device that lost to a concurrent one — made by another device (of this user or another member)
 * that had not pulled it, while this device had not pulled that one (PROTOCOL §2a). Stored until dismissed.
 */
export interface Conflict {
  /** `<opId of the lost edit>/<field>`: the same in every tab, the Service Worker and after a reload. */
  id: string;
  table: string;
  rowId: string;
  /** The shared space of the row; absent: the personal space. */
  space?: string;
  field: string;
  /** What this device set, and lost. */
  mine: ConflictSide;
  /** What replaced it. */
  theirs: ConflictSide;
}

/** One sync cycle as it ran, kept with the sync state (the last 10, any context's). */
export interface CycleLog {
  startedAt: number;
  ms: number;
  /** Who ran it. */
  by: 'tab' | 'worker';
  /** The attemptKeys of its pushes. */
  attempts: string[];
  sent: number;
  applied: number;
  duplicate: number;
  rejected: number;
  /** The first 10 verdicts. */
  verdicts: { opId: string; status: 'applied' | 'duplicate' | 'rejected'; code?: string }[];
  staleIgnored: number;
  reconciled: number;
  pulled: number;
  outcome: 'done' | 'waiting' | 'blocked';
  error?: string;
}

/** `db.diagnostics()`. */
export interface Diagnostics {
  deviceId: string;
  user: string | null;
  outbox: { op: Op; phase: Phase; attempts: number; attemptKey: string | null; unknown: boolean; firstSentAt: number; lastSentAt: number }[];
  flight: { key: string; opIds: string[]; sentAt: number } | null;
  nextRetryAt: number | null;
  recovery: { code: string; message: string } | null;
  lastError: string | null;
  cycles: CycleLog[];
  rejections: Rejection[];
  conflicts: Conflict[];
  spaces: { space: string | null; personal: boolean; role: Role | null; cursor: number }[];
  schemaVersion: number | null;
}

export interface Op {
  opId: string;
  table: string;
  rowId: string;
  fields: Fields;
  at: number;
  schema: number;
  /** The shared space the op writes in; absent: the personal space. */
  space?: string;
  /** How far the device had pulled the op's space when it was made (what its author could know). */
  seen?: number;
}

export interface Rejection {
  op: Op;
  /** The server's reason, word for word. */
  reason: string;
  code: string;
  /** How many times the op was sent before the verdict came. */
  attempts: number;
  /** A later edit of this device set those fields again and was applied: the row's status no longer shows this refusal. */
  superseded: boolean;
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
  /** Ops settled by asking the server what it remembers (`reconcile()`, or when retries ran out). */
  reconciled: number;
  /** Ops the server was asked about and never judged. */
  unknown: number;
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
  /** Ops settled by asking the server what it remembers. */
  reconciled: number;
  recoveryRequired: number;
  pulls: number;
  /** Times this database was found cleared under the library and filled again from what a context held. */
  storageResets: number;
  pendingOps: number;
  cursor: number;
  /** What sync waits on (`retries_exhausted`, `unauthorized`, `schema_too_new`, `storage`, …), or null. */
  recovery: string | null;
  /** The words for it, fit to show a person. */
  recoveryReason: string | null;
  /** When the next attempt is due (ms since the epoch), if waiting. */
  nextRetryAt: number | null;
  /** Why this context's last request got no usable answer (e.g. the token function's own error), or null. */
  lastError: string | null;
  /** The server's event stream (live updates): `off`, `connecting`, `open`, or `closed` (refused; opened again with backoff). */
  live: 'off' | 'connecting' | 'open' | 'closed';
  /** Why the stream is not open, or null. */
  liveError: string | null;
}

/** When sends with no usable answer stop and the server is asked what it remembers. */
export interface RetryPolicy {
  /** Sends of one op with no usable answer. Default 10. */
  maxAttempts?: number;
  /** Time spent on one op in requests and backoff waits (not while offline or closed). Default 3600000 (1 h). */
  maxElapsedMs?: number;
}

export interface StorageInfo {
  /** The answer to the request for persistent storage; `prompting` while the browser waits on the person. */
  persistence: 'not-asked' | 'prompting' | 'granted' | 'denied' | 'unsupported';
  persisted?: boolean;
  usage?: number;
  quota?: number;
}

export type TokenSource = string | (() => string | Promise<string>);

export interface OpenOptions {
  /** The server's base URL, absolute (`https://sync.example.com`; for the page's own server, `location.origin`). */
  endpoint: string;
  /** A bearer token, or a function giving one (called again after a 401). */
  token?: TokenSource;
  /** The IndexedDB database name (one per app database, and per user). Default `"marksync"`. */
  name?: string;
  /**
   * The user the database belongs to. A database belongs to one user: without this it is bound to the user the server
   * names at the first sync; with it, a database of another user is refused at once (`wrong_user`). Either way, once
   * the server has said the token is another user's, it never sends the queue nor shows the rows, and edits reject
   * with `wrong_user`; without `user`, until that first answer the device cannot tell, and shows the owner's rows.
   */
  user?: string;
  /** Sync after each edit and retry with backoff on its own. Default true. */
  autoSync?: boolean;
  /** Per request timeout. Default 15000. */
  timeoutMs?: number;
  /** The app schema version written into new ops. Default 1. */
  schema?: number;
  /** Ask the browser for persistent storage (never waited for). Default true. */
  persist?: boolean;
  /** When to stop retrying alone. Default `{ maxAttempts: 10, maxElapsedMs: 3600000 }`. */
  retry?: RetryPolicy;
  /** Listen to the server's `/v1/events` pokes and pull at once (or, when the server asked for time with a `Retry-After`, once that wait is over). Default: `autoSync`. */
  live?: boolean;
  /** Where to load the wasm from (default: next to this module). */
  wasm?: string | URL;
  /** Indexes only this device needs, besides the server schema's: `{ sets: [['exercise', 'weightKg']] }`. */
  indexes?: Readonly<Record<string, readonly (readonly string[])[]>>;
  /**
   * Open lazily: read rows from IndexedDB only as they are asked for, never every row at open. For a device that holds
   * more rows than it shows (a few hundred thousand and up): the tab keeps what its queries read, under `cacheBytes`,
   * and opens in the same few milliseconds whatever it holds. Queries are served by the indexes (the server schema's and
   * `indexes`), whose entries the store then keeps on disk. The reads of rows — `query`, `count`, `rows`, `row`,
   * `status`, `check` — then answer Promises (see `LazyDatabase`); `watch` and the React hooks work alike. Default
   * `false`: every row is read at open and those reads answer at once.
   */
  lazy?: boolean;
  /**
   * The bound of the rows a lazily opened database keeps read between its
   * steps, in bytes (default 16 MiB). The Service Worker of `marksync/sw`
   * opens lazily: it reads only the rows its sync needs.
   */
  cacheBytes?: number;
}

/** Errors thrown by marksync carry a stable `code`. */
export interface MarksyncError extends Error {
  code:
    | 'bad_input' | 'storage_unavailable' | 'storage_failed' | 'storage_full' | 'recovery_required' | 'closed' | 'ids_exhausted'
    | 'clock_exhausted' | 'invalid' | 'read_only' | 'forbidden' | 'refused' | 'wrong_user' | 'load_failed';
  /** For `recovery_required`: `retries_exhausted`, `unauthorized`, `wrong_user`, `refused`, `storage`, `payload_too_large`. */
  recovery?: string;
  /** For `invalid`: the server's reason, word for word (also the error's message). */
  reason?: string;
  /** For `invalid`: the server's code (`out_of_range`, `missing_fields`, `unknown_field`, `row_too_large`…). */
  refusal?: string;
  /** For `invalid`: the field the refusal is about, when it is about one. */
  field?: string | null;
}

/** What the server would answer for a row after an edit, by its schema: its code, its reason word for word, the field. */
export interface Refusal {
  code: string;
  reason: string;
  field: string | null;
}

/** Options of `change()` and `changeMany()`. */
export interface ChangeOptions extends SpaceOption {
  /**
   * `false` records an edit even when the server's schema, as this device knows it, refuses it (the server stays the
   * judge: the edit comes back rejected). Default: checked, refused at once with code `invalid`, nothing recorded.
   */
  check?: boolean;
}

/** An open marksync database. */
export interface Database {
  /** This device's id (UUID v4, born at the first open of the database). */
  readonly deviceId: string;
  /** Whether it was opened with `lazy: true`: then it is a `LazyDatabase`, whose reads of rows answer Promises. */
  readonly lazy: boolean;
  /** The user this database belongs to (named at open, or learned at the first sync), or `null` before either. */
  readonly user: string | null;
  /**
   * A new rowId for an insert, unique on this device forever. Synchronous and never failing in normal use (ids come from a
   * reserved block of 2^20, refilled ahead of need); `ids_exhausted` at the end of the id space, or after more than
   * 2^20 calls with no await between them (the next block needs the event loop; after an await the calls go on).
   */
  newRowId(): string;
  /**
   * Records `table/rowId: fields`. Resolves with the opId once the op is in IndexedDB. Rejects with code `invalid` (with
   * `reason`, `refusal`, `field`), recording nothing, when the server's schema as this device knows it refuses the row
   * after the edit; before any schema is known, every well-formed edit is recorded.
   *
   * The space is `options.space`, else the one the row lives in, else the personal space. Rejects at once with code
   * `read_only` (the user is a viewer there) or `forbidden` (the user left it), the server's own words, recording nothing.
   * Rejects with `storage_full` when the browser's quota refuses the write: nothing of the edit is written.
   */
  change(table: string, rowId: string, fields: Fields, options?: ChangeOptions): Promise<string>;
  /**
   * Records many edits in one IndexedDB transaction, all or none (every edit is checked first). Resolves with the opIds, in
   * order; the array's `rowIds` are the edits' rowIds, in order. An edit with no `rowId` is a new row the device names in
   * that transaction (`<deviceId>-<n>`): a bulk import of a million rows needs no loop of `newRowId()`.
   */
  changeMany(
    edits: readonly { table: string; rowId?: string | null; fields: Fields; space?: string | null }[],
    options?: ChangeOptions,
  ): Promise<string[] & { rowIds: string[] }>;
  /**
   * What the server would answer for `table/rowId` after this edit, by the schema this device last fetched from it:
   * `null` (accepted, or no schema known yet) or the refusal in the server's words. Offline, synchronous, records nothing.
   */
  check(table: string, rowId: string, fields: Fields, options?: SpaceOption): Refusal | null;
  /** The server's schema as this device knows it (fetched after a pull names a version it does not have), or null. */
  schema(): { version: number; etag: string | null; schema: unknown } | null;
  /** Deletes a row (a tombstone). Resolves with the opId. */
  remove(table: string, rowId: string, options?: SpaceOption): Promise<string>;
  /** Restores a deleted row. Resolves with the opId. */
  restore(table: string, rowId: string, options?: SpaceOption): Promise<string>;
  /**
   * The visible rows a query asks for, frozen, in its order — returned at once (an array, not a Promise; `await` works).
   * Served by an index when one fits (see `explain`), else by a scan of the table. Throws `bad_input` for a bad query.
   */
  query(table: string, query?: Query): readonly Row[];
  /** How many visible rows of `table` match `where` (and `space`). */
  count(table: string, query?: Pick<Query, 'where' | 'space'>): number;
  /** Which index serves a query, or that a scan does. */
  explain(table: string, query?: Query): Explain;
  /**
   * A live query: `listener` gets the first result soon after the call, then a new result only when it changed (not on
   * every change of the database), across tabs, the Service Worker's syncs, pulls, refusals and revokes. Returns the
   * function that stops it.
   */
  watch(table: string, query: Query | undefined, listener: (rows: readonly Row[]) => void): () => void;
  /** Every visible row of a table — a full read of it — from every space (or `options.space` alone); the same frozen array until something changes. */
  rows(table: string, options?: SpaceOption): readonly Row[];
  /** One visible row, or null (absent or deleted). */
  row(table: string, rowId: string, options?: SpaceOption): Row | null;
  /**
   * The user's spaces, the personal one first, as of the last sync: a grant shows here (and its rows in `rows()`) once
   * a sync has backfilled it; after a revoke the space and its rows are gone, and edits still queued there come back
   * as rejections with code `forbidden` and their content.
   */
  spaces(): readonly Space[];
  /**
   * Creates a shared space owned by this user (online). Rejects with code `refused` (`refusal`: the server's code, e.g.
   * `conflict`). Here and in every membership call, a space or user name the server would refuse rejects with code
   * `bad_input` before any request.
   */
  createSpace(space: string): Promise<{ space: string; role: Role }>;
  /**
   * An owner gives a member of `space` another role, or removes them (`null`). A user who is not a member is invited
   * (`invited: true`): they join only by `accept()`ing. Rejects with code `refused` (`forbidden`, `conflict` — also a
   * cap reached, in the server's words).
   */
  setMember(space: string, user: string, role: Role | null): Promise<{ user: string; role: Role | null; invited?: true }>;
  /**
   * Who is a member of `space` (any member may ask), by user id: every member, read page after page; with
   * `{ after, limit }` (1 to 1000) that page only.
   */
  members(space: string, page?: ListPage): Promise<{ space: string; members: { user: string; role: Role }[] }>;
  /**
   * The user's pending invitations (online), by space: `from` the owner who invited, `expiresAt` when it lapses (ms
   * since the epoch). Nothing of an invited space is on the device until it is accepted. All of them; with
   * `{ after, limit }` that page only.
   */
  invitations(page?: ListPage): Promise<Invitation[]>;
  /**
   * The pending invitations to `space`, by invitee, for its owners (anyone else: `refused` with refusal `forbidden`):
   * who is invited, as what, by whom, until when. Withdraw one with `setMember(space, user, null)`. All of them; with
   * `{ after, limit }` that page only.
   */
  invited(space: string, page?: ListPage): Promise<SpaceInvitation[]>;
  /** Accepts the invitation to `space`; its rows arrive with the sync started now. None pending: `refused` (`not_found`). */
  accept(space: string): Promise<{ space: string; role: Role }>;
  /** Declines the invitation to `space` (none pending: resolves all the same). */
  decline(space: string): Promise<void>;
  /** Leaves `space`; the sync started now takes its rows off the device. The last owner cannot: `refused` (`conflict`). */
  leave(space: string): Promise<void>;
  /**
   * Calls `listener` once after every committed change of rows, queued ops, refusals, spaces or statuses (a sync that
   * changed nothing calls no one); returns the unsubscribe function (calling it again does nothing). A listener that
   * throws is reported as an event listener's error is (`reportError`: the global `error` event); the others are still
   * called. The same holds for `watch`.
   */
  subscribe(listener: () => void): () => void;
  /** Where the row stands now, or `null` for a row this device has never seen (no copy, nothing queued, no refusal). */
  status(table: string, rowId: string, options?: SpaceOption): RowStatus | null;
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
  /**
   * Asks the server what it remembers of every op sent at least once and
   * settles what it knows (applied → acknowledged, rejected → dropped with
   * its reason). Never pushes.
   */
  reconcile(): Promise<SyncReport>;
  /** A person confirmed: lifts a stop (`retries_exhausted`, …), starts the retry counts over and syncs now. */
  retry(): Promise<SyncReport>;
  /** Refused ops with the server's reasons, until dismissed. */
  rejections(): Rejection[];
  dismiss(opId: string): Promise<boolean>;
  /** The whole sync of this device as one snapshot (what `marksync/devtools` shows and exports). Never a token. */
  diagnostics(): Diagnostics;
  /** Edits of this device that lost to concurrent ones, oldest first, until dismissed (at most 256 kept). */
  conflicts(): Conflict[];
  /** Dismisses a conflict in every context; `false` if there was none not yet dismissed. */
  dismissConflict(id: string): Promise<boolean>;
  metrics(): Metrics;
  storage(): Promise<StorageInfo>;
  /** `storage`: the answer to the persistent-storage request arrived (`event.persistence`). */
  addEventListener(type: 'storage', listener: (event: PersistenceEvent) => void, options?: boolean | AddEventListenerOptions): void;
  /** `live`: the event stream changed state (`event.live`; `event.error`: why it is closed, or null). */
  addEventListener(type: 'live', listener: (event: LiveEvent) => void, options?: boolean | AddEventListenerOptions): void;
  removeEventListener(type: 'storage', listener: (event: PersistenceEvent) => void, options?: boolean | EventListenerOptions): void;
  removeEventListener(type: 'live', listener: (event: LiveEvent) => void, options?: boolean | EventListenerOptions): void;
  /** Replaces the token and resumes a sync blocked on auth. */
  setToken(token: TokenSource): void;
  close(): void;
}

/**
 * A database opened with `lazy: true`: the same, except that the reads of rows answer Promises, once what they need is
 * read from IndexedDB (a bad argument still throws at once, `bad_input`). `rows()` reads the table whole and keeps it.
 */
export interface LazyDatabase extends Omit<Database, 'lazy' | 'query' | 'count' | 'rows' | 'row' | 'status' | 'check'> {
  readonly lazy: true;
  query(table: string, query?: Query): Promise<readonly Row[]>;
  count(table: string, query?: Pick<Query, 'where' | 'space'>): Promise<number>;
  rows(table: string, options?: SpaceOption): Promise<readonly Row[]>;
  row(table: string, rowId: string, options?: SpaceOption): Promise<Row | null>;
  status(table: string, rowId: string, options?: SpaceOption): Promise<RowStatus | null>;
  check(table: string, rowId: string, fields: Fields, options?: SpaceOption): Promise<Refusal | null>;
}

export declare const Marksync: {
  open(options: OpenOptions & { lazy: true }): Promise<LazyDatabase>;
  open(options: OpenOptions): Promise<Database>;
};

/**
 * Loads the WebAssembly module early (optional; `wasm` counts on the first
 * call). A load that fails rejects with code `load_failed`; the next call tries again.
 */
export declare function load(wasm?: string | URL | BufferSource | WebAssembly.Module): Promise<unknown>;

/** The `storage` event of a {@link Database}: the answer to the persistent-storage request. */
export type PersistenceEvent = Event & { persistence: StorageInfo['persistence'] };

/** The `live` event of a {@link Database}: the event stream's state, and why it is closed. */
export type LiveEvent = Event & { live: 'off' | 'connecting' | 'open' | 'closed'; error: string | null };

export default Marksync;
