// Workload 5: what an app's build ships for Yjs.
export * from 'yjs';
