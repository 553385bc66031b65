// Workload 5: what an app's build ships for marksync (the whole public API).
export * from '../../www/index.js';
