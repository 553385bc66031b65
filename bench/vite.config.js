// The harness page: `npx vite build` (run.mjs does it) → bench/dist.
import { defineConfig } from 'vite';
import { fileURLToPath } from 'node:url';
import { dirname, resolve } from 'node:path';

const here = dirname(fileURLToPath(import.meta.url));

export default defineConfig({
  root: here,
  base: './',
  logLevel: 'warn',
  server: { fs: { allow: [resolve(here, '..')] } },
  build: {
    outDir: resolve(here, 'dist'),
    emptyOutDir: true,
    target: 'es2022',
    // Every wasm stays a file of its own, fetched and compiled as it streams.
    assetsInlineLimit: (file) => (file.endsWith('.wasm') ? false : undefined),
    chunkSizeWarningLimit: 5000,
  },
});
