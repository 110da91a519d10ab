// SPDX-License-Identifier: Apache-2.0 OR MIT
// @morpheus-sched/node: kernel-guided cooperative yielding for Node's event loop (spec/SCB.md).
//
// The protocol is the Rust SDK's (through the addon), and so are the rules of the binding kit
// (sdk-rust's morpheus::kit): the fast state a check compares (kit::fast_state, with the modes' quiet
// window, §5.4), and the §5.7 rotation (kit::rotation), both driven by the addon (sdk-node/src). This
// file holds only what must be JavaScript: the checks' inline fast path, which loads the word the
// kit's fast state names through an external ArrayBuffer (one load, no allocation) and calls the
// addon only when that state sends it there: it stays here on purpose, one load in each language is
// the point of the fast path; the loop side of the rotation (the promises tasks wait on, the
// setImmediate passes, so the I/O poll runs before the task resumes, §5.1); and the API around them.
//
// State is per JavaScript thread: the event loop's thread and each worker_threads thread load their
// own copy of this module and register on their own (the addon keeps one worker per OS thread).
'use strict';
const native = require('./native.js');
const { MorpheusError, errors, fromNative } = require('./errors.js');
const invalid = (message) => MorpheusError.of('INVALID_ARGUMENT', message);
const { EventEmitter } = require('node:events');
// Node's global `performance` is a lazy accessor of the global object (a getter call per read); the
// module's own object is the same one, read once.
const { performance } = require('node:perf_hooks');

// ------------------------------------------------------------------------------------------------
// The fast path's state (this thread's): the kit's FastState, which the addon writes into `fast` by
// its own indexes (FastStateField: what each value means, and why the one load is exact) after every
// call that may change it. The one load reads the word's 8 bytes as one Float64Array element (no
// allocation, no builtin call: BENCHMARKS.md); it need not be an acquire, since it only decides
// whether to call the addon, whose checkpoint loads the word again with acquire (§3.1).
const F = native.FastStateField;
const fast = new Float64Array(F.Len);
const fastLow = new Int32Array(fast.buffer);
const words = (buffer) => ({ whole: new Float64Array(buffer), low: new Int32Array(buffer) });
// What a thread without a live view loads: a zero word, as the core's detached worker does (§7).
const ZEROES = words(new ArrayBuffer(8));
// The word (whole: the asynchronous check; low half: the synchronous check's Atomics.load) and the
// address it was taken for; the kit's expected and settled values as doubles; when the quiet and the
// turn windows close (by nowNs() and turnNs(); Infinity: open, -Infinity: closed).
let [seqWhole, seqLow, wordAddress] = [ZEROES.whole, ZEROES.low, 0];
let [expected, expectedLow, settled, quietUntil, turnUntil] = [0, 0, 0, Infinity, Infinity];

/** Re-read the fast state (a call that may have changed it outside the slow paths). */
const refresh = () => (native.fastState(fast, clockArg()), follow());

/** Take what `fast` holds now (every slow path wrote it): a new word's view, the values, the windows. */
function follow() {
  if (fast[F.Word] !== wordAddress) {
    const buffer = native.fastWord(fast, clockArg());
    ({ whole: seqWhole, low: seqLow } = buffer === null ? ZEROES : words(buffer));
    wordAddress = fast[F.Word];
  }
  expected = fast[F.Expected];
  expectedLow = fastLow[2 * F.Expected];
  settled = fast[F.Settled];
  quietUntil = until(fast[F.Quiet], nowNs);
  turnUntil = until(fast[F.Turn], turnNs);
  if (fast[F.Notices] !== 0) emitNotices();
}

const until = (ns, clock) => (Number.isFinite(ns) ? clock() + ns : ns);
// The result of a slow path, after the fast state it wrote is taken.
const slow = (result) => (follow(), result);
// ns of CLOCK_MONOTONIC's rate (libuv's hrtime) from another origin: what windows are measured by.
const nowNs = () => performance.now() * 1e6;

// The kit's rules past the one load: no request, and the core would decide nothing (§5.4); for an
// asynchronous check, the rotation would not either: the turn goes on (§5.7).
const quiet = () => seqWhole[0] === settled && (quietUntil === Infinity || nowNs() < quietUntil);
const turnGoesOn = () => turnUntil === Infinity || turnNs() < turnUntil;

// ------------------------------------------------------------------------------------------------
// Notices: the core's lines about the scheduler's life (§6.1), emitted on `notices` as ('notice',
// { level, message }); warnings also go to process.emitWarning(message, 'MorpheusWarning').
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

/** The synchronous checkpoint: true when the scheduler asked (acknowledged: yield now). One atomic load when nothing is pending. */
const shouldYield = () => requested() && !quiet() && slow(native.checkpointSync(fast, clockArg()));

/**
 * Whether `await checkpoint()` should run now (acknowledging nothing): for a hot loop kept in a plain
 * function that returns to its async caller when this is true (V8 compiles work inlined into an async
 * function that awaits markedly slower: BENCHMARKS.md). True for a request (also one a critical
 * section defers), during another task's yield and once a timed turn is over (§5.7), and outside
 * DETERMINISTIC when the core would yield (§5.4).
 */
const yieldRequested = () => requested() && !(quiet() && turnGoesOn()) && slow(native.checkpointWouldYield(fast, othersQueued(), clockArg()));

// The synchronous checks' load: an Atomics.load of the low half (a builtin call, so no compiler hoists
// the check out of a hot loop without other calls), then the whole word compared (exact).
const requested = () => Atomics.load(seqLow, 0) !== expectedLow || seqWhole[0] !== expected;

/**
 * `await checkpoint()`: an already resolved promise (false) when nothing is pending; when the scheduler
 * asked, the task steps aside for its turn in the thread's rotation (§5.7), resolving true after
 * YIELD_PASSES passes of the event loop (fewer on an idle loop) and the tasks that yielded before it.
 * A task computing during another's yield, or whose timed turn is over, steps aside too (false).
 */
const checkpoint = () => (seqWhole[0] === expected ? NOT_YIELDED : checkpointSlow());

function checkpointSlow() {
  if (quiet() && turnGoesOn()) return NOT_YIELDED;
  const waiter = slow(native.rotationCheckpoint(fast, othersQueued(), clockArg()));
  return waiter === 0 ? NOT_YIELDED : wait(waiter);
}

// ------------------------------------------------------------------------------------------------
// The rotation (§5.7) is the kit's (morpheus::kit::rotation), driven by the addon (src/rotation.rs).
// JS keeps the promises tasks wait on (by the kit's tokens), the setImmediate passes and keepers the
// addon asks for, and a look at the neighbours of its own immediates (other code's: more to run).

/** Passes of the event loop a yield lasts at most: the kit's, the same for every event-loop binding. */
const YIELD_PASSES = native.yieldPasses();

const waiters = new Map(); // The tasks waiting for their turn: the kit's token -> what settles the task's promise.
let testClock = null; // The tests' clock (setTurnClock), or null: the kit's own clocks.

const clockArg = () => (testClock === null ? -1 : testClock());
// The rotation's clock in ns: the tests' when set, else nowNs().
const turnNs = () => (testClock === null ? nowNs() : testClock());

/** The task waits on the kit's `code` (token * 4 + resolves true * 2 + queue the first pass). */
function wait(code) {
  if (code % 2 === 1) passImmediate = setImmediate(pass);
  const value = code % 4 >= 2;
  return new Promise((resolve) => waiters.set(Math.floor(code / 4), () => resolve(value)));
}

// The rotation's own immediates: the pass queued or running, the keeper queued at the last resume,
// and the one whose callback resumed the running task. Node keeps pending immediates in a linked list
// (_idlePrev/_idleNext; a check phase takes its list whole), so their neighbours show other code's.
let [passImmediate, keeperImmediate, resumingImmediate] = [null, null, null];

// Whether no immediate of other code is queued after `own` and, when `pending`, before it. None at
// all, or one without these links, counts as others queued (the loop is taken for busy).
const onlyOwnImmediates = (own, pending) => own !== null && own._idleNext === null && (!pending || own._idlePrev === null);
const othersQueued = () => !onlyOwnImmediates(keeperImmediate, true) || !onlyOwnImmediates(resumingImmediate, false);

/** A pass: the next one is queued first, so that its neighbours show other code's immediates. */
function pass() {
  const running = passImmediate;
  passImmediate = setImmediate(pass);
  const others = !onlyOwnImmediates(running, false) || !onlyOwnImmediates(passImmediate, true);
  const next = slow(native.rotationPass(fast, others, clockArg()));
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
  own.immediate = setImmediate(keeper, fast[F.KeeperTurns], own);
  keeperImmediate = own.immediate;
}

/** After a resumed task's step: if it gave control back without a yield, the next resumes (§5.7). */
function keeper(turns, own) {
  const next = slow(native.rotationKeeper(fast, turns, clockArg()));
  if (next === 0) return;
  resumingImmediate = own.immediate;
  resume(next);
}

// Tests only, exported as _setTurnClock and _setModeClock (not part of the API); no argument restores the
// clocks. setTurnClock: turns measured by `clock()` (ns), not the thread's CPU time and the wall clock, so
// their order never depends on the machine's speed. setModeClock: the runtime-mode rules (§5.4) timed by
// `ns`, not CLOCK_MONOTONIC; the fast state is re-read, and its quiet window stays closed meanwhile.
const setTurnClock = (clock) => (testClock = clock ?? null);
const setModeClock = (ns) => (native.setModeClock(ns ?? -1), refresh());

/**
 * A checkpoint for hot loops that is real every `every`-th call: `const tick = checkpointEvery(100)`,
 * then `await tick()` (async) or `if (tick.sync()) ...` (sync) in the loop.
 */
function checkpointEvery(every) {
  if (!Number.isSafeInteger(every) || every < 1) throw invalid(`checkpointEvery(every): expected an integer >= 1, got ${String(every)}`);
  let count = 0;
  const due = () => ++count >= every && (count = 0) === 0;
  const tick = () => (due() ? checkpoint() : NOT_YIELDED);
  return Object.assign(tick, { sync: () => due() && shouldYield(), every });
}

// ------------------------------------------------------------------------------------------------
// Critical sections

/** `fn(...args)`, an addon call, with its error turned into the JS class of its code. */
function call(fn, ...args) {
  try {
    return fn(...args);
  } catch (error) {
    throw fromNative(error);
  }
}

/** Enter a critical section on this thread (prefer `critical(fn)`); returns the nesting depth. */
const criticalEnter = () => native.criticalEnter();
/** Exit one level; `NotInCriticalError` (nothing written) without a matching enter. */
const criticalExit = () => call(native.criticalExit);
/** This thread's critical-section nesting depth. */
const criticalDepth = () => native.criticalDepth();

/**
 * Run `fn` inside a critical section: no checkpoint of this thread yields until it returns (or, for
 * an async function, until its promise settles: the whole event-loop thread is the worker, so the
 * section covers the other tasks that run meanwhile too). The section is exited on throw/rejection.
 */
function critical(fn) {
  if (typeof fn !== 'function') throw invalid(`critical(fn): expected a function, got ${typeof fn}`);
  native.criticalEnter();
  let result;
  try {
    result = fn();
  } catch (error) {
    exitAfterFailure();
    throw error;
  }
  if (result === null || typeof result !== 'object' || typeof result.then !== 'function') return (criticalExit(), result);
  return Promise.resolve(result).then(
    (value) => (criticalExit(), value),
    (error) => {
      exitAfterFailure();
      throw error;
    },
  );
}

// The function's own error wins over an unbalanced exit inside it.
function exitAfterFailure() {
  try {
    native.criticalExit();
  } catch {} // fn exited more sections than it entered; its error is the one to report.
}

// ------------------------------------------------------------------------------------------------
// Regions and workers

/**
 * Map and validate a region without registering (spec/SCB.md §1.3; nothing is written). `path`: that
 * file or pinned map; `''`: detached (null); omitted: discovery (§1.2), null when there is no scheduler.
 */
function attach(path) {
  if (path !== undefined && typeof path !== 'string') throw invalid(`attach(path): expected a string, got ${typeof path}`);
  return call(native.attach, path);
}

const OPTION_TYPES = { region: 'string or Region', detached: 'boolean', slot: 'integer', socket: 'string', escapable: 'boolean', priority: 'integer' };
const typeName = (value) => (value === null ? 'null' : typeof value);
const hasType = (type, value) => (type === 'integer' ? Number.isSafeInteger(value) : typeof value === type.split(' ')[0]);

/**
 * Turn `initWorker` options into the addon's, refusing by name an unknown option or a value of the
 * wrong JS type. Their conflicts and ranges are the Rust binding kit's, checked by the addon.
 */
function nativeOptions(options) {
  if (options === null || typeof options !== 'object') throw invalid(`initWorker(options): expected an object, got ${typeName(options)}`);
  const out = {};
  let regionObject = null;
  for (const [key, value] of Object.entries(options)) {
    if (!Object.hasOwn(OPTION_TYPES, key)) {
      throw invalid(`initWorker(options): unknown option ${key} (known: ${Object.keys(OPTION_TYPES).join(', ')})`);
    }
    if (value === undefined) continue;
    if (key === 'region' && value instanceof native.Region) regionObject = value;
    else if (!hasType(OPTION_TYPES[key], value)) throw invalid(`initWorker(options): ${key} must be a ${OPTION_TYPES[key]}, got ${typeName(value)} ${String(value)}`);
    else out[key === 'region' ? 'regionPath' : key] = value;
  }
  return [out, regionObject];
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
  // waitingForScheduler, runtimeMode, acknowledgedSeq, escapable, priority.
  static {
    for (const name of ['slot', 'slotGeneration', 'detachReason', 'detachDetail', 'reattachments', 'waitingForScheduler', 'runtimeMode', 'acknowledgedSeq', 'escapable', 'priority']) {
      const accessor = native[`worker${name[0].toUpperCase()}${name.slice(1)}`];
      const { set } = Object.getOwnPropertyDescriptor(Worker.prototype, name) ?? {};
      Object.defineProperty(Worker.prototype, name, {
        configurable: true,
        get() {
          return this.#call(accessor);
        },
        set,
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

  // Whether the scheduler may escalate this worker (default false for Node, §5.5), and the advisory
  // priority, PRIORITY_MIN (most important) to PRIORITY_MAX: set through these setters or methods.
  set escapable(value) {
    this.setEscapable(value);
  }

  set priority(value) {
    this.setPriority(value);
  }

  setEscapable(value) {
    if (typeof value !== 'boolean') throw invalid(`setEscapable(value): expected a boolean, got ${typeof value}`);
    this.#call(native.workerSetEscapable, value);
  }

  setPriority(value) {
    if (!Number.isSafeInteger(value)) throw invalid(`setPriority(value): expected an integer, got ${typeof value} ${String(value)}`);
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
    // The addon's unregister stops the kit's timed turn; the fast state read after it says so.
    try {
      return call(native.unregister, this.#token);
    } finally {
      refresh();
    }
  }
}
Worker.prototype[dispose] = Worker.prototype.close;

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
const currentWorker = () => (current?.registered ? current : (current = null));

function workerOrThrow(operation) {
  const worker = currentWorker();
  if (worker === null) throw MorpheusError.of('NOT_REGISTERED', `${operation}: this thread holds no worker (call initWorker() first)`);
  return worker;
}

/** Set escapable on this thread's worker. */
const setEscapable = (value) => workerOrThrow('setEscapable').setEscapable(value);
/** Set the priority of this thread's worker. */
const setPriority = (value) => workerOrThrow('setPriority').setPriority(value);

// The event loop's worker is released at exit even without close() (the addon's environment
// cleanup hook does the same for worker_threads threads and for exits that skip this event).
process.once('exit', () => {
  try {
    current?.close();
  } catch {} // Exiting: nothing useful can be done with the error.
});

const [ABI_MAJOR, ABI_MINOR] = native.abiVersion();

module.exports = { ABI_MAJOR, ABI_MINOR, ESCAPABLE_DEFAULT: native.escapableDefault(), YIELD_PASSES, MorpheusError, errors, notices };
Object.assign(module.exports, { Region: native.Region, Worker, attach, checkpoint, checkpointEvery, critical, criticalDepth, criticalEnter, criticalExit });
Object.assign(module.exports, { currentWorker, initWorker, setEscapable, setPriority, shouldYield, yieldRequested, _setTurnClock: setTurnClock, _setModeClock: setModeClock });
// Each error class by name too (require('@morpheus-sched/node').NotInCriticalError).
Object.assign(module.exports, errors);
