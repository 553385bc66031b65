// Workload 5: what an app's build ships for Automerge (the same entry as the harness).
export * from '@automerge/automerge/slim';
export { default as wasmUrl } from '@automerge/automerge/automerge.wasm?url';
