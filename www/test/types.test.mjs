// The package's types as a strict TypeScript app sees them: the README's
// snippets (test/types/app.ts) and its Service Worker (test/types/service-worker.ts)
// compile with `tsc --strict` — the app with the DOM lib, the worker with the
// WebWorker lib and also with the app's own config — importing the package
// by its name.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { root } from './helpers.mjs';

const www = join(root, 'www');
const tsc = join(www, 'node_modules', '.bin', 'tsc');

for (const config of ['tsconfig.app.json', 'tsconfig.worker.json']) {
  test(`the README's code type-checks as written (${config})`, () => {
    try {
      execFileSync(tsc, ['-p', join(www, 'test', 'types', config)], { cwd: www, encoding: 'utf8' });
    } catch (e) {
      assert.fail(`tsc -p test/types/${config}:\n${e.stdout}${e.stderr}`);
    }
  });
}
