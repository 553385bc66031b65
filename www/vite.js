// marksync/vite — ship the app's Service Worker at the root of its scope, in
// `vite build` and in `vite dev`:
//
//   import marksync from 'marksync/vite';
//   export default defineConfig({ plugins: [marksync({ worker: 'src/service-worker.js' })] });
//
// A worker controls only the pages under the path it is served from, so it
// must be served from the root: the build emits the worker module (and what
// it imports, the wasm among it) as `/service-worker.js`; the dev server
// answers `/service-worker.js` with the same module, transformed (module
// workers load ES modules in dev as in build), under the app's `base` too.
// Register it as a module worker:
//   navigator.serviceWorker.register(import.meta.env.BASE_URL + 'service-worker.js', { type: 'module' })
import { relative, resolve, sep } from 'node:path';

/**
 * @param {{ worker: string, fileName?: string }} options `worker`: the app's
 * worker module, relative to Vite's root; `fileName`: where it is served
 * (default `service-worker.js`).
 */
export default function marksync({ worker, fileName = 'service-worker.js' } = {}) {
  if (typeof worker !== 'string' || worker === '') {
    throw new Error("marksync/vite: name the app's worker module, e.g. marksync({ worker: 'src/service-worker.js' })");
  }
  let entry;
  let url;
  let served;
  let building = false;
  return {
    name: 'marksync:worker',
    configResolved(config) {
      entry = resolve(config.root, worker);
      url = `/${relative(config.root, entry).split(sep).join('/')}`;
      building = config.command === 'build';
      // Where the build's file is deployed: under the app's `base` (`/app/`), as
      // `import.meta.env.BASE_URL + 'service-worker.js'` names it in both.
      const base = typeof config.base === 'string' && config.base.startsWith('/') ? config.base : '/';
      served = new Set([`${base.endsWith('/') ? base : `${base}/`}${fileName}`, `/${fileName}`]);
    },
    buildStart() {
      if (building) this.emitFile({ type: 'chunk', id: entry, fileName });
    },
    configureServer(server) {
      server.middlewares.use(async (req, res, next) => {
        if (!served.has((req.url ?? '').split('?')[0])) return next();
        try {
          const out = await server.transformRequest(url);
          if (!out) return next();
          res.setHeader('Content-Type', 'text/javascript');
          res.setHeader('Cache-Control', 'no-cache');
          res.end(out.code);
        } catch (e) {
          next(e);
        }
      });
    },
  };
}
