// SPDX-License-Identifier: Apache-2.0 OR MIT
// With the real scheduler (scx_morpheus --backend sim): a worker that started detached because no agent
// ran, and one lost to a SIGKILLed agent, registers again on its own at its next checkpoint once a new
// instance accepts on the socket (spec/SCB.md §6.1), and the JS fast path follows each registration.
//
// No verdict depends on timing: the test waits (generously bounded) for the core's watcher to move
// the word the JS fast path reads (`yieldRequested()` turns true), then expects the re-registration
// from exactly one checkpoint.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { once } = require('node:events');
const { Worker: Thread } = require('node:worker_threads');
const morpheus = require('@morpheus-sched/node');

const root = path.join(__dirname, '..', '..');
const scx = process.env.MORPHEUS_SCX_BIN || path.join(process.env.CARGO_TARGET_DIR || path.join(root, 'target'), 'release', 'scx_morpheus');
// A bound for things the test does not control (an agent starting, the watcher noticing), far
// above what they take on a loaded machine; never the verdict.
const PATIENCE_MS = 60_000;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(what, condition) {
  const deadline = performance.now() + PATIENCE_MS;
  while (!condition()) {
    assert.ok(performance.now() < deadline, `${what}: not within ${PATIENCE_MS / 1000} s`);
    await sleep(10);
  }
}

function startAgent(socket) {
  const agent = spawn(scx, ['--backend', 'sim', '--mode', 'observer', '--socket', socket, '--max-workers', '4'], { stdio: 'ignore' });
  return agent;
}

async function stop(agent, signal) {
  if (agent.exitCode === null && agent.signalCode === null) {
    agent.kill(signal);
    await once(agent, 'exit');
  }
}

/** Start an agent, wait until its socket exists, SIGKILL it: the socket stays, nobody accepts (§6.1). */
async function leftoverSocket(socket) {
  const agent = startAgent(socket);
  await until('scx_morpheus listening', () => fs.existsSync(socket));
  await stop(agent, 'SIGKILL');
  assert.ok(fs.existsSync(socket), 'a SIGKILLed agent leaves its socket');
}

/** Busy `await checkpoint()` until the scheduler asks and the loop yields (bounded, not timed). */
async function yieldsOnce() {
  const deadline = performance.now() + PATIENCE_MS;
  while (performance.now() < deadline) {
    let h = 0;
    for (let i = 0; i < 10_000; i++) h = Math.imul(h ^ i, 0x5bd1e995);
    if (await morpheus.checkpoint()) return true;
  }
  return false;
}

test('a worker detached for want of an agent, then lost to a SIGKILL, registers again at its next checkpoint each time', async () => {
  assert.ok(fs.existsSync(scx), `${scx} is not built (cargo build --release -p scx_morpheus; tools/test.sh does it)`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'morpheus-node-restart-'));
  const socket = path.join(dir, 'sock');
  const seen = [];
  const onNotice = (notice) => seen.push(notice);
  morpheus.notices.on('notice', onNotice);
  let agent = null;
  try {
    await leftoverSocket(socket);
    const worker = morpheus.initWorker({ socket });
    try {
      assert.equal(worker.attached, false);
      assert.equal(worker.detachReason, 'NO_SCHEDULER');
      assert.match(worker.detachDetail, /no agent accepts/);
      assert.equal(worker.waitingForScheduler, true);
      assert.equal(worker.reattachments, 0);
      assert.ok(seen.some((n) => n.level === 'warning' && /running detached/.test(n.message)), JSON.stringify(seen));
      // Nothing moved yet: the fast path stays fast (no slow path per checkpoint while waiting).
      assert.equal(morpheus.yieldRequested(), false);
      assert.equal(await morpheus.checkpoint(), false);
      assert.equal(worker.reattachments, 0);

      // An agent comes up on that socket: the watcher bumps the word the JS fast path reads.
      agent = startAgent(socket);
      await until('the wake-up of a new instance reaching the JS fast path', () => morpheus.yieldRequested());
      assert.equal(worker.reattachments, 0, 'nothing registers before a checkpoint');
      assert.equal(await morpheus.checkpoint(), false);
      assert.equal(worker.reattachments, 1, 'the next checkpoint registers again');
      assert.equal(worker.waitingForScheduler, false);
      assert.equal(worker.attached, true);
      assert.equal(worker.detachDetail, null);
      assert.notEqual(worker.slot, null);
      // The fast path now reads the new SCB: the scheduler's requests reach it.
      assert.equal(morpheus.yieldRequested(), false);
      assert.ok(await yieldsOnce(), 'no yield within the bound after registering again');

      // SIGKILL: nothing retired in the shared region; the watcher retires this process's view, so the
      // JS view of the old SCB moves and a checkpoint finds the worker lost. A request the killed
      // instance left pending, or a mode's own yield (§5.4), may move the fast path first: a checkpoint
      // serves it and the worker stays attached. So the test checkpoints each time the fast path moves
      // until the loss is seen; without the watcher nothing else would ever lose the worker here.
      await stop(agent, 'SIGKILL');
      const lostBy = performance.now() + PATIENCE_MS;
      while (!worker.waitingForScheduler) {
        assert.ok(performance.now() < lostBy, `the worker was not lost within ${PATIENCE_MS / 1000} s of the SIGKILL`);
        await until('the fast path moving (the retired view, or a request left pending)', () => morpheus.yieldRequested());
        await morpheus.checkpoint();
      }
      assert.equal(worker.reattachments, 1);
      assert.equal(worker.attached, false);
      assert.equal(worker.waitingForScheduler, true);
      assert.equal(worker.reattachments, 1);
      assert.throws(() => worker.status(), morpheus.errors.GenerationChangedError);
      // A loss leaves one attempt to register again to the next checkpoint, so that a new instance
      // the watcher woke for before the loss was seen is not missed. Whether the loop above already
      // made it depends on which call saw the loss first (a checkpoint, or the probe behind
      // yieldRequested); one more checkpoint makes it if not. Nobody accepts on the socket: the
      // attempt fails, the worker stays detached, and the checkpoint does not yield.
      assert.equal(await morpheus.checkpoint(), false);
      assert.equal(worker.reattachments, 1);
      assert.equal(worker.waitingForScheduler, true);
      // Waiting again on the wake word: checkpoints are fast and never yield.
      assert.equal(morpheus.yieldRequested(), false);
      assert.equal(await morpheus.checkpoint(), false);

      agent = startAgent(socket);
      await until('the wake-up of the restarted agent reaching the JS fast path', () => morpheus.yieldRequested());
      assert.equal(worker.reattachments, 1);
      assert.equal(await morpheus.checkpoint(), false);
      assert.equal(worker.reattachments, 2, 'the next checkpoint registers again');
      assert.equal(worker.attached, true);
      assert.ok(await yieldsOnce(), 'no yield within the bound after registering again');
      const again = seen.filter((n) => n.level === 'warning' && /registered again/.test(n.message));
      assert.equal(again.length, 2, JSON.stringify(seen));
    } finally {
      worker.close();
    }
  } finally {
    morpheus.notices.off('notice', onNotice);
    if (agent !== null) await stop(agent, 'SIGINT');
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// A thread's code for the witness below: registers through the agent's socket and reports when the
// wake-up reaches its fast path.
const WITNESS = `
const { parentPort, workerData } = require('node:worker_threads');
const morpheus = require(workerData.module);
const worker = morpheus.initWorker({ socket: workerData.socket });
parentPort.postMessage({ waiting: worker.waitingForScheduler });
const timer = setInterval(() => {
  if (morpheus.yieldRequested()) {
    clearInterval(timer);
    parentPort.postMessage({ woken: true });
    worker.close();
  }
}, 5);
`;

test('a worker detached on request never registers again, even when a new instance comes up', async () => {
  assert.ok(fs.existsSync(scx), `${scx} is not built`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'morpheus-node-requested-'));
  const socket = path.join(dir, 'sock');
  let agent = null;
  let witness = null;
  try {
    await leftoverSocket(socket);
    const worker = morpheus.initWorker({ socket, region: '' });
    try {
      assert.equal(worker.detachReason, 'REQUESTED');
      assert.equal(worker.waitingForScheduler, false);
      // A thread that does wait is the witness that the wake-up happened.
      witness = new Thread(WITNESS, { eval: true, workerData: { module: require.resolve('@morpheus-sched/node'), socket } });
      const messages = [];
      const exited = once(witness, 'exit'); // before it can happen
      witness.on('message', (m) => messages.push(m));
      await until('the witness registering', () => messages.length > 0);
      assert.deepEqual(messages[0], { waiting: true });
      agent = startAgent(socket);
      await until('the wake-up reaching the witness', () => messages.some((m) => m.woken));
      await exited;
      witness = null;
      for (let i = 0; i < 3; i++) assert.equal(await morpheus.checkpoint(), false);
      assert.equal(morpheus.yieldRequested(), false);
      assert.equal(worker.attached, false);
      assert.equal(worker.reattachments, 0);
      assert.equal(worker.waitingForScheduler, false);
    } finally {
      worker.close();
    }
  } finally {
    if (witness !== null) await witness.terminate();
    if (agent !== null) await stop(agent, 'SIGINT');
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
