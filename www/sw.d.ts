import type { TokenSource } from './index';
export interface SyncWorkerOptions {
  /** The server's base URL (e.g. `self.location.origin`). */
  endpoint: string;
  /** The database name the pages open. Default `"marksync"`. */
  name?: string;
  /** A token, or a function giving one. Default: the token the pages send. */
  token?: TokenSource;
}
/**
 * What the worker takes of its global scope. A `ServiceWorkerGlobalScope` is one, and so is `self` as either lib types
 * it (`WebWorker` or `DOM`): a worker compiled with the app's own tsconfig needs no `declare const self`.
 */
export interface SyncWorkerScope {
  addEventListener(type: string, listener: (event: any) => void): void;
  readonly registration?: unknown;
  readonly clients?: unknown;
}
/** Makes this Service Worker hold the queue: it syncs on Background Sync, on page messages and when online. */
export declare function installSyncWorker(scope: SyncWorkerScope, options: SyncWorkerOptions): void;
