// Workload 5: what an app's build ships for Dexie.
export { default } from 'dexie';
export * from 'dexie';
