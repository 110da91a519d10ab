// SPDX-License-Identifier: Apache-2.0 OR MIT
// worker_threads register on their own; a thread or process that ends without close() frees its
// slot; the preloads register the main thread (CommonJS and ESM).
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { Worker: Thread } = require('node:worker_threads');
const morpheus = require('@morpheus-sched/node');
const { TestRegion, abi } = require('./region.js');

process.env.MORPHEUS_REGION = '';
const ROOT = path.join(__dirname, '..');

/**
 * Run `body` (a function's source, with `morpheus`, `post`, `data` in scope) on a new worker thread.
 * Returns the thread with `next()` (its next message) and `exited` (its exit code), both listened for
 * from the start: when a thread posts and ends before this thread's loop turns, Node delivers its
 * queued messages and then 'exit' in one synchronous burst (Worker's exit handler drains the port),
 * so an `events.once()` taken after an earlier await would miss them and the test would hang.
 */
function thread(body, data) {
  const source = `
    const { parentPort, workerData: data } = require('node:worker_threads');
    const morpheus = require(${JSON.stringify(ROOT)});
    const post = (m) => parentPort.postMessage(m);
    (${body})().catch((e) => post({ error: e.stack, code: e.code }));`;
  const t = new Thread(source, { eval: true, workerData: data });
  const inbox = [];
  const waiting = [];
  let ended = null; // why no further message can come, once the thread has ended
  const settle = () => {
    while (waiting.length > 0 && (inbox.length > 0 || ended !== null)) {
      const { resolve, reject } = waiting.shift();
      if (inbox.length > 0) {
        const m = inbox.shift();
        if (m && m.error) reject(new Error(`thread failed: ${m.error}`));
        else resolve(m);
      } else {
        reject(ended);
      }
    }
  };
  t.on('message', (m) => {
    inbox.push(m);
    settle();
  });
  t.on('error', (error) => {
    ended ??= error;
    settle();
  });
  t.exited = new Promise((resolve) => {
    t.on('exit', (code) => {
      ended ??= new Error(`thread exited (code ${code}) without posting the message awaited`);
      settle();
      resolve(code);
    });
  });
  t.next = () => new Promise((resolve, reject) => {
    waiting.push({ resolve, reject });
    settle();
  });
  return t;
}

test('each worker thread registers its own slot and sees only its own requests', async () => {
  const region = new TestRegion();
  try {
    const main = morpheus.initWorker({ region: region.path, slot: 0 });
    const t = thread(async () => {
      const worker = morpheus.initWorker({ region: data.path, slot: 1 });
      post({ slot: worker.slot, registered: true });
      // Wait for the main thread to bump our slot, then checkpoint.
      const { port } = await new Promise((r) => require('node:worker_threads').parentPort.once('message', r));
      post({ yielded: morpheus.shouldYield(), again: morpheus.shouldYield(), port });
      worker.close();
      post({ closed: true });
    }, { path: region.path });
    assert.deepEqual(await t.next(), { slot: 1, registered: true });
    assert.equal(region.scb(1, 'worker_state'), abi.WorkerState.RUNNING);
    assert.notEqual(region.scb(1, 'tid'), region.scb(0, 'tid'));
    region.bump(1);
    assert.equal(morpheus.shouldYield(), false, 'the main thread was not asked');
    t.postMessage({ port: 1 });
    assert.deepEqual(await t.next(), { yielded: true, again: false, port: 1 });
    assert.deepEqual(await t.next(), { closed: true });
    assert.equal(await t.exited, 0);
    assert.equal(region.scb(1, 'worker_state'), abi.WorkerState.INIT);
    assert.equal(region.scb(0, 'last_ack_seq'), 0n);
    main.close();
  } finally {
    region.close();
  }
});

test('a worker thread that exits without close() frees its slot', async () => {
  const region = new TestRegion();
  try {
    const t = thread(async () => {
      morpheus.initWorker({ region: data.path, slot: 2 });
      morpheus.criticalEnter(); // and leaves a section open
      post({ registered: true });
    }, { path: region.path });
    assert.deepEqual(await t.next(), { registered: true });
    assert.equal(await t.exited, 0);
    assert.equal(region.scb(2, 'worker_state'), abi.WorkerState.INIT);
    assert.equal(region.scb(2, 'tid'), 0);
  } finally {
    region.close();
  }
});

test('a terminated worker thread frees its slot too', async () => {
  const region = new TestRegion();
  try {
    const t = thread(async () => {
      morpheus.initWorker({ region: data.path, slot: 3 });
      post({ registered: true });
      await new Promise(() => setInterval(() => {}, 1000)); // never ends on its own
    }, { path: region.path });
    assert.deepEqual(await t.next(), { registered: true });
    await t.terminate();
    assert.equal(region.scb(3, 'worker_state'), abi.WorkerState.INIT);
  } finally {
    region.close();
  }
});

test('a process that exits without close() frees its slot (process.exit and a natural end)', () => {
  const region = new TestRegion();
  try {
    for (const end of ['process.exit(0)', '']) {
      const script = `const m = require(${JSON.stringify(ROOT)}); m.initWorker({ region: ${JSON.stringify(region.path)}, slot: 0 }); ${end}`;
      execFileSync(process.execPath, ['-e', script], { env: { ...process.env } });
      assert.equal(region.scb(0, 'worker_state'), abi.WorkerState.INIT, end || 'natural end');
    }
  } finally {
    region.close();
  }
});

test('preloads register the main thread: --require (CommonJS) and --import (ESM)', () => {
  const region = new TestRegion();
  try {
    const env = { ...process.env, MORPHEUS_REGION: '' };
    for (const flag of ['--require', '--import']) {
      const out = execFileSync(
        process.execPath,
        [flag, '@morpheus-sched/node/register', '-e', 'const w = require("@morpheus-sched/node").currentWorker(); console.log(w && w.detachReason)'],
        { env, cwd: ROOT, encoding: 'utf8' },
      );
      assert.equal(out.trim(), 'FORCED_BY_ENVIRONMENT', flag);
    }
    // A region the preload cannot use: a warning naming the cause, and the process runs detached.
    const result = require('node:child_process').spawnSync(
      process.execPath,
      ['--require', '@morpheus-sched/node/register', '-e', 'console.log(require("@morpheus-sched/node").currentWorker().detachReason)'],
      { env: { ...process.env, MORPHEUS_REGION: path.join(region.dir, 'missing') }, cwd: ROOT, encoding: 'utf8' },
    );
    assert.equal(result.status, 0);
    assert.equal(result.stdout.trim(), 'REQUESTED');
    assert.match(result.stderr, /running detached: IO: .*missing/);
  } finally {
    region.close();
  }
});

test('ESM and CommonJS entry points are one module instance', async () => {
  const esm = await import('@morpheus-sched/node');
  assert.equal(esm.shouldYield, morpheus.shouldYield);
  assert.equal(esm.default, morpheus);
  assert.equal(esm.errors, morpheus.errors);
});
