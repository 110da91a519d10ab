// SPDX-License-Identifier: Apache-2.0 OR MIT
// With the real scheduler (scx_morpheus --backend sim, observer mode): the event loop's thread registers
// through the agent's socket and its busy `await checkpoint()` loop is asked to yield, and yields.
// tools/test.sh builds the scheduler (cargo build --release -p scx_morpheus); without it the test fails.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { once } = require('node:events');
const morpheus = require('@morpheus-sched/node');

const root = path.join(__dirname, '..', '..');
// tools/test.sh builds it and names it; run alone, the test looks where cargo puts it.
const scx = process.env.MORPHEUS_SCX_BIN || path.join(process.env.CARGO_TARGET_DIR || path.join(root, 'target'), 'release', 'scx_morpheus');

test('registered through the sim scheduler\'s agent, a busy loop is asked to yield and yields', async () => {
  assert.ok(fs.existsSync(scx), `${scx} is not built (cargo build --release -p scx_morpheus; tools/test.sh does it)`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'morpheus-node-sched-'));
  const socket = path.join(dir, 'sock');
  const scheduler = spawn(scx, ['--backend', 'sim', '--mode', 'observer', '--socket', socket, '--max-workers', '2'], { stdio: 'ignore' });
  try {
    for (let i = 0; i < 400 && !fs.existsSync(socket); i++) await new Promise((r) => setTimeout(r, 50));
    assert.ok(fs.existsSync(socket), 'scx_morpheus did not start listening');
    // Since ABI 1.3 the region comes with the agent's reply (a sealed memfd per uid), never a path.
    const worker = morpheus.initWorker({ socket });
    try {
      assert.equal(worker.attached, true);
      assert.equal(worker.escapable, false);
      // Busy until the scheduler has asked and the loop has yielded (bounded, not timed).
      const deadline = performance.now() + 60_000;
      let yielded = 0;
      while (yielded === 0 && performance.now() < deadline) {
        let h = 0;
        for (let i = 0; i < 10_000; i++) h = Math.imul(h ^ i, 0x5bd1e995);
        if (await morpheus.checkpoint()) yielded++;
      }
      assert.ok(yielded > 0, 'no yield within 60 s of busy checkpointing');
      const counts = worker.yieldCounts();
      assert.ok(counts.PREEMPT_REQUEST + counts.BUDGET + counts.DEFENSIVE >= 1, JSON.stringify(counts));
    } finally {
      worker.close();
    }
  } finally {
    if (scheduler.exitCode === null && scheduler.signalCode === null) {
      scheduler.kill('SIGINT');
      await once(scheduler, 'exit');
    }
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
