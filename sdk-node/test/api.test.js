// SPDX-License-Identifier: Apache-2.0 OR MIT
// The API without a scheduler, and bad input: every refusal names what is wrong and writes nothing.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const morpheus = require('@morpheus-sched/node');
const { TestRegion, fileWith, abi } = require('./region.js');

// Never discover a scheduler another process may be running on this machine.
process.env.MORPHEUS_REGION = '';

const { errors, MorpheusError } = morpheus;

// Node 20 has no `using` declarations yet: each test's workers are disposed after it, through the
// same Symbol.dispose a `using` would call.
const held = [];
function register(options) {
  const worker = morpheus.initWorker(options);
  held.push(worker);
  return worker;
}
test.afterEach(() => {
  for (const worker of held.splice(0)) worker[Symbol.dispose]();
  assert.equal(morpheus.currentWorker(), null);
});

test('one error class per ABI error_code, with its name and number', () => {
  assert.equal(Object.keys(errors).length, Object.keys(abi.ErrorCode).length);
  for (const [code, errno] of Object.entries(abi.ErrorCode)) {
    const error = MorpheusError.of(code, 'x');
    assert.ok(error instanceof MorpheusError && error instanceof Error);
    assert.equal(error.code, code);
    assert.equal(error.errno, errno);
    assert.equal(error.name, error.constructor.name);
    assert.ok(error.name.endsWith('Error'));
    assert.equal(morpheus[error.name], error.constructor);
  }
});

test('detached: checkpoints never yield, critical sections count, nothing to release', async () => {
  const worker = register();
  assert.equal(worker.attached, false);
  assert.equal(worker.detachReason, 'FORCED_BY_ENVIRONMENT');
  assert.equal(worker.slot, null);
  assert.equal(worker.escapable, false, 'Node default (spec/SCB.md §5.5)');
  assert.equal(morpheus.ESCAPABLE_DEFAULT, abi.ESCAPABLE_DEFAULT.NODE);
  for (let i = 0; i < 1000; i++) assert.equal(morpheus.shouldYield(), false);
  assert.equal(await morpheus.checkpoint(), false);
  // §7: set_escapable / set_priority are kept in the SDK's state, never DETACHED.
  worker.escapable = true;
  worker.priority = -5;
  assert.equal(worker.escapable, true);
  assert.equal(worker.priority, -5);
  worker.recordExplicitYield();
  assert.throws(() => worker.status(), errors.DetachedError);
  assert.equal(morpheus.critical(() => morpheus.criticalDepth()), 1);
});

test('a checkpoint with nothing pending takes no macrotask: it resolves before a queued setImmediate', async () => {
  const _worker = register({ detached: true });
  let immediateRan = false;
  setImmediate(() => {
    immediateRan = true;
  });
  for (let i = 0; i < 100; i++) assert.equal(await morpheus.checkpoint(), false);
  assert.equal(immediateRan, false);
  assert.strictEqual(morpheus.checkpoint(), morpheus.checkpoint(), 'the same resolved promise, nothing allocated');
});

test('registering a thread twice is refused and leaves the first registration working', () => {
  const worker = register({ detached: true });
  assert.throws(() => morpheus.initWorker({ detached: true }), (e) => e instanceof errors.AlreadyRegisteredError && /already holds/.test(e.message));
  assert.equal(worker.registered, true);
  assert.equal(morpheus.currentWorker(), worker);
  worker.close();
  assert.equal(worker.registered, false);
  assert.equal(worker.close(), false, 'close is idempotent');
  assert.throws(() => worker.slot, errors.NotRegisteredError);
  const again = register({ detached: true });
  assert.equal(again.registered, true);
});

test('a missing region is an IO error naming the path, never a silent detach', () => {
  assert.throws(() => morpheus.initWorker({ region: '/nonexistent/morpheus/region' }), (e) => e instanceof errors.IoError && e.message.includes('/nonexistent/morpheus/region'));
  assert.throws(() => morpheus.attach('/nonexistent/morpheus/region'), errors.IoError);
  assert.equal(morpheus.currentWorker(), null);
  assert.equal(morpheus.attach(''), null);
});

test('garbage and truncated regions are refused by their first broken field, byte for byte untouched', () => {
  const cases = [
    [crypto.randomBytes(4096), errors.BadMagicError],
    [Buffer.alloc(10), errors.RegionTruncatedError],
    [Buffer.alloc(0), errors.RegionTruncatedError],
  ];
  for (const [bytes, Class] of cases) {
    if (Class === errors.BadMagicError) bytes.writeBigUInt64LE(0n, 0);
    const file = fileWith(bytes);
    try {
      assert.throws(() => morpheus.initWorker({ region: file.path, slot: 0 }), Class);
      assert.throws(() => morpheus.attach(file.path), Class);
      assert.deepEqual(require('node:fs').readFileSync(file.path), bytes);
    } finally {
      file.close();
    }
  }
  const region = new TestRegion();
  try {
    region.header('abi_major', abi.ABI_MAJOR + 1);
    const before = region.bytes();
    assert.throws(() => morpheus.initWorker({ region: region.path, slot: 0 }), (e) => e instanceof errors.AbiMajorMismatchError && e.message.includes(String(abi.ABI_MAJOR + 1)));
    assert.deepEqual(region.bytes(), before);
  } finally {
    region.close();
  }
});

test('malformed options are refused by name before anything is registered', () => {
  const bad = [
    [null, /expected an object/],
    [{ slott: 1 }, /unknown option slott/],
    [{ slot: -1 }, /slot index >= 0, got -1/],
    [{ slot: 1.5 }, /slot must be a integer/],
    [{ escapable: 'yes' }, /escapable must be a boolean/],
    [{ priority: abi.PRIORITY_MAX + 1 }, /priority in -20\.\.=19, found 20/],
    [{ priority: abi.PRIORITY_MIN - 1 }, /priority in -20\.\.=19, found -21/],
    [{ priority: 0.5 }, /priority must be a integer/],
    [{ region: 42 }, /region must be a string or Region/],
    [{ region: '/x', detached: true }, /not both/],
    [{ slot: 0, socket: '/x' }, /not both/],
  ];
  for (const [options, message] of bad) {
    assert.throws(() => morpheus.initWorker(options), (e) => e instanceof errors.InvalidArgumentError && message.test(e.message), JSON.stringify(options));
  }
  assert.equal(morpheus.currentWorker(), null);
  assert.throws(() => morpheus.checkpointEvery(0), errors.InvalidArgumentError);
  assert.throws(() => morpheus.critical('not a function'), errors.InvalidArgumentError);
  assert.throws(() => morpheus.setPriority(1), errors.NotRegisteredError);
});

test('conflicting options and out-of-range values are refused by the addon (the kit), the region untouched', () => {
  const region = new TestRegion();
  try {
    const before = region.bytes();
    const mapped = morpheus.attach(region.path);
    const bad = [
      [{ region: region.path, detached: true }, /initWorker\(options\): give region or detached, not both/],
      [{ region: mapped, detached: true }, /give region or detached, not both/],
      [{ region: '', detached: true }, /give region or detached, not both/],
      [{ region: region.path, slot: 0, socket: '/nonexistent/morpheus/agent.sock' }, /initWorker\(options\): give slot or socket, not both/],
      [{ region: region.path, slot: 2 ** 32 }, /slot index <= 4294967295/],
      [{ region: region.path, slot: 0, priority: abi.PRIORITY_MAX + 1 }, /priority in -20\.\.=19/],
    ];
    for (const [options, message] of bad) {
      assert.throws(() => morpheus.initWorker(options), (e) => e instanceof errors.InvalidArgumentError && e.code === 'INVALID_ARGUMENT' && message.test(e.message), String(message));
      assert.equal(morpheus.currentWorker(), null);
      assert.deepEqual(region.bytes(), before);
    }
    // The same region and slot register once the conflict is gone: the refusals above were the rules'.
    register({ region: region.path, slot: 0 });
    assert.notDeepEqual(region.bytes(), before);
  } finally {
    region.close();
  }
});

test('unbalanced critical sections: an exit without an enter fails and changes nothing', () => {
  assert.equal(morpheus.criticalDepth(), 0);
  assert.throws(() => morpheus.criticalExit(), errors.NotInCriticalError);
  assert.equal(morpheus.criticalDepth(), 0);
  assert.equal(morpheus.criticalEnter(), 1);
  assert.equal(morpheus.criticalEnter(), 2);
  assert.equal(morpheus.criticalExit(), 1);
  assert.equal(morpheus.criticalExit(), 0);
  assert.throws(() => morpheus.criticalExit(), errors.NotInCriticalError);
  // A function that exits one section too many: its exit fails inside, critical() reports it.
  assert.throws(() => morpheus.critical(() => {
    morpheus.criticalExit();
  }), errors.NotInCriticalError);
  assert.equal(morpheus.criticalDepth(), 0);
});

test('critical(fn) nests, and exits on return, throw, resolve and reject', async () => {
  const depth = morpheus.critical(() => morpheus.critical(() => morpheus.criticalDepth()));
  assert.equal(depth, 2);
  assert.equal(morpheus.criticalDepth(), 0);
  assert.throws(() => morpheus.critical(() => {
    throw new RangeError('boom');
  }), RangeError);
  assert.equal(morpheus.criticalDepth(), 0);
  const value = await morpheus.critical(async () => {
    await new Promise((r) => setImmediate(r));
    return morpheus.criticalDepth();
  });
  assert.equal(value, 1);
  assert.equal(morpheus.criticalDepth(), 0);
  await assert.rejects(morpheus.critical(async () => {
    throw new RangeError('async boom');
  }), RangeError);
  assert.equal(morpheus.criticalDepth(), 0);
});

test('checkpointEvery(n) checkpoints every n-th call', async () => {
  const _worker = register({ detached: true });
  const tick = morpheus.checkpointEvery(3);
  assert.equal(tick.every, 3);
  for (let i = 0; i < 10; i++) {
    assert.equal(await tick(), false);
    assert.equal(tick.sync(), false);
  }
});
