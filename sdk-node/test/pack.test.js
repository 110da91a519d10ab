// SPDX-License-Identifier: Apache-2.0 OR MIT
// The npm package as a user gets it: `npm pack` (with the prebuilt linux-x64-gnu addon and the bundled
// ABI module inside), `npm install ./morpheus-*.tgz` into a fresh folder, then the example service run
// from there, and a worker registered on a region through the installed copy.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFileSync, spawn } = require('node:child_process');
const { once } = require('node:events');
const { TestRegion, abi } = require('./region.js');

const ROOT = path.join(__dirname, '..');
const lock = JSON.parse(fs.readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8'));
const fastifyVersion = lock.packages['node_modules/fastify'].version;

test('npm pack, npm install into a fresh folder, run the example and a worker from there', { timeout: 600_000 }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'morpheus-node-pack-'));
  const region = new TestRegion();
  try {
    const tarball = execFileSync('bash', [path.join(ROOT, 'tools', 'pack.sh'), dir], { encoding: 'utf8' }).trim().split('\n').pop();
    const listing = execFileSync('tar', ['-tzf', tarball], { encoding: 'utf8' });
    assert.match(listing, /package\/native\/morpheus\.linux-x64-gnu\.node/);
    assert.match(listing, /package\/node_modules\/@morpheus\/abi\/index\.js/);
    assert.doesNotMatch(listing, /test-region/, 'the generated test-region writer is test-only');
    const app = path.join(dir, 'app');
    fs.mkdirSync(app);
    fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'app', private: true }));
    // fastify (the example's framework) at the version this package is tested with, from npm's cache
    // when it is there.
    execFileSync('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error', tarball, `fastify@${fastifyVersion}`], {
      cwd: app,
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    const installed = path.join(app, 'node_modules', '@morpheus-sched', 'node');
    assert.ok(fs.existsSync(path.join(installed, 'native', 'morpheus.linux-x64-gnu.node')));

    // The installed copy registers on a region and answers a request (ESM entry point).
    const script = `
      import { initWorker, shouldYield } from '@morpheus-sched/node';
      const w = initWorker({ region: ${JSON.stringify(region.path)}, slot: 2, priority: 4 });
      console.log(JSON.stringify({ slot: w.slot, first: shouldYield(), priority: w.priority }));
      w.close();`;
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], { cwd: app, encoding: 'utf8' });
    assert.deepEqual(JSON.parse(out), { slot: 2, first: false, priority: 4 });
    assert.equal(region.scb(2, 'worker_state'), abi.WorkerState.INIT);

    // The example service, the main thread registered by the preload (detached: no scheduler here).
    const child = spawn(
      process.execPath,
      ['--require', '@morpheus-sched/node/register', path.join(installed, 'examples', 'fastify-service.js'), '--port', '0'],
      { cwd: app, env: { ...process.env, MORPHEUS_REGION: '' }, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    try {
      const [line] = await once(child.stdout.setEncoding('utf8'), 'data');
      const { listening, worker } = JSON.parse(line.split('\n')[0]);
      assert.equal(worker, 'FORCED_BY_ENVIRONMENT');
      const light = await (await fetch(`${listening}/light`)).json();
      assert.deepEqual(light, { ok: true, attached: false });
      const heavy = await (await fetch(`${listening}/heavy?units=500`)).json();
      assert.equal(heavy.units, 500);
      assert.equal(heavy.yields, 0);
    } finally {
      // An example that already exited has emitted its 'exit': waiting for another would hang.
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        await once(child, 'exit');
      }
    }
  } finally {
    region.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
