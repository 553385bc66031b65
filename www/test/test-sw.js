// The Service Worker of the end-to-end tests: marksync holds the queue.
import { installSyncWorker } from '/sw.js';

installSyncWorker(self, { endpoint: self.location.origin, name: 'e2e-sw' });
self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (e) => e.waitUntil(self.clients.claim()));
