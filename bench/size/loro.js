// Workload 5: what an app's build ships for Loro (the same entry as the harness).
export * from 'loro-crdt/web';
export { default } from 'loro-crdt/web';
