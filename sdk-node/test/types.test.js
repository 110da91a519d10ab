// SPDX-License-Identifier: Apache-2.0 OR MIT
// The TypeScript declarations compile against a user's code (test/types.ts), with `using`.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

test('tsc --noEmit accepts test/types.ts and rejects its @ts-expect-error lines', () => {
  const root = path.join(__dirname, '..');
  const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  const result = spawnSync(process.execPath, [tsc, '-p', path.join(root, 'tsconfig.json')], { encoding: 'utf8' });
  assert.equal(result.status, 0, result.stdout + result.stderr);
});
