/** Options of the marksync Vite plugin. */
export interface MarksyncViteOptions {
  /** The app's Service Worker module, relative to Vite's root (e.g. `src/service-worker.ts`). */
  worker: string;
  /** Where it is served, at the root of the scope. Default `service-worker.js`. */
  fileName?: string;
}
/** Serves the app's worker at `/service-worker.js` in `vite dev` and emits it there in `vite build`. */
export default function marksync(options: MarksyncViteOptions): {
  name: string;
  configResolved(config: { root: string; command: 'build' | 'serve' }): void;
  buildStart(this: { emitFile(file: { type: 'chunk'; id: string; fileName: string }): string }): void;
  configureServer(server: unknown): void;
};
