// The app's worker: marksync holds the queue.
import { installSyncWorker } from 'marksync/sw';

installSyncWorker(self, { endpoint: self.location.origin, name: 'vite-app' });
self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (e) => e.waitUntil(self.clients.claim()));
