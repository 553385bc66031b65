// The README's worker as an app writes it, compiled with the WebWorker lib.
import { installSyncWorker } from 'marksync/sw';

installSyncWorker(self, { endpoint: self.location.origin, name: 'diary' });
