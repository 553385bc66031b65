import type { TokenSource } from './index';
export interface SyncWorkerOptions {
  /** The server's base URL (e.g. `self.location.origin`). */
  endpoint: string;
  /** The database name the pages open. Default `"marksync"`. */
  name?: string;
  /** A token, or a function giving one. Default: the token the pages send. */
  token?: TokenSource;
}
/** Makes this Service Worker hold the queue: it syncs on Background Sync, on page messages and when online. */
export declare function installSyncWorker(scope: ServiceWorkerGlobalScope, options: SyncWorkerOptions): void;
