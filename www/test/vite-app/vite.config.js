// The newcomer's Vite config: one plugin ships the worker. (`marksync` is
// aliased to this checkout; an app gets it from node_modules.)
import { defineConfig } from 'vite';
import { fileURLToPath } from 'node:url';
import { dirname, resolve } from 'node:path';
import marksync from '../../vite.js';

const here = dirname(fileURLToPath(import.meta.url));

export default defineConfig({
  root: here,
  base: process.env.MARKSYNC_VITE_BASE || '/',
  logLevel: 'warn',
  resolve: { alias: { marksync: resolve(here, '../..') } },
  build: { outDir: process.env.MARKSYNC_VITE_OUT || resolve(here, 'dist'), emptyOutDir: true },
  plugins: [marksync({ worker: 'service-worker.js', fileName: process.env.MARKSYNC_VITE_SW || 'service-worker.js' })],
});
