// The harness page: `npx vite build` (run.mjs does it) → bench/dist.
import { defineConfig } from 'vite';
import { fileURLToPath } from 'node:url';
import { dirname, join, resolve } from 'node:path';
import { existsSync } from 'node:fs';

const here = dirname(fileURLToPath(import.meta.url));
const www = resolve(here, '..', 'www');
const published = join(www, 'pkg', 'marksync.js');
const withExports = join(www, 'pkg-bench', 'marksync.js');

/**
 * The page uses www/pkg-bench (the same module + the hidden __BenchDoc and
 * __seedDatabase exports, `scripts/build-www.sh --pkg-only --bench-exports`)
 * wherever www/pkg is imported, www/index.js included: one wasm instance per page.
 */
function benchExports() {
  return {
    name: 'marksync-bench-exports',
    enforce: 'pre',
    resolveId(source, importer) {
      if (!importer || !source.endsWith('pkg/marksync.js')) return null;
      const abs = resolve(dirname(importer.split('?')[0]), source);
      return abs === published && existsSync(withExports) ? withExports : null;
    },
  };
}

export default defineConfig({
  root: here,
  base: './',
  logLevel: 'warn',
  plugins: [benchExports()],
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
