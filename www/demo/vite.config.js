// The demo app: a workout diary on marksync. Build from www/:
//   npx vite build --config demo/vite.config.js     → www/dist (served by marksync-server --static www/dist)
//   npx vite --config demo/vite.config.js           → dev server (no service worker; /v1 goes to MARKSYNC_URL)
import { defineConfig } from 'vite';
import react from '@vitejs/plugin-react';
import { fileURLToPath } from 'node:url';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { brotliCompressSync, constants, gzipSync } from 'node:zlib';

const demo = dirname(fileURLToPath(import.meta.url));
const www = resolve(demo, '..');
const outDir = join(www, 'dist');

/** Every file under `dir`, as paths relative to it with `/` separators. */
function walk(dir, base = dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    return e.isDirectory() ? walk(p, base) : [relative(base, p).split(sep).join('/')];
  });
}

/**
 * After the bundle is written:
 * 1. copies the package (index.js, sw.js when it exists, pkg/) to dist/marksync/,
 *    where the service worker can import it;
 * 2. writes dist/service-worker.js from demo/service-worker.js with the list of
 *    files to precache and a version derived from their contents (a new build
 *    makes a new worker, which drops the old cache);
 * 3. writes a brotli (`.br`) and a gzip (`.gz`) sibling of every text and wasm
 *    file, at the best ratio, which `marksync-server --static` sends to a
 *    browser that accepts them (nothing is compressed per request).
 */
function demoFiles() {
  return {
    name: 'marksync-demo-files',
    apply: 'build',
    closeBundle() {
      const lib = join(outDir, 'marksync');
      rmSync(lib, { recursive: true, force: true });
      mkdirSync(join(lib, 'pkg'), { recursive: true });
      cpSync(join(www, 'index.js'), join(lib, 'index.js'));
      if (existsSync(join(www, 'sw.js'))) cpSync(join(www, 'sw.js'), join(lib, 'sw.js'));
      for (const f of readdirSync(join(www, 'pkg'))) {
        if (f.endsWith('.js') || f.endsWith('.wasm')) cpSync(join(www, 'pkg', f), join(lib, 'pkg', f));
      }
      // wasm-bindgen's inline JS (Web Locks, Background Sync) lives in pkg/snippets/
      // unless the build minified the glue, which takes it in.
      if (existsSync(join(www, 'pkg', 'snippets'))) cpSync(join(www, 'pkg', 'snippets'), join(lib, 'pkg', 'snippets'), { recursive: true });

      const shell = walk(outDir)
        .filter((f) => f !== 'service-worker.js' && !f.startsWith('marksync/') && !PRECOMPRESSED.test(f))
        .sort();
      const hash = createHash('sha256');
      for (const f of shell) hash.update(f).update(readFileSync(join(outDir, f)));
      const version = hash.digest('hex').slice(0, 12);
      const source = readFileSync(join(demo, 'service-worker.js'), 'utf8');
      const out = source
        .replace("/*__VERSION__*/ 'dev'", JSON.stringify(version))
        .replace('/*__PRECACHE__*/ []', JSON.stringify(shell.map((f) => `/${f}`)));
      if (out.includes('/*__VERSION__*/') || out.includes('/*__PRECACHE__*/')) {
        throw new Error('demo/service-worker.js: the VERSION or PRECACHE marker is missing');
      }
      writeFileSync(join(outDir, 'service-worker.js'), out);
      precompress(outDir);
    },
  };
}

/** Siblings written by `precompress`. */
const PRECOMPRESSED = /\.(br|gz)$/;
/** What is worth compressing (images other than SVG already are). */
const COMPRESSIBLE = /\.(html|js|mjs|css|wasm|svg|json|webmanifest|txt)$/;

/** Writes `f.br` and `f.gz` next to each compressible file of `dir`, when smaller. */
function precompress(dir) {
  for (const f of walk(dir)) {
    if (!COMPRESSIBLE.test(f)) continue;
    const path = join(dir, f);
    const raw = readFileSync(path);
    const br = brotliCompressSync(raw, {
      params: { [constants.BROTLI_PARAM_QUALITY]: constants.BROTLI_MAX_QUALITY, [constants.BROTLI_PARAM_SIZE_HINT]: raw.length },
    });
    const gz = gzipSync(raw, { level: 9 });
    if (br.length < raw.length * 0.9) writeFileSync(`${path}.br`, br);
    if (gz.length < raw.length * 0.9) writeFileSync(`${path}.gz`, gz);
  }
}

export default defineConfig({
  root: demo,
  base: '/',
  plugins: [react(), demoFiles()],
  resolve: {
    alias: [
      // React's API on Preact (preact/compat): the same components and hooks,
      // marksync/react's among them, in a tenth of the script a phone must
      // parse and run before the diary shows.
      { find: /^react-dom\/client$/, replacement: 'preact/compat/client' },
      { find: /^react-dom$/, replacement: 'preact/compat' },
      { find: /^react\/jsx-runtime$/, replacement: 'preact/jsx-runtime' },
      { find: /^react\/jsx-dev-runtime$/, replacement: 'preact/jsx-dev-runtime' },
      { find: /^react$/, replacement: 'preact/compat' },
      { find: /^marksync\/react$/, replacement: join(www, 'react.js') },
      { find: /^marksync$/, replacement: join(www, 'index.js') },
    ],
  },
  server: {
    fs: { allow: [www] },
    // The dev server forwards sync traffic to a running marksync-server (make demo: port 8787).
    proxy: { '/v1': process.env.MARKSYNC_URL || 'http://127.0.0.1:8787' },
  },
  build: {
    outDir,
    emptyOutDir: true,
    target: 'es2022',
    // The wasm stays a file of its own (fetched and compiled as it streams).
    assetsInlineLimit: (file) => (file.endsWith('.wasm') ? false : undefined),
  },
});
