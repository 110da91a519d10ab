// SPDX-License-Identifier: Apache-2.0 OR MIT
// Requests served by rotation on the event loop's thread (spec/SCB.md §5.7): one task steps aside per
// request, the yielder goes to the back of the FIFO, nobody waits forever, and a connection made
// before a yield is accepted, read and answered before the CPU-bound task resumes. The test plays the
// scheduler on a region file (direct registration); nothing here depends on timing.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { once } = require('node:events');
const morpheus = require('@morpheus-sched/node');
const { TestRegion } = require('./region.js');

process.env.MORPHEUS_REGION = '';
const SLOT = 0;

let region;
let worker;
test.beforeEach(() => {
  region = new TestRegion();
  worker = morpheus.initWorker({ region: region.path, slot: SLOT });
});
test.afterEach(() => {
  worker.close();
  region.close();
  morpheus._setTurnClock();
});

// Turns are measured with a clock each step of work advances (the CPU time of a step, made exact), so
// which task resumes never depends on how fast the machine ran.
let clock = 0;
test.beforeEach(() => morpheus._setTurnClock(() => clock));

function spin() {
  clock += 1000;
  let h = 1;
  for (let i = 0; i < 2000; i++) h = Math.imul(h ^ (h >>> 13), 0x5bd1e995) + i;
  return h;
}

test('CPU-bound tasks take turns of one request each, the yielder to the back', async () => {
  const REQUESTS = 8;
  let steps = 0;
  let requests = 0;
  const resumed = [];
  // Who ran the steps from the first request on, one [name, steps] entry per turn.
  const turns = [];
  // Two CPU-bound tasks; every 10th step (of either) the "scheduler" asks once more.
  const task = async (name) => {
    while (requests < REQUESTS) {
      spin();
      if (requests > 0) {
        if (turns.length === 0 || turns[turns.length - 1][0] !== name) turns.push([name, 0]);
        turns[turns.length - 1][1]++;
      }
      if (++steps % 10 === 0) {
        region.bump(SLOT);
        requests++;
      }
      if (await morpheus.checkpoint()) resumed.push(name);
    }
  };
  await Promise.all([task('A'), task('B')]);
  assert.equal(resumed.length, REQUESTS, `one yield per request: ${resumed.join(' ')}`);
  // A turn lasts one request (10 steps) or, for a task that was computing during a yield, one step
  // (it steps aside at its first checkpoint): the yielder goes to the back, so no task runs two
  // requests' worth in a row.
  const shown = turns.map(([name, n]) => `${name}${n}`).join(' ');
  assert.ok(turns.length >= REQUESTS - 1, `a turn per request: ${shown}`);
  for (const [, n] of turns) assert.ok(n <= 10, `no turn longer than one request: ${shown}`);
  assert.equal(region.scb(SLOT, 'yield_count'), BigInt(REQUESTS));
  assert.equal(region.scb(SLOT, 'last_ack_seq'), BigInt(REQUESTS));
});

test('a task whose turn was cut short by a repeated request resumes first, until it has caught up (run-time weighting)', async () => {
  let requests = 0;
  let sinceRequest = 0;
  const turns = [];
  // Three CPU-bound tasks; the "scheduler" asks after every 10 steps of work, except that the 4th
  // request comes 2 steps after the 3rd (a turn cut short).
  const task = async (name) => {
    while (requests < 12) {
      spin();
      if (turns.length === 0 || turns[turns.length - 1][0] !== name) turns.push([name, 0]);
      turns[turns.length - 1][1]++;
      if (++sinceRequest === (requests === 3 ? 2 : 10)) {
        region.bump(SLOT);
        requests++;
        sinceRequest = 0;
      }
      await morpheus.checkpoint();
    }
  };
  await Promise.all([task('A'), task('B'), task('C')]);
  const shown = turns.map(([name, n]) => `${name}${n}`).join(' ');
  // The task cut short after 2 steps has the least run time: it is resumed at once and runs a whole
  // turn more (2 + 10 steps in a row); every other turn is at most one request's worth. A strict FIFO
  // would resume the queue's head instead.
  assert.equal(turns.filter(([, n]) => n === 12).length, 1, `the cut-short task resumes first: ${shown}`);
  for (const [, n] of turns) assert.ok(n <= 12, `no task runs longer: ${shown}`);
});

test('nobody waits forever: when the resumed task ends, the next waiting one resumes without a request', async () => {
  const order = [];
  // A yields for request 1. B runs during that yield and sees request 2, a new one: B yields too.
  // A resumes first and ends; B must then resume although no further request comes.
  const a = (async () => {
    region.bump(SLOT);
    assert.equal(await morpheus.checkpoint(), true);
    order.push('A resumed');
  })();
  const b = (async () => {
    assert.equal(await morpheus.checkpoint(), false, 'B runs during A\'s yield: request 1 is not its');
    region.bump(SLOT);
    assert.equal(await morpheus.checkpoint(), true);
    order.push('B resumed');
  })();
  await Promise.all([a, b]);
  assert.deepEqual(order, ['A resumed', 'B resumed']);
  assert.equal(region.scb(SLOT, 'yield_count'), 2n);
});

test('a sync checkpoint during an async yield does not step aside for that request', async () => {
  region.bump(SLOT);
  const yielder = morpheus.checkpoint();
  assert.equal(morpheus.shouldYield(), false);
  assert.equal(region.scb(SLOT, 'last_ack_seq'), 1n);
  assert.equal(await yielder, true);
  assert.equal(region.scb(SLOT, 'yield_count'), 1n);
});

test('a connection made before the yield is accepted, read and answered before the CPU-bound task resumes', async () => {
  const dir = fs.mkdtempSync(path.join(region.dir, 'client-'));
  const sent = path.join(dir, 'sent');
  let answered = false;
  const server = http.createServer((request, response) => {
    answered = true;
    response.end('light');
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address();
  // The client connects, sends its request, then says so with a file; it prints the answer.
  const client = spawn(
    process.execPath,
    [
      '-e',
      `const net = require('node:net'); const fs = require('node:fs');
       const s = net.connect(${port}, '127.0.0.1', () => {
         s.write('GET /light HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n', () => fs.writeFileSync(${JSON.stringify(sent)}, ''));
       });
       let body = ''; s.setEncoding('utf8'); s.on('data', (d) => (body += d)); s.on('end', () => console.log(body.split('\\r\\n\\r\\n')[1]));`,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  // Listening from the spawn on: the client may answer and exit during the yield's passes, and an
  // 'exit' emitted before a listener is attached is never seen again.
  const clientDone = Promise.all([
    new Promise((resolve) => {
      let out = '';
      client.stdout.setEncoding('utf8').on('data', (d) => (out += d));
      client.stdout.on('end', () => resolve(out.trim()));
    }),
    once(client, 'exit'),
  ]);
  try {
    // The CPU-bound task: busy (no poll runs) until the request is in the kernel's buffers, then the
    // scheduler asks once; when the task resumes, the request must have been answered.
    let answeredAtResume = null;
    for (;;) {
      spin();
      if (fs.existsSync(sent) && region.scb(SLOT, 'preempt_seq') === 0n) {
        assert.equal(answered, false, 'no poll ran while the task was busy');
        region.bump(SLOT);
      }
      if (await morpheus.checkpoint()) {
        answeredAtResume = answered;
        break;
      }
    }
    assert.equal(answeredAtResume, true, `the request was not answered within the yield's ${morpheus.YIELD_PASSES} passes`);
    const [body] = await clientDone;
    assert.equal(body, 'light');
  } finally {
    client.kill();
    server.close();
  }
});

// A turn lasts one slice of wall time at most (§5.7). The slice is ten steps of the tests' clock,
// which times the turn in place of CLOCK_MONOTONIC (spin() advances it by one step).
const STEPS_PER_SLICE = 10;

function sliceOfSteps() {
  region.header('slice_ns', BigInt(STEPS_PER_SLICE * 1000));
}

/** Consecutive runs of one name, as [name, count] pairs. */
function turnsOf(runs) {
  const turns = [];
  for (const name of runs) {
    if (turns.length === 0 || turns[turns.length - 1][0] !== name) turns.push([name, 0]);
    turns[turns.length - 1][1]++;
  }
  return turns;
}

function shown(turns) {
  return turns.map(([name, n]) => `${name}${n}`).join(' ');
}

test('a turn ends after one slice of the clock without a request, writing nothing and counting no yield', async () => {
  sliceOfSteps();
  const runs = [];
  const outcomes = [];
  let requested = false;
  // Two CPU-bound tasks; the scheduler asks once, at the very first step, and never again.
  const task = async (name) => {
    while (runs.length < 80) {
      spin();
      runs.push(name);
      if (!requested) {
        region.bump(SLOT);
        requested = true;
      }
      outcomes.push(await morpheus.checkpoint());
    }
  };
  await Promise.all([task('A'), task('B')]);
  const turns = turnsOf(runs);
  // A yields for the request after one step, B takes its first step during the passes and steps
  // aside, then each turn the rotation gives lasts until the clock ends it: one slice.
  assert.deepEqual(turns.slice(0, 3), [['A', 1], ['B', 1], ['A', STEPS_PER_SLICE]], shown(turns));
  for (const [, n] of turns.slice(2, -1)) assert.equal(n, STEPS_PER_SLICE, shown(turns));
  assert.ok(turns.length >= 8, `turns alternate without requests: ${shown(turns)}`);
  // Only the request's yield is one: the ends of timed turns resolve false, write nothing to the SCB
  // and count no yield.
  assert.equal(outcomes.filter((outcome) => outcome === true).length, 1);
  assert.equal(region.scb(SLOT, 'yield_count'), 1n);
  assert.equal(region.scb(SLOT, 'last_ack_seq'), 1n);
  assert.equal(Object.values(worker.yieldCounts()).reduce((a, b) => a + b, 0), 1);
});

test('a critical section holds the end of a timed turn until the first checkpoint after it', async () => {
  sliceOfSteps();
  const runs = [];
  let requested = false;
  // A's steps 2 to 25 (its timed turn's first 24) each end at a checkpoint inside a section.
  const SECTION_STEPS = 24;
  const task = async (name) => {
    let done = 0;
    while (runs.length < 80) {
      const inSection = name === 'A' && done >= 1 && done <= SECTION_STEPS;
      if (inSection) morpheus.criticalEnter();
      spin();
      runs.push(name);
      done++;
      if (!requested) {
        region.bump(SLOT);
        requested = true;
      }
      try {
        await morpheus.checkpoint();
      } finally {
        if (inSection) morpheus.criticalExit();
      }
    }
  };
  await Promise.all([task('A'), task('B')]);
  const turns = turnsOf(runs);
  // A's turn goes past its slice while the sections hold it, and ends at the checkpoint of the first
  // step after them. Every later turn lasts one slice (B, behind in run time, has two in a row once:
  // a run of consecutive steps is a whole number of slices).
  assert.deepEqual(turns.slice(0, 3), [['A', 1], ['B', 1], ['A', SECTION_STEPS + 1]], shown(turns));
  for (const [, n] of turns.slice(3, -1)) assert.equal(n % STEPS_PER_SLICE, 0, shown(turns));
  assert.equal(morpheus.criticalDepth(), 0);
  assert.equal(region.scb(SLOT, 'yield_count'), 1n);
});

test('a task that never reaches a checkpoint is unaffected; the turn ends at its holder\'s first checkpoint after the slice', async () => {
  sliceOfSteps();
  const runs = [];
  let untimed = null;
  // C never reaches a checkpoint: it computes between plain awaits.
  const noCheckpoint = async () => {
    for (let i = 0; i < 20; i++) {
      spin();
      runs.push('C');
      await null;
    }
  };
  const a = async () => {
    spin();
    runs.push('A');
    region.bump(SLOT);
    assert.equal(await morpheus.checkpoint(), true);
    // A's timed turn: three slices of steps (and C's, started here) with no checkpoint, then one.
    for (let i = 0; i < 3 * STEPS_PER_SLICE; i++) {
      spin();
      runs.push('A');
      if (i === 4) untimed = noCheckpoint();
      await null;
    }
    assert.equal(await morpheus.checkpoint(), false, 'the end of a timed turn is no yield');
    runs.push('A resumed');
  };
  const b = async () => {
    for (let i = 0; i < 3; i++) {
      spin();
      runs.push('B');
      await morpheus.checkpoint();
    }
  };
  await Promise.all([a(), b()]);
  await untimed;
  const turns = turnsOf(runs.map((name) => (name === 'C' ? 'A' : name)));
  // Nothing stepped aside before A's checkpoint: C ran all its steps inside A's turn, which lasted
  // past its slice until that checkpoint; then B had its turn, and A resumed after.
  assert.equal(runs.filter((name) => name === 'C').length, 20);
  assert.deepEqual(turns, [['A', 1], ['B', 1], ['A', 3 * STEPS_PER_SLICE + 20], ['B', 2], ['A resumed', 1]], shown(turnsOf(runs)));
  assert.equal(region.scb(SLOT, 'yield_count'), 1n);
});

// A yield's passes end at a pass that finds the loop idle, and a timed turn with nobody waiting
// carries on while the loop is idle (§5.7). "Idle": no immediate of other code queued (Node's
// immediate list, looked at by the JS side), no event processed by the loop's poll since the previous
// look and no I/O ready on its poll descriptor (the addon's look at libuv). The loop's iterations are
// counted with libuv's own counter (native.loopIterations), which queues nothing.
const native = require('../lib/native.js');

/** Start counting the loop's iterations with an immediate chain (other code's immediates); returns { count(), stop() }. */
function ticker() {
  let ticks = 0;
  let on = true;
  const tick = () => {
    ticks++;
    if (on) setImmediate(tick);
  };
  setImmediate(tick);
  return { count: () => ticks, stop: () => (on = false) };
}

test('a yield ends at the first pass that finds the loop idle, and lasts its passes while other code has immediates queued', async () => {
  assert.ok(native.loopIterations() >= 0, 'this Node has uv_metrics_info (libuv 1.45 or later)');
  const passes = [];
  // The first look at the loop sees what ran before it (its events), so the first yield may take more
  // passes; a V8 platform task may wake the loop once in a while. Some yield of five lasts one pass.
  for (let i = 0; i < 5; i++) {
    region.bump(SLOT);
    const before = native.loopIterations();
    assert.equal(await morpheus.checkpoint(), true);
    passes.push(native.loopIterations() - before);
  }
  assert.ok(passes.every((n) => n >= 1 && n <= morpheus.YIELD_PASSES), `passes per yield: ${passes}`);
  assert.ok(passes.includes(1), `no yield ended at its first pass although the loop was idle: passes per yield ${passes}`);
  // Another task's immediate chain is something else to run at every pass: each yield lasts them all.
  const loop = ticker();
  for (let i = 0; i < 3; i++) {
    region.bump(SLOT);
    const before = native.loopIterations();
    assert.equal(await morpheus.checkpoint(), true);
    assert.equal(native.loopIterations() - before, morpheus.YIELD_PASSES, 'the passes ended with an immediate of other code queued');
  }
  loop.stop();
  assert.equal(region.scb(SLOT, 'yield_count'), 8n);
});

test('a timed turn carries on while nobody waits and the loop is idle, and ends at its first checkpoint past the slice once I/O is ready', async () => {
  sliceOfSteps();
  // A Unix stream socket pair through a server in the region's directory: a write lands in the peer's
  // receive queue at once (no deferred network processing), so it is ready I/O from that moment.
  const net = require('node:net');
  const sockPath = path.join(region.dir, 'io.sock');
  let received = false;
  const server = net.createServer((socket) => socket.on('data', () => (received = true)));
  server.listen(sockPath);
  await once(server, 'listening');
  const client = net.connect(sockPath);
  try {
    await Promise.all([once(client, 'connect'), once(server, 'connection')]);
    // The rotation's turn, timed from the yield's end. Five slices of steps: every checkpoint resolves
    // false without a trip through the loop, and nothing is written. A look past the slice ends the turn
    // if the loop processed an event since the previous look or has I/O ready (loop_idle, src/lib.rs),
    // and the loop gets events the test does not make (tasks posted to it from other threads, signals).
    // So some turn of five must carry on through all five slices; a rotation that ended every turn on
    // an idle loop fails here.
    const trips = [];
    while (trips.length < 5 && trips.at(-1) !== 0) {
      spin();
      region.bump(SLOT);
      assert.equal(await morpheus.checkpoint(), true);
      const before = native.loopIterations();
      for (let i = 0; i < 5 * STEPS_PER_SLICE; i++) {
        spin();
        assert.equal(await morpheus.checkpoint(), false);
      }
      trips.push(native.loopIterations() - before);
    }
    assert.equal(trips.at(-1), 0, `the loop ran (a step aside) in every turn that could carry on: loop passes per turn ${trips}`);
    // Ready I/O: the turn ends at its first checkpoint one slice after it was last timed, and the
    // yield's passes read the data before the task resumes.
    client.write('x');
    let steps = 0;
    while (!received) {
      spin();
      steps++;
      assert.equal(await morpheus.checkpoint(), false, 'the end of a timed turn is no yield');
      assert.ok(steps <= STEPS_PER_SLICE, `the turn went on ${steps} steps with I/O ready`);
    }
    assert.equal(region.scb(SLOT, 'yield_count'), BigInt(trips.length));
  } finally {
    client.destroy();
    server.close();
  }
});
