// SPDX-License-Identifier: Apache-2.0 OR MIT
// Checkpoints against a region file the test plays the scheduler on (direct registration): the
// registration's bytes, the fast path's view, the async yield-then-acknowledge order (§5.1), critical
// sections (§5.3) and restarts (§6).
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const morpheus = require('@morpheus-sched/node');
const { TestRegion, abi } = require('./region.js');

process.env.MORPHEUS_REGION = '';
const { errors } = morpheus;
const SLOT = 1;

let region;
let worker;
test.beforeEach(() => {
  region = new TestRegion();
});
test.afterEach(() => {
  if (worker) worker[Symbol.dispose]();
  worker = undefined;
  region.close();
  assert.equal(morpheus.criticalDepth(), 0);
});

function register(options = {}) {
  worker = morpheus.initWorker({ region: region.path, slot: SLOT, ...options });
  return worker;
}

const immediate = () => new Promise((resolve) => setImmediate(resolve));

test('registration: RUNNING with the Node kind, escapable and priority from the options, before RUNNING', () => {
  register({ priority: -7 });
  assert.equal(worker.attached, true);
  assert.equal(worker.slot, SLOT);
  assert.equal(region.scb(SLOT, 'worker_state'), abi.WorkerState.RUNNING);
  assert.equal(region.scb(SLOT, 'runtime_kind'), abi.RuntimeKind.NODE);
  assert.equal(region.scb(SLOT, 'escapable'), 0, 'Node default: not escapable');
  assert.equal(region.scb(SLOT, 'priority'), -7);
  assert.equal(region.scb(SLOT, 'pid'), process.pid);
  worker.close();
  assert.equal(region.scb(SLOT, 'worker_state'), abi.WorkerState.INIT, 'direct shutdown frees the slot');
  register({ escapable: true });
  assert.equal(region.scb(SLOT, 'escapable'), 1);
});

test('sync: one request yields exactly once and is acknowledged; an idle checkpoint writes nothing', () => {
  register();
  const idle = region.bytes();
  for (let i = 0; i < 100; i++) assert.equal(morpheus.shouldYield(), false);
  assert.deepEqual(region.bytes(), idle);
  region.bump(SLOT, 3);
  assert.equal(morpheus.shouldYield(), true);
  assert.equal(region.scb(SLOT, 'last_ack_seq'), 3n);
  assert.equal(region.scb(SLOT, 'yield_count'), 1n);
  assert.equal(region.scb(SLOT, 'last_yield_reason'), abi.YieldReason.PREEMPT_REQUEST);
  assert.equal(morpheus.shouldYield(), false);
  assert.equal(worker.acknowledgedSeq, 3n);
  assert.deepEqual(worker.yieldCounts().PREEMPT_REQUEST, 1);
});

test('async: yields before acknowledging; the loop acknowledges at its first callback, the task resumes after YIELD_PASSES passes', async () => {
  register();
  region.bump(SLOT);
  const order = [];
  const promise = morpheus.checkpoint();
  assert.equal(region.scb(SLOT, 'last_ack_seq'), 0n, 'nothing acknowledged before the yield');
  // Queued behind the yield's first pass: the loop has had control, the yielder has not resumed.
  let passes = 0;
  let resumed = false;
  const count = () => {
    passes++;
    if (passes === 1) order.push(`loop callback saw ack ${region.scb(SLOT, 'last_ack_seq')}`);
    if (!resumed) setImmediate(count);
  };
  setImmediate(count);
  const yielded = await promise;
  resumed = true;
  order.push(`resumed after ${passes} passes`);
  assert.equal(yielded, true);
  assert.deepEqual(order, ['loop callback saw ack 1', `resumed after ${morpheus.YIELD_PASSES - 1} passes`]);
  assert.equal(await morpheus.checkpoint(), false);
});

test('async: a request bumped during the suspension stays pending for the next checkpoint', async () => {
  register();
  region.bump(SLOT);
  const promise = morpheus.checkpoint();
  region.bump(SLOT);
  assert.equal(await promise, true);
  assert.equal(region.scb(SLOT, 'last_ack_seq'), 1n, 'acknowledges what it saw when it decided');
  assert.equal(morpheus.shouldYield(), true);
  assert.equal(region.scb(SLOT, 'last_ack_seq'), 2n);
});

test('several tasks that see one request: the first steps aside, the others acknowledge it and go on (§5.7)', async () => {
  register();
  region.bump(SLOT);
  const results = await Promise.all([morpheus.checkpoint(), morpheus.checkpoint(), morpheus.checkpoint()]);
  assert.deepEqual(results, [true, false, false]);
  assert.equal(region.scb(SLOT, 'last_ack_seq'), 1n);
  assert.equal(region.scb(SLOT, 'yield_count'), 1n);
  assert.equal(await morpheus.checkpoint(), false);
});

test('critical sections: the flag is written by the outermost enter and exit; a request waits for the exit', async () => {
  register();
  morpheus.critical(() => {
    assert.equal(region.scb(SLOT, 'in_critical'), 1);
    morpheus.critical(() => assert.equal(region.scb(SLOT, 'in_critical'), 1));
    assert.equal(region.scb(SLOT, 'in_critical'), 1);
    region.bump(SLOT);
    assert.equal(morpheus.shouldYield(), false);
  });
  assert.equal(region.scb(SLOT, 'in_critical'), 0);
  await morpheus.critical(async () => {
    assert.equal(await morpheus.checkpoint(), false);
  });
  assert.equal(region.scb(SLOT, 'last_ack_seq'), 0n);
  assert.equal(await morpheus.checkpoint(), true);
});

test('registering inside an open critical section publishes in_critical = 1 at RUNNING', () => {
  morpheus.criticalEnter();
  try {
    register();
    assert.equal(region.scb(SLOT, 'in_critical'), 1);
  } finally {
    morpheus.criticalExit();
  }
  assert.equal(region.scb(SLOT, 'in_critical'), 0);
});

test('restart: a changed generation detaches the worker, which writes nothing more (§6)', async () => {
  register();
  region.header('generation', 7n);
  region.bump(SLOT);
  const before = region.bytes();
  assert.equal(morpheus.shouldYield(), false);
  assert.equal(worker.attached, false);
  assert.throws(() => worker.status(), errors.GenerationChangedError);
  assert.throws(() => (worker.escapable = true), errors.GenerationChangedError);
  assert.throws(() => worker.setPriority(3), errors.GenerationChangedError);
  morpheus.critical(() => assert.equal(morpheus.criticalDepth(), 1));
  region.bump(SLOT);
  assert.equal(morpheus.shouldYield(), false);
  assert.equal(await morpheus.checkpoint(), false);
  region.header('generation', 1n);
  region.bump(SLOT);
  assert.equal(morpheus.shouldYield(), false, 'a lost worker stays lost');
  const after = region.bytes();
  // Only what the test itself wrote differs (generation, and its requests' preempt_seq and last_hint_ns).
  region.header('generation', 7n);
  region.rewind(SLOT, before, 'preempt_seq', 'last_hint_ns');
  assert.deepEqual(region.bytes(), before);
  region.header('generation', 1n);
  assert.notDeepEqual(after, before);
  worker.close();
  assert.equal(region.scb(SLOT, 'worker_state'), abi.WorkerState.RUNNING, 'no write to the lost region at shutdown');
});

test('async suspension spanning a restart: it yielded, and acknowledges nothing', async () => {
  register();
  region.bump(SLOT);
  const promise = morpheus.checkpoint();
  region.header('generation', 9n);
  assert.equal(await promise, true);
  assert.equal(region.scb(SLOT, 'last_ack_seq'), 0n);
  assert.equal(region.scb(SLOT, 'yield_count'), 0n);
});

test('priority and escapable setters write the SCB; an out-of-range priority writes nothing', () => {
  register();
  worker.priority = abi.PRIORITY_MIN;
  assert.equal(region.scb(SLOT, 'priority'), abi.PRIORITY_MIN);
  morpheus.setEscapable(true);
  assert.equal(region.scb(SLOT, 'escapable'), 1);
  const before = region.bytes();
  assert.throws(() => (worker.priority = abi.PRIORITY_MAX + 1), errors.InvalidArgumentError);
  assert.throws(() => morpheus.setPriority(0.5), errors.InvalidArgumentError);
  assert.throws(() => worker.setEscapable(1), errors.InvalidArgumentError);
  assert.deepEqual(region.bytes(), before);
});

test('slot refusals: out of range and busy, with nothing written', () => {
  const before = region.bytes();
  assert.throws(() => morpheus.initWorker({ region: region.path, slot: 4 }), errors.SlotOutOfRangeError);
  region.scb(SLOT, 'worker_state', abi.WorkerState.RUNNING);
  const busy = region.bytes();
  assert.throws(() => morpheus.initWorker({ region: region.path, slot: SLOT }), errors.SlotBusyError);
  assert.deepEqual(region.bytes(), busy);
  region.scb(SLOT, 'worker_state', abi.WorkerState.INIT);
  assert.deepEqual(region.bytes(), before);
  assert.equal(morpheus.currentWorker(), null);
});

test('the view outlives neither the registration nor the mapping: after close and unlink, checks read zeroes', async () => {
  register();
  region.bump(SLOT);
  worker.close();
  region.close(); // unlinks the file: the mapping lives on while a view of it exists
  region = new TestRegion();
  if (global.gc) global.gc();
  await immediate();
  assert.equal(morpheus.shouldYield(), false);
  assert.equal(await morpheus.checkpoint(), false);
});

test('yieldRequested(): one load that acknowledges nothing; checkpoint() then serves the request', async () => {
  register();
  assert.equal(morpheus.yieldRequested(), false);
  region.bump(SLOT);
  const before = region.bytes();
  assert.equal(morpheus.yieldRequested(), true);
  assert.equal(morpheus.yieldRequested(), true, 'still pending: nothing was acknowledged');
  assert.deepEqual(region.bytes(), before, 'nothing written');
  assert.equal(await morpheus.checkpoint(), true);
  assert.equal(morpheus.yieldRequested(), false);
  assert.equal(region.scb(SLOT, 'last_ack_seq'), 1n);
});

test('the fast path compares all 64 bits of preempt_seq: a request that leaves either half unchanged is seen', async () => {
  register();
  const sequences = [
    1n << 32n, // low half unchanged
    (1n << 32n) + 1n, // high half unchanged
    2n << 32n, // low half unchanged again, now from a nonzero high half
    0x7ff0_0000_0000_0005n, // bits of a NaN: compares unequal to everything, the addon decides
    0x7ff0_0000_0000_0006n,
  ];
  for (const [i, seq] of sequences.entries()) {
    region.scb(SLOT, 'preempt_seq', seq);
    if (i % 2 === 0) {
      assert.equal(morpheus.yieldRequested(), true, `sync, sequence ${seq}`);
      assert.equal(morpheus.shouldYield(), true, `sync, sequence ${seq}`);
    } else {
      assert.equal(await morpheus.checkpoint(), true, `async, sequence ${seq}`);
    }
    assert.equal(region.scb(SLOT, 'last_ack_seq'), seq);
    assert.equal(morpheus.shouldYield(), false, `acknowledged ${seq}`);
    assert.equal(await morpheus.checkpoint(), false, `acknowledged ${seq}`);
  }
  assert.equal(worker.yieldCounts().PREEMPT_REQUEST, sequences.length);
});

test('DEFENSIVE mode (§5.4): yieldRequested() asks the core; a request is still served once, and the fast path comes back with DETERMINISTIC', async () => {
  // A slice (1 s) no step of this test lasts: the SDK's own clock never asks for a DEFENSIVE yield.
  region.header('slice_ns', 1_000_000_000n);
  register();
  // Lost hints, seen at the next yield's mode evaluation.
  region.scb(SLOT, 'hints_dropped', 1);
  region.bump(SLOT);
  assert.equal(morpheus.shouldYield(), true);
  assert.equal(worker.runtimeMode, 'DEFENSIVE');
  const before = region.bytes();
  assert.equal(morpheus.yieldRequested(), false, 'nothing pending, within the slice: the core says no yield');
  region.bump(SLOT);
  assert.equal(morpheus.yieldRequested(), true, 'a request is pending');
  assert.equal(morpheus.yieldRequested(), true, 'still pending: the question acknowledged nothing');
  region.rewind(SLOT, before, 'preempt_seq', 'last_hint_ns');
  assert.deepEqual(region.bytes(), before, 'yieldRequested() writes nothing');
  // A request while DEFENSIVE: served by one async yield; no lost hint since, so DETERMINISTIC again.
  region.bump(SLOT);
  assert.equal(await morpheus.checkpoint(), true);
  assert.equal(region.scb(SLOT, 'last_ack_seq'), 2n);
  assert.equal(worker.runtimeMode, 'DETERMINISTIC');
  assert.equal(morpheus.yieldRequested(), false, 'the fast path is back');
  assert.equal(await morpheus.checkpoint(), false);
});

test('the addon writes the kit\'s fast state into JS\'s Float64Array by its own indexes; one too short is refused by name, before anything is acknowledged', async () => {
  const native = require(require.resolve('@morpheus-sched/node').replace(/index\.js$/, 'native.js'));
  const F = native.FastStateField;
  assert.deepEqual(
    Object.keys(F).filter((k) => Number.isNaN(Number(k))),
    ['Expected', 'Settled', 'Quiet', 'Turn', 'Word', 'Notices', 'KeeperTurns', 'Len'],
    'the indexes are the addon\'s (one source)',
  );
  register();
  const state = new Float64Array(F.Len);
  const low = new Int32Array(state.buffer);
  native.fastState(state, -1);
  // Attached, DETERMINISTIC, nothing acknowledged, no turn timed: the one load decides alone.
  assert.equal(state[F.Expected], 0);
  assert.equal(state[F.Settled], 0);
  assert.equal(state[F.Quiet], Infinity);
  assert.equal(state[F.Turn], Infinity);
  assert.notEqual(state[F.Word], 0, 'the slot\'s word');
  const word = new Float64Array(native.fastWord(state, -1));
  assert.equal(word.length, 1, 'a view of the 8 bytes of the word');
  const short = new Float64Array(F.Len - 1).fill(-1);
  const refused = (operation) => (e) => e.code === 'INVALID_ARGUMENT' && e.message === `${operation}(state): expected a Float64Array of at least ${F.Len} elements, got ${F.Len - 1}`;
  assert.throws(() => native.fastState(short, -1), refused('fastState'));
  assert.throws(() => native.fastWord(short, -1), refused('fastWord'));
  // The rotation (the kit's) holds the yielder's request unacknowledged until the loop has control.
  region.bump(SLOT);
  assert.equal(word[0], new Float64Array(new BigUint64Array([1n]).buffer)[0], 'the view reads the slot\'s preempt_seq');
  const yielder = morpheus.checkpoint();
  const before = region.bytes();
  assert.throws(() => native.checkpointSync(short, -1), refused('checkpointSync'));
  assert.throws(() => native.checkpointWouldYield(short, false, -1), refused('checkpointWouldYield'));
  assert.deepEqual(short, new Float64Array(F.Len - 1).fill(-1), 'nothing written into the short array');
  assert.deepEqual(region.bytes(), before, 'nothing acknowledged');
  native.fastState(state, -1);
  assert.equal(state[F.Turn], -Infinity, 'during the passes every asynchronous check goes to the rotation');
  assert.ok(Number.isNaN(state[F.Expected]), 'so the one load never decides alone (FORCE_SLOW_PATH)');
  assert.equal(low[2 * F.Expected], -1, 'its low half, as the synchronous check\'s Atomics.load compares');
  assert.equal(state[F.Settled], 0, 'a synchronous check sees the unacknowledged request');
  assert.equal(native.checkpointSync(state, -1), false, 'the kept request is acknowledged first, and no newer one is pending');
  assert.equal(region.scb(SLOT, 'last_ack_seq'), 1n);
  assert.equal(state[F.Settled], new Float64Array(new BigUint64Array([1n]).buffer)[0], 'and the fast state written with it: the new acknowledged sequence');
  const again = new Float64Array(F.Len + 1);
  native.fastState(again, -1);
  assert.deepEqual(again.subarray(0, F.Len), state, 'the same as fastState() reads');
  assert.equal(await yielder, true);
  assert.equal(region.scb(SLOT, 'yield_count'), 1n);
});

test('yieldRequested() inside a critical section: the deferred request is pending, so a hot loop leaves for checkpoint()', async () => {
  register();
  region.bump(SLOT);
  morpheus.critical(() => {
    assert.equal(morpheus.yieldRequested(), true, 'a request is pending, deferred or not');
    assert.equal(morpheus.shouldYield(), false, 'the section defers it');
  });
  assert.equal(morpheus.shouldYield(), true, 'served after the section');
});

/** Count the calls of the addon's checkpoint slow paths from now on (the object lib/index.js calls). */
function countNativeCheckpoints() {
  const native = require(require.resolve('@morpheus-sched/node').replace(/index\.js$/, 'native.js'));
  const names = ['checkpointWouldYield', 'checkpointSync', 'rotationCheckpoint'];
  const counts = Object.fromEntries(names.map((name) => [name, 0]));
  const originals = names.map((name) => native[name]);
  names.forEach((name, i) => {
    native[name] = (...args) => {
      counts[name]++;
      return originals[i](...args);
    };
  });
  counts.restore = () => names.forEach((name, i) => (native[name] = originals[i]));
  return counts;
}

test('DEFENSIVE mode (§5.4): before the core\'s next mode decision a check with nothing pending crosses into no native call; a request is still seen at once', async () => {
  // A slice (60 s) the test never lasts, however loaded the machine: the mode's next decision is a
  // slice after the yield.
  region.header('slice_ns', 60_000_000_000n);
  register();
  region.scb(SLOT, 'hints_dropped', 1);
  region.bump(SLOT);
  assert.equal(morpheus.shouldYield(), true);
  assert.equal(worker.runtimeMode, 'DEFENSIVE');
  const counts = countNativeCheckpoints();
  try {
    const before = region.bytes();
    for (let i = 0; i < 1000; i++) assert.equal(morpheus.yieldRequested(), false);
    for (let i = 0; i < 100; i++) assert.equal(morpheus.shouldYield(), false);
    for (let i = 0; i < 100; i++) assert.equal(await morpheus.checkpoint(), false);
    assert.deepEqual({ ...counts, restore: undefined }, { checkpointWouldYield: 0, checkpointSync: 0, rotationCheckpoint: 0, restore: undefined }, 'no check reached the addon');
    assert.deepEqual(region.bytes(), before, 'and none wrote anything');
    // A request is seen by the first check, and served by the core.
    region.bump(SLOT);
    assert.equal(morpheus.yieldRequested(), true);
    assert.equal(morpheus.shouldYield(), true);
    assert.equal(region.scb(SLOT, 'last_ack_seq'), 2n);
    assert.equal(counts.checkpointSync, 1);
  } finally {
    counts.restore();
  }
});

test('DEFENSIVE mode (§5.4): once the core\'s next mode decision is due, checks reach the core again, which yields on its own clock', async () => {
  // A slice of 100 µs: the test waits for the clock to pass it (no race: the clock only advances).
  region.header('slice_ns', 100_000n);
  register();
  region.scb(SLOT, 'hints_dropped', 1);
  region.bump(SLOT);
  assert.equal(morpheus.shouldYield(), true);
  assert.equal(worker.runtimeMode, 'DEFENSIVE');
  // Keep the mode DEFENSIVE at its next evaluation: more hints dropped.
  region.scb(SLOT, 'hints_dropped', 2);
  const start = performance.now();
  while (performance.now() - start < 2) {
    // a slice (0.1 ms) and more of wall time
  }
  const counts = countNativeCheckpoints();
  try {
    assert.equal(morpheus.yieldRequested(), true, 'a DEFENSIVE yield is due: the core was asked');
    assert.equal(counts.checkpointWouldYield, 1);
    assert.equal(await morpheus.checkpoint(), true);
    assert.equal(worker.yieldCounts().DEFENSIVE, 1);
  } finally {
    counts.restore();
  }
});

test('a slow path that changes the state without yielding (the worker lost to a restart) moves the fast path to zeroes', async () => {
  for (const check of [() => morpheus.shouldYield(), () => morpheus.checkpoint()]) {
    register();
    region.header('generation', 7n);
    region.bump(SLOT);
    assert.equal(await check(), false, 'lost: no yield');
    // No other call in between: the check itself must have re-read what the fast path compares.
    assert.equal(morpheus.yieldRequested(), false, 'a lost worker reads zeroes: nothing is ever requested');
    worker.close();
    region.close();
    region = new TestRegion();
  }
});

test('a task computing during a yield\'s passes steps aside at its first checkpoint and resumes after the yielder (§5.7)', async () => {
  register();
  // A slice no step of this test lasts: the order checked is the rotation's, never a timed turn's end
  // (a slow or loaded machine must not end B's or A's turn by the clock).
  region.header('slice_ns', 60_000_000_000n);
  region.bump(SLOT);
  const order = [];
  const yielder = (async () => {
    order.push('A yields');
    order.push(`A resumed ${await morpheus.checkpoint()}`);
  })();
  // Made ready during A's yield (queued behind its first pass): a newcomer's first step.
  const newcomer = new Promise((resolve) => {
    setImmediate(async () => {
      order.push('B starts');
      assert.equal(morpheus.yieldRequested(), true, 'during the passes a hot loop is sent to checkpoint()');
      order.push(`B resumed ${await morpheus.checkpoint()}`);
      resolve();
    });
  });
  await Promise.all([yielder, newcomer]);
  assert.deepEqual(order, ['A yields', 'B starts', 'A resumed true', 'B resumed false']);
  assert.equal(region.scb(SLOT, 'yield_count'), 1n, 'stepping aside serves no request and writes nothing');
  // After the passes the fast path is back; and a synchronous check during passes never steps aside.
  assert.equal(morpheus.yieldRequested(), false);
  assert.equal(await morpheus.checkpoint(), false);
  region.bump(SLOT);
  const again = morpheus.checkpoint();
  assert.equal(morpheus.shouldYield(), false, 'sync, during the passes: no request pending, no yield');
  assert.equal(await again, true);
});

test('inside a critical section a task computing during a yield\'s passes does not step aside', async () => {
  register();
  region.bump(SLOT);
  const order = [];
  const yielder = morpheus.checkpoint().then((yielded) => order.push(`A resumed ${yielded}`));
  const inside = new Promise((resolve) => {
    setImmediate(() => resolve(morpheus.critical(() => morpheus.checkpoint())));
  }).then((yielded) => order.push(`B in a critical section went on: ${yielded}`));
  await Promise.all([yielder, inside]);
  assert.deepEqual(order, ['B in a critical section went on: false', 'A resumed true']);
});
