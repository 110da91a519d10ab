// SPDX-License-Identifier: Apache-2.0 OR MIT
// @morpheus-sched/node: kernel-guided cooperative yielding for Node's event loop (spec/SCB.md).
//
// The protocol is the Rust SDK's (through the addon), and so is the §5.7 rotation (sdk-rust's binding
// kit, driven by the addon). This file holds only what must be JavaScript: the checkpoint's inline
// fast path, which reads the SCB's `preempt_seq` through an external ArrayBuffer over the mapped slot
// (one load, no allocation) and calls the addon only when it differs from the acknowledged value: it
// stays here on purpose, one load in each language is the point of the fast path; the loop side of
// the rotation (the promises tasks wait on, the setImmediate passes, so the I/O poll runs before the
// task resumes, spec/SCB.md §5.1); and the API around them.
//
// State is per JavaScript thread: the event loop's thread and each worker_threads thread load their
// own copy of this module and register on their own (the addon keeps one worker per OS thread).
'use strict';
const { Scb } = require('@morpheus/abi');
const native = require('./native.js');
const { MorpheusError, errors, fromNative } = require('./errors.js');
const { EventEmitter } = require('node:events');
// Node's global `performance` is a lazy accessor of the global object (a getter call per read); the
// module's own object is the same one, read once.
const { performance } = require('node:perf_hooks');

// ------------------------------------------------------------------------------------------------
// The fast path's state (this thread's)

// preempt_seq is compared whole, as the 8 bytes of one Float64Array element, against the
// acknowledged sequence's 8 bytes read the same way: one plain load and one comparison, no allocation
// (a BigInt64 load allocates a BigInt on every check; V8 does not inline Atomics.load: BENCHMARKS.md).
// Exact: two 64-bit patterns compare equal as doubles exactly when they are the same bits, except the
// NaN patterns (equal to nothing, so the check goes to the addon: never a missed request) and the two
// zeroes (0 and 2^63: a sequence 2^63 requests ahead of its acknowledgement, which no scheduler
// reaches). The core's FORCE_SLOW_PATH (u64::MAX) and its retired view's sequence (u64::MAX - 1) are
// NaNs. The load need not be an acquire: it only decides whether to call the addon, whose checkpoint
// loads preempt_seq again with acquire before it uses anything the hint published (spec/SCB.md §3.1).
// A stale or torn read (one half old) equals the ack only when the request is not seen yet, which the
// next check corrects. Platforms are little-endian (spec/SCB.md §0.1): the low half comes first.
const SEQ = Scb.fields.preempt_seq.offset / Float64Array.BYTES_PER_ELEMENT;
const SEQ_LOW = Scb.fields.preempt_seq.offset / Int32Array.BYTES_PER_ELEMENT;

/** The two views of a buffer whose first bytes hold a sequence word at preempt_seq's offset. */
function sequenceWords(buffer) {
  return { whole: new Float64Array(buffer), low: new Int32Array(buffer) };
}

// What a thread without a live view reads: a zeroed SCB, as the core's detached worker does (§7).
const ZEROES = sequenceWords(new ArrayBuffer(Scb.size));
// native.checkpointSync() outcomes (sdk-node/src/lib.rs).
const NATIVE_NO_YIELD = 0;
const NATIVE_YIELDED = 2;
// What native.fastState() and the rotation calls write (sdk-node/src/lib.rs), read by
// these constant indexes: [ack_low, ack_high, kind, registration, notices, until_low, until_high].
// One array per thread, allocated once: no array is made or destructured per slow path.
const state = new Int32Array(7);
const STATE_ACK_LOW = 0;
const STATE_ACK_HIGH = 1;
const STATE_KIND = 2;
const STATE_REGISTRATION = 3;
const STATE_NOTICES = 4;
const STATE_UNTIL_LOW = 5;
const STATE_UNTIL_HIGH = 6;
// fastState() kinds (sdk-node/src/lib.rs).
const KIND_VIEW = 0;
const KIND_ALWAYS_SLOW = 1;
const KIND_WAKE = 3;
const KIND_MODE_QUIET = 4;
// Compares unequal to every sequence (a NaN): every check reaches the addon.
const FORCE_SLOW_PATH = NaN;

// The sequence word of the current view, whole (the asynchronous check) and its low half (the
// synchronous check's Atomics.load).
let seqWhole = ZEROES.whole;
let seqLow = ZEROES.low;
// The acknowledged sequence the view is compared with: its 8 bytes as a double (settledAck), and its
// low half. The fast path compares with ack: settledAck, except during a yield's passes or a timed
// turn (§5.7), when it is FORCE_SLOW_PATH so that an asynchronous check reaches checkpointSlow, which
// steps aside (passes) or reads the clock (a timed turn). So the fast path stays one load and one
// comparison whether or not a turn is timed.
let settledAck = 0;
let ack = 0;
let ackLow = 0;
// The SCB view of the current registration (kept while it is live, dropped at close or on a restart).
let view = null;
// Which registration the view belongs to (the core's re-registration count, §6.1); -1: none.
let viewRegistration = -1;
// Outside the DETERMINISTIC mode (kind KIND_MODE_QUIET, spec/SCB.md §5.4) every check goes to the
// addon (settledAck is FORCE_SLOW_PATH), except before the core's next mode decision: until
// quietUntil (performance.now() ns; 0: no such time) a check that finds the view's sequence equal to
// quietAck (the acknowledged sequence, as a double) is the core's own "no yield", which decides and
// writes nothing then (sdk-rust's Worker::mode_quiet_until_ns), so JS answers it without a native
// call: a clock read instead of a trip into the addon per check.
let quietAck = 0;
let quietUntil = 0;
// CLOCK_MONOTONIC (the core's clock) minus performance.now() in ns: the same clock from another
// origin (libuv's hrtime). Taken once, at the first need.
let monotonicOffsetNs = null;

// The core's wake sequence (spec/SCB.md §6.1), read while the worker waits for a scheduler: taken
// once per thread (process-wide memory of the core, never freed). null until needed.
let wakeView = null;

const halves = new Int32Array(2);
const whole = new Float64Array(halves.buffer);

/** Compare the sequence in `words` with the sequence `low`, `high` (its two 32-bit halves) from now on. */
function compareWith(words, low, high) {
  seqWhole = words.whole;
  seqLow = words.low;
  halves[0] = low;
  halves[1] = high;
  ackLow = low;
  settle(whole[0]);
}

/** Every check goes to the addon. */
function alwaysSlow() {
  compareWith(ZEROES, 0, 0);
  settle(FORCE_SLOW_PATH);
}

function settle(value) {
  settledAck = value;
  updateAck();
}

/** What the fast path compares with: the acknowledged sequence, unless the rotation needs every check. */
function updateAck() {
  ack = passing || turnDeadline !== 0 ? FORCE_SLOW_PATH : settledAck;
}

/**
 * CLOCK_MONOTONIC minus performance.now() (ns). performance.now() is read before the native clock, so
 * the offset comes out too large by at most the gap between the two reads, and quietUntil too early
 * by as much (an early end costs native calls, a late one would hide a mode decision); of a few
 * warm pairs the one with the smallest gap is kept (the first use of performance.now() in a process
 * can take milliseconds).
 */
function measureMonotonicOffset() {
  let best = Infinity;
  let offset = 0;
  for (let i = 0; i < 4; i++) {
    const before = monotonicNs();
    const now = native.monotonicNs();
    const gap = monotonicNs() - before;
    if (gap < best) {
      best = gap;
      offset = now - before;
    }
  }
  return offset;
}

/**
 * Outside the DETERMINISTIC mode, whether the core would decide nothing at a check now: nothing is
 * pending and its next mode decision is not due (quietUntil, above).
 */
function modeQuiet() {
  return quietUntil !== 0 && seqWhole[SEQ] === quietAck && monotonicNs() < quietUntil;
}

/** Whether a request is pending (or the mode sends every check to the addon), passes aside. */
function pendingRequest() {
  return seqWhole[SEQ] !== settledAck;
}

function dropView() {
  view = null;
  viewRegistration = -1;
}

/**
 * Re-read what the fast path compares with; called after every slow path and registration. The core
 * may have registered the worker again (a new scheduler instance, §6.1), or lost it: the view follows.
 */
function refresh() {
  native.fastState(state);
  follow();
}

/** refresh() once `state` holds the fast state (a native call wrote it). */
function follow() {
  let kind = state[STATE_KIND];
  const registration = state[STATE_REGISTRATION];
  if ((kind === KIND_VIEW || kind === KIND_ALWAYS_SLOW || kind === KIND_MODE_QUIET) && registration !== viewRegistration) {
    // Attached, and the view is of an earlier registration or was never taken (the worker started
    // detached): take the current registration's, then re-read what to compare it with.
    const buffer = native.scbView(native.currentToken());
    view = buffer === null ? null : sequenceWords(buffer);
    viewRegistration = registration;
    native.fastState(state);
    kind = state[STATE_KIND];
  }
  const low = state[STATE_ACK_LOW];
  const high = state[STATE_ACK_HIGH];
  const notices = state[STATE_NOTICES];
  const untilLow = state[STATE_UNTIL_LOW];
  const untilHigh = state[STATE_UNTIL_HIGH];
  quietUntil = 0;
  if (kind === KIND_VIEW && view !== null) {
    compareWith(view, low, high);
  } else if (kind === KIND_MODE_QUIET && view !== null) {
    compareWith(view, low, high);
    quietAck = settledAck;
    monotonicOffsetNs ??= measureMonotonicOffset();
    quietUntil = Math.max(1, (untilHigh >>> 0) * 4294967296 + (untilLow >>> 0) - monotonicOffsetNs);
    settle(FORCE_SLOW_PATH);
  } else if (kind === KIND_WAKE) {
    // Waiting for a scheduler: compare the core's wake sequence with its ack, as its fast path does.
    if (wakeView === null) {
      const buffer = native.wakeView(native.currentToken());
      if (buffer !== null) wakeView = sequenceWords(buffer);
    }
    if (wakeView === null) alwaysSlow();
    else compareWith(wakeView, low, high);
    dropView();
  } else if (kind === KIND_ALWAYS_SLOW || kind === KIND_VIEW || kind === KIND_MODE_QUIET) {
    alwaysSlow();
  } else {
    // No worker, or one that never registers again (detached on request or by the environment):
    // zeroes, never a yield (§7).
    compareWith(ZEROES, 0, 0);
    dropView();
  }
  if (notices) emitNotices();
}

// ------------------------------------------------------------------------------------------------
// Notices: the core's lines about the scheduler's life (running detached and why, lost, registered
// again, a refused re-registration; spec/SCB.md §6.1). Each one is emitted on `notices` as
// ('notice', { level, message }), level 'info' or 'warning'; warnings also go to
// process.emitWarning(message, 'MorpheusWarning') (printed on stderr by default, as the core's own
// line was; --no-warnings or a 'warning' listener silences or routes them). Info notices are only
// emitted on `notices` (the core's default prints none).

const notices = new EventEmitter();

function emitNotices() {
  for (const [level, message] of native.takeNotices()) {
    if (level === 'warning') process.emitWarning(message, 'MorpheusWarning');
    notices.emit('notice', { level, message });
  }
}

// ------------------------------------------------------------------------------------------------
// Checkpoints

const NOT_YIELDED = Promise.resolve(false);

/**
 * The synchronous checkpoint: true means the scheduler asked this thread to yield; the request is
 * already acknowledged and the caller must yield now (return to the event loop). One atomic load of
 * shared memory when nothing is pending.
 */
function shouldYield() {
  if (!requested()) return false;
  return shouldYieldSlow();
}

/**
 * Whether the scheduler's request is pending for this thread: in the DETERMINISTIC mode one load, and
 * nothing else (it acknowledges nothing and never yields). For a hot loop kept in a plain function, which returns to
 * its async caller to `await checkpoint()` when this is true: V8 compiles work inlined into an async
 * function that awaits markedly slower (BENCHMARKS.md), and this shape keeps the loop out of it.
 * True also while a critical section defers a request, during another task's yield (its passes,
 * §5.7: a task computing then steps aside at its first `checkpoint()`), and once a timed turn has
 * lasted its slice (§5.7); `checkpoint()` then decides.
 * In the modes that disable the fast path (PRESSURED, DEFENSIVE: §5.4) it asks the addon whether a
 * checkpoint would yield now (a native call that decides and writes nothing).
 */
function yieldRequested() {
  if (!requested()) return false;
  if (passing || unacknowledged || (turnDue() && rotated(native.rotationTurnOver(state, rotation, othersQueued(), clockArg())))) return true;
  // Outside the DETERMINISTIC mode every check comes here (§5.4, settledAck is the NaN): the core
  // says whether a checkpoint would yield now, so that a hot loop leaves only to yield.
  if (settledAck !== settledAck) {
    if (modeQuiet()) return false;
    const outcome = native.checkpointWouldYield();
    if (outcome !== NATIVE_NO_YIELD) refresh();
    return outcome === NATIVE_YIELDED;
  }
  // Here also for every check of a timed turn (ack is FORCE_SLOW_PATH): only a request counts.
  return pendingRequest();
}

/**
 * The synchronous checks' test: an Atomics.load of the low half, then the whole word compared. The
 * Atomics.load is a builtin call V8 does not inline, so no compiler hoists the check out of a hot loop
 * that has no other call (a plain load alone could be); the whole word makes the test exact without
 * allocating. The asynchronous check needs only the plain load: an await precedes each repetition.
 */
function requested() {
  return Atomics.load(seqLow, SEQ_LOW) !== ackLow || seqWhole[SEQ] !== ack;
}

function shouldYieldSlow() {
  // A task that runs while another steps aside for a request does not step aside for it too (§5.7).
  if (unacknowledged) rotated(native.rotationAcknowledge(state, rotation, clockArg()));
  // Here also during a yield's passes, which a synchronous check is outside of (§5.7).
  if (!pendingRequest() || modeQuiet()) return false;
  const outcome = native.checkpointSync();
  if (outcome !== NATIVE_NO_YIELD) refresh();
  return outcome === NATIVE_YIELDED;
}

/**
 * The asynchronous checkpoint: `await checkpoint()`. When nothing is pending it returns an already
 * resolved promise (false). When the scheduler asked, this task steps aside for its turn in the
 * thread's rotation (below): it resumes, resolving true, after YIELD_PASSES passes of the event loop
 * (setImmediate semantics: the I/O poll runs; fewer when a pass finds the loop idle) and after the
 * tasks that yielded before it. A task that reaches it during another's yield (a task made ready
 * then, taking its first step) steps aside into the rotation too, resolving false at its turn, and
 * so does a task whose turn (given by the rotation) has lasted one slice of wall time without a
 * request (§5.7).
 */
function checkpoint() {
  if (seqWhole[SEQ] === ack) return NOT_YIELDED;
  return checkpointSlow();
}

function checkpointSlow() {
  // Nothing for the rotation to decide: no request, no yield's passes, no timed turn at its deadline.
  if (!passing && (!pendingRequest() || modeQuiet()) && !turnDue()) return NOT_YIELDED;
  const waiter = rotated(native.rotationCheckpoint(state, rotation, othersQueued(), clockArg()));
  return waiter === 0 ? NOT_YIELDED : wait(waiter);
}

// ------------------------------------------------------------------------------------------------
// The rotation (spec/SCB.md §5.7) is sdk-rust's binding kit's (morpheus::kit::rotation), driven by the
// addon (sdk-node/src/rotation.rs): which task yields, when the request is acknowledged, how many
// passes a yield lasts, which task resumes and when a turn ends. This file keeps what only JS can do:
// the promises tasks wait on (by the kit's tokens), the setImmediate passes and keepers the addon asks
// for, a look at the neighbours of its own immediates (other code's immediates are something else to
// run), and a copy of the kit's state for the fast path: a yield's passes under way, a request not
// yet acknowledged, the timed turn's deadline.

/** Passes of the event loop a yield lasts at most: the kit's, the same for every event-loop binding. */
const YIELD_PASSES = native.yieldPasses();

// What every rotation call writes: [passing, unacknowledged, turn deadline (ns of the kit's wall
// clock, CLOCK_MONOTONIC; 0: no turn is timed), the count a keeper hands back].
const rotation = new Float64Array(4);
let passing = false;
let unacknowledged = false;
let turnDeadline = 0;
// The tasks waiting for their turn: the kit's token -> what settles the task's promise.
const waiters = new Map();
// The tests' clock (setTurnClock), or null: the kit's own clocks.
let testClock = null;

/** `result` of a rotation call: the fast state and the rotation's state it wrote are followed. */
function rotated(result) {
  passing = rotation[0] !== 0;
  unacknowledged = rotation[1] !== 0;
  turnDeadline = rotation[2];
  follow();
  return result;
}

function clockArg() {
  return testClock === null ? -1 : testClock();
}

/** Wall time in ns: CLOCK_MONOTONIC (libuv's hrtime, which performance.now() reads), no allocation. */
function monotonicNs() {
  return performance.now() * 1e6;
}

/** Whether the timed turn reached the kit's deadline: the kit then decides whether it ends (a clock read). */
function turnDue() {
  if (turnDeadline === 0) return false;
  if (testClock !== null) return testClock() >= turnDeadline;
  monotonicOffsetNs ??= measureMonotonicOffset();
  return monotonicNs() + monotonicOffsetNs >= turnDeadline;
}

/** The task waits on the kit's `code` (token * 4 + resolves true * 2 + queue the first pass). */
function wait(code) {
  if (code % 2 === 1) passImmediate = setImmediate(pass);
  const value = code % 4 >= 2;
  return new Promise((resolve) => waiters.set(Math.floor(code / 4), () => resolve(value)));
}

// The rotation's own immediates: the pass queued or running, the keeper queued at the last resume,
// and the one whose callback resumed the running task (a pass or a keeper). Node keeps its pending
// immediates in a linked list (each Immediate's _idlePrev/_idleNext; the list a check phase runs is
// taken whole when the phase starts, and what is queued meanwhile goes to a new one), so a look at
// the neighbours of these tells whether other code queued an immediate: something else to run.
let passImmediate = null;
let keeperImmediate = null;
let resumingImmediate = null;

/**
 * Whether no immediate of other code is queued next to `own`: after it (in the list it is in), and,
 * when `pending` (it has not run yet), before it. No immediate at all, or one without these links,
 * counts as others queued: the rotation then behaves as if the loop were busy.
 */
function onlyOwnImmediates(own, pending) {
  if (own === null || own._idleNext !== null) return false;
  return !pending || own._idlePrev === null;
}

function othersQueued() {
  return !onlyOwnImmediates(keeperImmediate, true) || !onlyOwnImmediates(resumingImmediate, false);
}

/** A pass: the next one is queued first, so that its neighbours show other code's immediates. */
function pass() {
  const running = passImmediate;
  passImmediate = setImmediate(pass);
  const others = !onlyOwnImmediates(running, false) || !onlyOwnImmediates(passImmediate, true);
  const next = rotated(native.rotationPass(state, rotation, others, clockArg()));
  if (next < 0) return;
  clearImmediate(passImmediate);
  passImmediate = null;
  resumingImmediate = running;
  resume(next);
}

/** Resume the kit's choice (token 0: nobody waits), with a keeper behind its step. */
function resume(token) {
  const settle = waiters.get(token);
  if (settle === undefined) return;
  waiters.delete(token);
  settle();
  const own = { immediate: null };
  own.immediate = setImmediate(keeper, rotation[3], own);
  keeperImmediate = own.immediate;
}

/** After a resumed task's step: if it gave control back without a yield, the next resumes (§5.7). */
function keeper(turns, own) {
  const next = rotated(native.rotationKeeper(state, rotation, turns, clockArg()));
  if (next === 0) return;
  resumingImmediate = own.immediate;
  resume(next);
}

/**
 * Tests only: measure turns with `clock()` (ns) instead of this thread's CPU time and of the wall
 * clock that times a turn, so that which task resumes, and when a turn ends, never depend on how
 * fast the machine ran; no argument restores both clocks.
 */
function setTurnClock(clock) {
  testClock = clock ?? null;
}

/**
 * A checkpoint for hot loops that is real every `every`-th call: `const tick = checkpointEvery(100)`,
 * then `await tick()` (async) or `if (tick.sync()) ...` (sync) in the loop.
 */
function checkpointEvery(every) {
  if (!Number.isSafeInteger(every) || every < 1) {
    throw MorpheusError.of('INVALID_ARGUMENT', `checkpointEvery(every): expected an integer >= 1, got ${String(every)}`);
  }
  let count = 0;
  const tick = () => {
    if (++count < every) return NOT_YIELDED;
    count = 0;
    return checkpoint();
  };
  tick.sync = () => {
    if (++count < every) return false;
    count = 0;
    return shouldYield();
  };
  tick.every = every;
  return tick;
}

// ------------------------------------------------------------------------------------------------
// Critical sections

/** Enter a critical section on this thread (prefer `critical(fn)`); returns the nesting depth. */
function criticalEnter() {
  return native.criticalEnter();
}

/** Exit one level; `NotInCriticalError` (nothing written) without a matching enter. */
function criticalExit() {
  return call(native.criticalExit);
}

/** `fn(...args)`, an addon call, with its error turned into the JS class of its code. */
function call(fn, ...args) {
  try {
    return fn(...args);
  } catch (error) {
    throw fromNative(error);
  }
}

/** This thread's critical-section nesting depth. */
function criticalDepth() {
  return native.criticalDepth();
}

/**
 * Run `fn` inside a critical section: no checkpoint of this thread yields until it returns (or, for
 * an async function, until its promise settles: the whole event-loop thread is the worker, so the
 * section covers the other tasks that run meanwhile too). The section is exited on throw/rejection.
 */
function critical(fn) {
  if (typeof fn !== 'function') {
    throw MorpheusError.of('INVALID_ARGUMENT', `critical(fn): expected a function, got ${typeof fn}`);
  }
  native.criticalEnter();
  let result;
  try {
    result = fn();
  } catch (error) {
    exitAfterFailure();
    throw error;
  }
  if (result !== null && typeof result === 'object' && typeof result.then === 'function') {
    return Promise.resolve(result).then(
      (value) => {
        criticalExit();
        return value;
      },
      (error) => {
        exitAfterFailure();
        throw error;
      },
    );
  }
  criticalExit();
  return result;
}

// The function's own error wins over an unbalanced exit inside it.
function exitAfterFailure() {
  try {
    native.criticalExit();
  } catch {
    // fn exited more sections than it entered; its error is the one to report.
  }
}

// ------------------------------------------------------------------------------------------------
// Regions and workers

/**
 * Map and validate a region without registering (spec/SCB.md §1.3; nothing is written). `path`: that
 * file or pinned map; `''`: detached (null); omitted: discovery (§1.2), null when there is no scheduler.
 */
function attach(path) {
  if (path !== undefined && typeof path !== 'string') {
    throw MorpheusError.of('INVALID_ARGUMENT', `attach(path): expected a string, got ${typeof path}`);
  }
  return call(native.attach, path);
}

const OPTION_TYPES = {
  region: 'string or Region',
  detached: 'boolean',
  slot: 'integer',
  socket: 'string',
  escapable: 'boolean',
  priority: 'integer',
};

function invalidOption(name, value) {
  return MorpheusError.of(
    'INVALID_ARGUMENT',
    `initWorker(options): ${name} must be a ${OPTION_TYPES[name]}, got ${value === null ? 'null' : typeof value} ${String(value)}`,
  );
}

/**
 * Turn `initWorker` options into the addon's, refusing by name an unknown option or a value of the
 * wrong JS type. Their conflicts and ranges are the Rust binding kit's, checked by the addon.
 */
function nativeOptions(options) {
  if (options === null || typeof options !== 'object') {
    throw MorpheusError.of('INVALID_ARGUMENT', `initWorker(options): expected an object, got ${options === null ? 'null' : typeof options}`);
  }
  const out = {};
  let regionObject = null;
  for (const [key, value] of Object.entries(options)) {
    if (!Object.hasOwn(OPTION_TYPES, key)) {
      throw MorpheusError.of('INVALID_ARGUMENT', `initWorker(options): unknown option ${key} (known: ${Object.keys(OPTION_TYPES).join(', ')})`);
    }
    if (value === undefined) continue;
    if (key === 'region' && value instanceof native.Region) regionObject = value;
    else if (!hasType(OPTION_TYPES[key], value)) throw invalidOption(key, value);
    else out[key === 'region' ? 'regionPath' : key] = value;
  }
  return [out, regionObject];
}

/** Whether `value` is of an OPTION_TYPES type (a Region is told apart by the caller). */
function hasType(type, value) {
  if (type === 'integer') return Number.isSafeInteger(value);
  return typeof value === type.split(' ')[0];
}

const dispose = Symbol.dispose ?? Symbol.for('nodejs.dispose');
let current = null;

/**
 * This thread's registration. Get one with `initWorker()`; `close()` (or `using`, or the end of the
 * thread or process) shuts it down and frees its slot.
 */
class Worker {
  #token;

  /** @internal */
  constructor(token) {
    this.#token = token;
  }

  #call(fn, ...args) {
    return call(fn, this.#token, ...args);
  }

  // The read-only properties that are the addon's accessor of the same name (documented in
  // index.d.ts): slot, slotGeneration, detachReason, detachDetail, reattachments,
  // waitingForScheduler, runtimeMode, acknowledgedSeq.
  static {
    for (const name of ['slot', 'slotGeneration', 'detachReason', 'detachDetail', 'reattachments', 'waitingForScheduler', 'runtimeMode', 'acknowledgedSeq']) {
      const accessor = native[`worker${name[0].toUpperCase()}${name.slice(1)}`];
      Object.defineProperty(Worker.prototype, name, {
        configurable: true,
        get() {
          return this.#call(accessor);
        },
      });
    }
  }

  /** Whether this handle's registration is live. */
  get registered() {
    return native.currentToken() === this.#token;
  }

  /** Whether the worker drives an SCB (false when detached or after a scheduler restart). */
  get attached() {
    // Asking may register the worker again (a new scheduler instance, §6.1): the fast path follows.
    const attached = this.#call(native.workerAttached);
    refresh();
    return attached;
  }

  /** Whether the scheduler may escalate this worker (default false for Node, spec/SCB.md §5.5). */
  get escapable() {
    return this.#call(native.workerEscapable);
  }

  set escapable(value) {
    this.setEscapable(value);
  }

  setEscapable(value) {
    if (typeof value !== 'boolean') {
      throw MorpheusError.of('INVALID_ARGUMENT', `setEscapable(value): expected a boolean, got ${typeof value}`);
    }
    this.#call(native.workerSetEscapable, value);
  }

  /** Advisory priority, PRIORITY_MIN (most important) to PRIORITY_MAX. */
  get priority() {
    return this.#call(native.workerPriority);
  }

  set priority(value) {
    this.setPriority(value);
  }

  setPriority(value) {
    if (!Number.isSafeInteger(value)) {
      throw MorpheusError.of('INVALID_ARGUMENT', `setPriority(value): expected an integer, got ${typeof value} ${String(value)}`);
    }
    this.#call(native.workerSetPriority, value);
  }

  /** Yields per reason, e.g. `{ PREEMPT_REQUEST: 3, ... }`, counted in the SDK's own memory. */
  yieldCounts() {
    return Object.fromEntries(this.#call(native.workerYieldCounts));
  }

  /** Throws GenerationChangedError after a scheduler restart, DetachedError for a worker without a region. */
  status() {
    try {
      this.#call(native.workerStatus);
    } finally {
      refresh();
    }
  }

  /** Record a yield the application made on its own (EXPLICIT), acknowledging any pending request. */
  recordExplicitYield() {
    this.#call(native.workerRecordExplicitYield);
    refresh();
  }

  /** Shut the worker down and free its slot. Idempotent. */
  close() {
    if (current === this) current = null;
    // The addon's unregister stops the kit's timed turn: the fast path stops looking at it.
    turnDeadline = 0;
    try {
      return call(native.unregister, this.#token);
    } finally {
      refresh();
    }
  }

  [dispose]() {
    this.close();
  }
}

/**
 * Register the calling thread (the event loop's, or a worker_threads thread) as a Morpheus worker.
 * Options: `region` (path, `''` for detached, or a Region from attach()), `detached`, `slot` (direct
 * registration), `socket` (the agent's), `escapable`, `priority` (both written into the
 * registration, so the SCB is right before RUNNING). Without a scheduler the worker is detached and
 * everything still works. A second registration of one thread throws AlreadyRegisteredError.
 */
function initWorker(options = {}) {
  const [opts, region] = nativeOptions(options);
  const token = call(native.register, opts, region);
  dropView();
  try {
    refresh();
  } catch (error) {
    native.unregister(token);
    throw fromNative(error);
  }
  current = new Worker(token);
  return current;
}

/** This thread's worker registered through this module, or null. */
function currentWorker() {
  if (current !== null && !current.registered) current = null;
  return current;
}

function workerOrThrow(operation) {
  const worker = currentWorker();
  if (worker === null) throw MorpheusError.of('NOT_REGISTERED', `${operation}: this thread holds no worker (call initWorker() first)`);
  return worker;
}

/** Set escapable on this thread's worker. */
function setEscapable(value) {
  workerOrThrow('setEscapable').setEscapable(value);
}

/** Set the priority of this thread's worker. */
function setPriority(value) {
  workerOrThrow('setPriority').setPriority(value);
}

// The event loop's worker is released at exit even without close() (the addon's environment
// cleanup hook does the same for worker_threads threads and for exits that skip this event).
process.once('exit', () => {
  if (current !== null) {
    try {
      current.close();
    } catch {
      // Exiting: nothing useful can be done with the error.
    }
  }
});

const [ABI_MAJOR, ABI_MINOR] = native.abiVersion();

module.exports = {
  ABI_MAJOR,
  ABI_MINOR,
  ESCAPABLE_DEFAULT: native.escapableDefault(),
  YIELD_PASSES,
  MorpheusError,
  errors,
  notices,
  Region: native.Region,
  Worker,
  attach,
  checkpoint,
  checkpointEvery,
  critical,
  criticalDepth,
  criticalEnter,
  criticalExit,
  currentWorker,
  initWorker,
  setEscapable,
  setPriority,
  shouldYield,
  yieldRequested,
  // Tests only (not part of the API): see setTurnClock.
  _setTurnClock: setTurnClock,
};
// Each error class by name too (require('@morpheus-sched/node').NotInCriticalError).
Object.assign(module.exports, errors);
