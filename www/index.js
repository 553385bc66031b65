// marksync — offline-first sync for web apps. The JS glue: it loads the
// WebAssembly module once and re-exports it. Every rule (ids, merge, outbox,
// verdicts, retries) lives in the Rust core compiled to that module.
import init, { Marksync as Native } from './pkg/marksync.js';

let ready;

/**
 * Loads the WebAssembly module (once). `open()` calls it for you; call it
 * yourself to start the download early, or to pass the module's URL or bytes.
 * @param {string | URL | Request | BufferSource | WebAssembly.Module} [wasm]
 */
export function load(wasm) {
  ready ??= init(wasm === undefined ? undefined : { module_or_path: wasm });
  return ready;
}

/** The marksync database class. `await Marksync.open({ endpoint, token, name })`. */
export const Marksync = {
  /** @param {import('./index').OpenOptions} options */
  async open(options) {
    await load(options?.wasm);
    return Native.open(options);
  },
};

export default Marksync;
