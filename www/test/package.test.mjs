// What `npm pack` ships: the module, its glue, the types, the worker and the
// React entry, and what explains them — the package's README and both
// licence files — and nothing of the repository besides (no tests, no demo).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { root } from './helpers.mjs';

test('npm pack ships the module, its types, a README and the licences, and nothing else', () => {
  const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: join(root, 'www'), encoding: 'utf8' });
  const files = JSON.parse(out)[0].files.map((f) => f.path).sort();
  for (const f of ['README.md', 'LICENSE-MIT', 'LICENSE-APACHE', 'package.json', 'index.js', 'index.d.ts', 'react.js', 'react.d.ts',
    'sw.js', 'sw.d.ts', 'vite.js', 'vite.d.ts', 'devtools.js', 'devtools.d.ts', 'pkg/marksync.js', 'pkg/marksync.d.ts', 'pkg/marksync_bg.wasm']) {
    assert.ok(files.includes(f), `${f} is in the package: ${files.join(', ')}`);
  }
  const stray = files.filter((f) => /^(test|demo|bench|dist|node_modules|pkg-bench)\//.test(f));
  assert.deepEqual(stray, [], 'nothing of the repository besides the package');
  const pkg = JSON.parse(readFileSync(join(root, 'www', 'package.json'), 'utf8'));
  assert.equal(pkg.license, 'MIT OR Apache-2.0');
  assert.match(readFileSync(join(root, 'www', 'LICENSE-MIT'), 'utf8'), /Permission is hereby granted/);
  assert.match(readFileSync(join(root, 'www', 'LICENSE-APACHE'), 'utf8'), /Apache License\s+Version 2\.0/);
});
