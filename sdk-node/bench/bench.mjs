// SPDX-License-Identifier: Apache-2.0 OR MIT
// Per-call cost of shouldYield() and await checkpoint() when nothing is pending, beside the
// primitives they are built from, measured with mitata in one process (ratios are within one run).
//
// Every case is a loop of INNER calls, the shape users write (a check or an `await checkpoint()`
// directly in a hot loop; V8 inlines differently into other shapes): its time / INNER is the per-call
// cost. The worker is registered on a region file (direct registration), so the fast path reads the
// real mapped slot through the external ArrayBuffer.
//
// Then the busy loop (BUSY_ROUNDS rounds, modes interleaved, the order rotated each round): the
// example service's heavy loop (examples/fastify-service.js: ~10 µs units, `yieldRequested()` after
// each, `await checkpoint()` when it says so) with nobody else on the event loop, per mode: no checks
// at all, twice (the second cell's ratio to the first is the method's own spread in a round); nothing
// asked (the region file's worker, whose scheduler never asks); per slice, a yield to the event loop
// without the SDK (`await new Promise(setImmediate)`, no worker) every slice of CPU time, the rate of
// the scheduler's requests (what any yield at that rate costs this loop); and the thread
// registered with scx_morpheus with the sim backend and with the tracing backend (where the kernel
// and the user allow it; otherwise the table says why not), at each slice of BUSY_SLICES_US: by
// default the scheduler's own default (DEFAULT_SLICE_NS of the ABI, 5 ms: what `scx_morpheus` runs
// with unless told otherwise) and 1 ms (the service benchmark's slice). The figure is
// units per CPU second of the process (robust against time descheduled on a loaded machine; a yield
// never sleeps: the loop polls with a zero timeout while a pass is queued), each round's ratio to that
// round's no-checks cell; units per wall second too. Then the same modes paired within each cell
// (pairedCell: chunks of 50 ms of the loop thread's CPU time alternating the mode with the loop
// without checks, the thread registered as in the mode), whose spread is a fraction of the cells'.
// Needs MORPHEUS_SCX_BIN (bench/run.sh builds it).
//
// Usage: node bench/bench.mjs [ROUNDS (5)] [cpu|wall] [BUSY_ROUNDS (5)] [BUSY_CELL_SECONDS (1.5)] [BUSY_SLICES_US]
// (ROUNDS 0: the busy loop only; BUSY_SLICES_US: comma-separated, e.g. 5000,1000.)
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startAgents, BACKENDS } from './agents.mjs';
import { measure, do_not_optimize } from 'mitata';
import * as morpheus from '@morpheus-sched/node';

const require = createRequire(import.meta.url);
const native = require('../lib/native.js');
const abi = require('@morpheus/abi');
const { TestRegion } = require('../test/region.js');

const INNER = 10000;
const ROUNDS = Number(process.argv[2] ?? 5);
// The clock: the process's CPU time (default), so time spent descheduled on a shared, loaded machine
// is not counted (µs resolution: a sample of INNER calls lasts 0.1-2 ms), or `wall` (mitata's own).
const CLOCK = process.argv[3] ?? 'cpu';
const BUSY_ROUNDS = Number(process.argv[4] ?? 5);
const BUSY_CELL_SECONDS = Number(process.argv[5] ?? 1.5);
const DEFAULT_SLICE_US = Number(abi.DEFAULT_SLICE_NS / 1000n);
const BUSY_SLICES_US = (process.argv[6] ?? `${DEFAULT_SLICE_US},1000`).split(',').map(Number);
if (!BUSY_SLICES_US.every((us) => Number.isSafeInteger(us) && us > 0) || new Set(BUSY_SLICES_US).size !== BUSY_SLICES_US.length) {
  throw new Error(`bench.mjs: BUSY_SLICES_US must be distinct whole numbers of µs > 0, comma-separated, got ${process.argv[6]}`);
}
const sliceName = (us) => `${us >= 1000 && us % 1000 === 0 ? `${us / 1000} ms` : `${us} µs`} slice${us === DEFAULT_SLICE_US ? ' (default)' : ''}`;
for (const [name, value] of [['ROUNDS', ROUNDS], ['BUSY_ROUNDS', BUSY_ROUNDS], ['BUSY_CELL_SECONDS', BUSY_CELL_SECONDS]]) {
  if (!Number.isFinite(value) || value < (name === 'ROUNDS' ? 0 : 1e-3)) throw new Error(`bench.mjs: ${name} must be a positive number${name === 'ROUNDS' ? ' or 0' : ''}, got ${value}`);
}
if (CLOCK !== 'cpu' && CLOCK !== 'wall') throw new Error(`bench.mjs: the clock is cpu or wall, not ${CLOCK}`);
const cpuNow = () => {
  const { user, system } = process.cpuUsage();
  return (user + system) * 1e3;
};
const OPTIONS = CLOCK === 'cpu' ? { now: cpuNow, min_cpu_time: 300e6, min_samples: 50 } : { min_cpu_time: 300e6 };
const RESOLVED = Promise.resolve(false);
const loadBefore = os.loadavg()[0];
const region = new TestRegion();
const worker = morpheus.initWorker({ region: region.path, slot: 0 });
if (!worker.attached) throw new Error('bench: the worker did not attach');

// The mapped slot's scheduler-written line, read directly (the design alternatives the fast path
// was chosen from: two Int32 halves, one BigInt64, or the 8 bytes as one Float64 element).
// The word's view the fast state names (the slot's preempt_seq), with the addon's state array.
const fastState = new Float64Array(native.FastStateField.Len);
const slot32 = new Int32Array(native.fastWord(fastState, -1));
const slot64 = new BigInt64Array(slot32.buffer);
const slotF64 = new Float64Array(slot32.buffer);
const sab32 = new Int32Array(new SharedArrayBuffer(64));
const sab64 = new BigInt64Array(new SharedArrayBuffer(64));
const object = { seq: 0 };

const sync = {
  'empty loop': () => {
    let n = 0;
    for (let i = 0; i < INNER; i++) n += i;
    return n;
  },
  'JS property read': () => {
    let n = 0;
    for (let i = 0; i < INNER; i++) n += object.seq;
    return n;
  },
  'Atomics.load, Int32Array over a local SharedArrayBuffer': () => {
    let n = 0;
    for (let i = 0; i < INNER; i++) n += Atomics.load(sab32, 0);
    return n;
  },
  'Atomics.load, BigInt64Array over a local SharedArrayBuffer': () => {
    let n = 0;
    for (let i = 0; i < INNER; i++) if (Atomics.load(sab64, 0) === 0n) n++;
    return n;
  },
  'two Int32 Atomics.load over the mapped slot, compared': () => {
    let n = 0;
    for (let i = 0; i < INNER; i++) if (Atomics.load(slot32, 0) === 0 && Atomics.load(slot32, 1) === 0) n++;
    return n;
  },
  'one BigInt64 Atomics.load over the mapped slot, compared': () => {
    let n = 0;
    for (let i = 0; i < INNER; i++) if (Atomics.load(slot64, 0) === 0n) n++;
    return n;
  },
  'one Float64 plain read over the mapped slot, compared': () => {
    let n = 0;
    for (let i = 0; i < INNER; i++) if (slotF64[0] === 0) n++;
    return n;
  },
  'napi call returning a number (criticalDepth)': () => {
    let n = 0;
    for (let i = 0; i < INNER; i++) n += native.criticalDepth();
    return n;
  },
  'shouldYield(), nothing pending (attached)': () => {
    let n = 0;
    for (let i = 0; i < INNER; i++) if (morpheus.shouldYield()) n++;
    return n;
  },
  'yieldRequested(), nothing pending (attached)': () => {
    let n = 0;
    for (let i = 0; i < INNER; i++) if (morpheus.yieldRequested()) n++;
    return n;
  },
  'native checkpoint (napi call into the core; not the fast path)': () => {
    let n = 0;
    for (let i = 0; i < INNER; i++) if (native.checkpointSync(fastState, -1)) n++;
    return n;
  },
};

const asynchronous = {
  'await null': async () => {
    let n = 0;
    for (let i = 0; i < INNER; i++) {
      await null;
      n++;
    }
    return n;
  },
  'await undefined': async () => {
    let n = 0;
    for (let i = 0; i < INNER; i++) {
      await undefined;
      n++;
    }
    return n;
  },
  'await of a non-promise (false)': async () => {
    let n = 0;
    for (let i = 0; i < INNER; i++) if (await false) n++;
    return n;
  },
  'await of an already resolved promise': async () => {
    let n = 0;
    for (let i = 0; i < INNER; i++) if (await RESOLVED) n++;
    return n;
  },
  'await checkpoint(), nothing pending (attached)': async () => {
    let n = 0;
    for (let i = 0; i < INNER; i++) if (await morpheus.checkpoint()) n++;
    return n;
  },
};

// Rounds interleave the cases, so a burst of load from elsewhere hits all of them alike; each case's
// figure is the median over the rounds of its per-round p50.
const samples = {};
for (let round = 0; round < ROUNDS; round++) {
  for (const [name, fn] of Object.entries(sync)) {
    const stats = await measure(() => do_not_optimize(fn()), OPTIONS);
    (samples[name] ??= []).push(stats.p50 / INNER);
  }
  for (const [name, fn] of Object.entries(asynchronous)) {
    const stats = await measure(async () => do_not_optimize(await fn()), OPTIONS);
    (samples[name] ??= []).push(stats.p50 / INNER);
  }
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const results = Object.entries(samples).map(([name, xs]) => ({ name, ns: median(xs), min: Math.min(...xs), max: Math.max(...xs) }));
worker.close();

// ------------------------------------------------------------------------------------------------
// The busy loop with nobody waiting

const { unit } = require('../examples/fastify-service.js');
const never = () => false;
// The example's hot loop (examples/fastify-service.js, hashUnits): returns true to step aside.
function hashUnits(state, units, requested) {
  while (state.done < units) {
    state.h = unit(state.h);
    state.done++;
    if (requested(state.done)) return true;
  }
  return false;
}
// One "request" of the heavy route: 20,000 units (~0.2 s), repeated for the cell's CPU time.
const REQUEST_UNITS = 20000;
const cpuNs = () => {
  const { user, system } = process.cpuUsage();
  return (user + system) * 1e3;
};

/**
 * One cell: the loop for BUSY_CELL_SECONDS of CPU time; units per CPU and per wall second, pauses,
 * yields, and the event loop's iterations (libuv's loop_count: the passes the yields took; -1 where
 * libuv lacks uv_metrics_info).
 */
async function busyCell(checks, immediateEvery = 0) {
  const reasonsBefore = checks ? morpheus.currentWorker().yieldCounts() : {};
  const iterationsBefore = native.loopIterations();
  const cpu0 = cpuNs();
  const wall0 = performance.now();
  let units = 0;
  let pauses = 0;
  while (cpuNs() - cpu0 < BUSY_CELL_SECONDS * 1e9) {
    const state = { h: units, done: 0 };
    if (immediateEvery > 0) {
      const due = (done) => done % immediateEvery === 0;
      while (hashUnits(state, REQUEST_UNITS, due)) {
        await new Promise(setImmediate);
        pauses++;
      }
    } else if (!checks) {
      hashUnits(state, REQUEST_UNITS, never);
    } else {
      while (hashUnits(state, REQUEST_UNITS, morpheus.yieldRequested)) {
        await morpheus.checkpoint();
        pauses++;
      }
    }
    units += REQUEST_UNITS;
  }
  const cpu = (cpuNs() - cpu0) / 1e9;
  const wall = (performance.now() - wall0) / 1e3;
  const iterations = iterationsBefore < 0 ? -1 : native.loopIterations() - iterationsBefore;
  // The core's runtime mode (spec/SCB.md §5.4) at the cell's end, and its yields by reason: outside
  // DETERMINISTIC the core yields on its own (DEFENSIVE) and every check crosses into the addon, so a
  // figure is only read against the mode it ran in. Read after the clocks stop.
  const reasons = {};
  let mode = null;
  if (checks) {
    const worker = morpheus.currentWorker();
    mode = worker.runtimeMode;
    for (const [reason, count] of Object.entries(worker.yieldCounts())) {
      if (count - (reasonsBefore[reason] ?? 0) > 0) reasons[reason] = count - (reasonsBefore[reason] ?? 0);
    }
  }
  const yields = Object.values(reasons).reduce((a, b) => a + b, 0);
  return { perCpuSecond: units / cpu, perWallSecond: units / wall, cpu, pauses, yields, iterations, mode, reasons };
}

// The loop thread's own CPU time (its schedstat run time, ns): the paired cells' clock. Node's main
// thread is the process's first thread, whose id is the pid.
const threadStat = `/proc/self/task/${process.pid}/schedstat`;
const threadCpuNs = () => Number(fs.readFileSync(threadStat, 'utf8').split(' ', 1)[0]);
const BUSY_CHUNK_MS = 50;
const CHUNK_UNITS = 1000;

/**
 * One paired cell: BUSY_CELL_SECONDS of the loop thread's CPU time in chunks of BUSY_CHUNK_MS that
 * alternate between the loop without checks (the base: the thread registered as in the mode, so
 * "no yields", not "no worker") and the mode's loop (`checks`: the SDK's checks and yields;
 * `immediateEvery`: a setImmediate pass every that many units; neither: the base again). Chunks of
 * tens of ms put both halves under the same conditions, so a drift of the machine over a cell moves
 * both; `first` says which half opens the cell. Units per CPU second of each half, by the thread's
 * and by the process's CPU time.
 */
async function pairedCell(checks, immediateEvery, first) {
  const halves = { base: { units: 0, ns: 0, processNs: 0 }, mode: { units: 0, ns: 0, processNs: 0 } };
  const due = (done) => done % immediateEvery === 0;
  const reasonsBefore = checks ? morpheus.currentWorker().yieldCounts() : {};
  let pauses = 0;
  const start = threadCpuNs();
  for (let k = 0; threadCpuNs() - start < BUSY_CELL_SECONDS * 1e9; k++) {
    const half = (k % 2 === 0) === (first === 'mode') ? 'mode' : 'base';
    const [t0, p0] = [threadCpuNs(), cpuNs()];
    let units = 0;
    while (threadCpuNs() - t0 < BUSY_CHUNK_MS * 1e6) {
      const state = { h: units, done: 0 };
      if (half === 'base' || (!checks && immediateEvery === 0)) {
        hashUnits(state, CHUNK_UNITS, never);
      } else if (immediateEvery > 0) {
        while (hashUnits(state, CHUNK_UNITS, due)) {
          await new Promise(setImmediate);
          pauses++;
        }
      } else {
        while (hashUnits(state, CHUNK_UNITS, morpheus.yieldRequested)) {
          await morpheus.checkpoint();
          pauses++;
        }
      }
      units += CHUNK_UNITS;
    }
    halves[half].units += units;
    halves[half].ns += threadCpuNs() - t0;
    halves[half].processNs += cpuNs() - p0;
  }
  let yields = 0;
  if (checks) for (const [reason, count] of Object.entries(morpheus.currentWorker().yieldCounts())) yields += count - (reasonsBefore[reason] ?? 0);
  const rate = (h, key) => halves[h].units / halves[h][key];
  return { ratio: rate('mode', 'ns') / rate('base', 'ns'), processRatio: rate('mode', 'processNs') / rate('base', 'processNs'), pauses, yields, modeSeconds: halves.mode.ns / 1e9 };
}

const busy = { rows: {}, paired: {}, skipped: {} };
if (!process.env.MORPHEUS_SCX_BIN) {
  busy.skipped.all = 'MORPHEUS_SCX_BIN is not set (bench/run.sh builds scx_morpheus and sets it)';
} else {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'morpheus-node-bench-'));
  // One agent per backend and slice, each on its own socket; mode name -> socket.
  const agents = [];
  const sockets = {};
  try {
    for (const sliceUs of BUSY_SLICES_US) {
      const started = await startAgents(process.env.MORPHEUS_SCX_BIN, dir, { sliceUs, name: (backend) => `${backend}-${sliceUs}` });
      for (const [backend, why] of Object.entries(started.skipped)) busy.skipped[backend] = why;
      for (const backend of BACKENDS.filter((b) => started.agents[b])) {
        agents.push(started.agents[backend]);
        sockets[`asked: ${backend}, ${sliceName(sliceUs)}`] = started.agents[backend].socket;
      }
    }
    // Warm-up: the loop compiled with both kinds of check before any cell; then the time of a unit,
    // for the yields without the SDK.
    {
      const w = morpheus.initWorker({ region: region.path, slot: 0 });
      hashUnits({ h: 1, done: 0 }, 5000, never);
      hashUnits({ h: 1, done: 0 }, 5000, morpheus.yieldRequested);
      w.close();
    }
    const unitStart = cpuNs();
    hashUnits({ h: 2, done: 0 }, 5000, never);
    const unitUs = (cpuNs() - unitStart) / 5000 / 1e3;
    // The references beside the asked modes: a second no-checks cell (what two cells of the same
    // loop differ by in a round: the method's own spread), and per slice a yield to the event loop
    // without the SDK (`await new Promise(setImmediate)`, one pass, no worker) every slice of CPU
    // time, the rate of the scheduler's requests: what any yield at that rate costs on this loop.
    const immediateEvery = {};
    for (const sliceUs of BUSY_SLICES_US) immediateEvery[`setImmediate every ${sliceName(sliceUs).replace(' (default)', '')} of CPU, no SDK`] = Math.max(1, Math.round(sliceUs / unitUs));
    const modes = ['no checks', 'no checks, again', 'nothing asked', ...Object.keys(immediateEvery), ...Object.keys(sockets)];
    // Run `cell(checks)` with the thread registered as `mode` asks (the region file's worker, an
    // agent's, or none), closing the worker after.
    const inMode = async (mode, cell) => {
      let w = null;
      if (mode === 'nothing asked') w = morpheus.initWorker({ region: region.path, slot: 0 });
      else if (sockets[mode] !== undefined) {
        w = morpheus.initWorker({ socket: sockets[mode] });
        if (!w.attached) throw new Error(`bench: not attached to the agent of "${mode}"`);
      }
      try {
        return await cell(w !== null);
      } finally {
        w?.close();
      }
    };
    for (let round = 0; round < BUSY_ROUNDS; round++) {
      const order = modes.map((_, i) => modes[(i + round) % modes.length]);
      for (const mode of order) (busy.rows[mode] ??= []).push(await inMode(mode, (checks) => busyCell(checks, immediateEvery[mode] ?? 0)));
    }
    // The same modes, each paired within its cell (pairedCell); "no checks, again" pairs the plain
    // loop with itself: the paired method's own spread.
    const pairedModes = modes.filter((mode) => mode !== 'no checks');
    for (let round = 0; round < BUSY_ROUNDS; round++) {
      const order = pairedModes.map((_, i) => pairedModes[(i + round) % pairedModes.length]);
      const first = round % 2 === 0 ? 'mode' : 'base';
      for (const mode of order) (busy.paired[mode] ??= []).push(await inMode(mode, (checks) => pairedCell(checks, immediateEvery[mode] ?? 0, first)));
    }
  } finally {
    for (const agent of agents) await agent.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
region.close();

// Ratios are paired: each round's two figures come from back-to-back samples, so a burst of load
// from elsewhere moves both; the figure is the median over the rounds of the per-round ratio.
const ratio = (a, b) => (ROUNDS === 0 ? NaN : median(samples[a].map((x, round) => x / samples[b][round])));
if (ROUNDS > 0) {
  console.log(`node ${process.version}, ${CLOCK} clock, ${INNER} calls per sample, ${ROUNDS} rounds: median (min-max) of the rounds' p50\n`);
  console.log('| case | ns per call |  range |');
  console.log('|---|---:|---:|');
  for (const r of results) console.log(`| ${r.name} | ${r.ns.toFixed(2)} | ${r.min.toFixed(2)}-${r.max.toFixed(2)} |`);
  const sync32 = ratio('shouldYield(), nothing pending (attached)', 'Atomics.load, Int32Array over a local SharedArrayBuffer');
  const sync64 = ratio('shouldYield(), nothing pending (attached)', 'Atomics.load, BigInt64Array over a local SharedArrayBuffer');
  const asyncRatio = ratio('await checkpoint(), nothing pending (attached)', 'await null');
  const resolvedRatio = ratio('await of an already resolved promise', 'await null');
  const nonPromiseRatio = ratio('await of a non-promise (false)', 'await null');
  const halves = ratio('two Int32 Atomics.load over the mapped slot, compared', 'one BigInt64 Atomics.load over the mapped slot, compared');
  const requested32 = ratio('yieldRequested(), nothing pending (attached)', 'Atomics.load, Int32Array over a local SharedArrayBuffer');
  const undefinedRatio = ratio('await undefined', 'await null');
  console.log('\n| ratio | value | target |');
  console.log('|---|---:|---|');
  console.log(`| shouldYield() / Atomics.load Int32 | ${sync32.toFixed(2)} | <= 2 |`);
  console.log(`| yieldRequested() / Atomics.load Int32 | ${requested32.toFixed(2)} | <= 2 |`);
  console.log(`| shouldYield() / Atomics.load BigInt64 | ${sync64.toFixed(2)} | (the earlier design's load) |`);
  console.log(`| await checkpoint() / await null | ${asyncRatio.toFixed(2)} | <= 1 |`);
  console.log(`| await of an already resolved promise / await null | ${resolvedRatio.toFixed(2)} | (the floor of any await) |`);
  console.log(`| await false / await null | ${nonPromiseRatio.toFixed(2)} | (returning a non-promise) |`);
  console.log(`| await undefined / await null | ${undefinedRatio.toFixed(2)} | (returning undefined) |`);
  console.log(`| two Int32 loads / one BigInt64 load (mapped slot) | ${halves.toFixed(2)} | (design choice) |`);
  console.log(JSON.stringify({ sync32, requested32, sync64, asyncRatio, undefinedRatio, resolvedRatio, nonPromiseRatio, halves }));
}

const loadAfter = os.loadavg()[0];
console.log(`\nBusy loop, nobody waiting (the example's heavy loop, ~10 us units; ${BUSY_ROUNDS} rounds x ${BUSY_CELL_SECONDS} s of CPU per cell; load average (1 min) ${loadBefore.toFixed(1)} before the run, ${loadAfter.toFixed(1)} after):\n`);
for (const [what, why] of Object.entries(busy.skipped)) console.log(`- ${what === 'all' ? 'not run' : `${what} backend not run`}: ${why}`);
const busyRatios = {};
if (busy.rows['no checks']) {
  const none = busy.rows['no checks'];
  const spreadOf = (xs) => `${median(xs).toFixed(3)} [${Math.min(...xs).toFixed(3)}-${Math.max(...xs).toFixed(3)}]`;
  console.log("| mode | units per CPU s | / no checks, per round | median [min-max] | / no checks, wall clock, median [min-max] | pauses per CPU ms | yields per CPU ms | loop iterations per yield | runtime mode at each cell's end | yields by reason (all rounds) |");
  console.log('|---|---:|---|---:|---:|---:|---:|---:|---|---|');
  for (const [mode, cells] of Object.entries(busy.rows)) {
    const ratios = cells.map((c, i) => c.perCpuSecond / none[i].perCpuSecond);
    const wallRatios = cells.map((c, i) => c.perWallSecond / none[i].perWallSecond);
    busyRatios[mode] = { ratios, wallRatios };
    const perMs = (key) => median(cells.map((c) => c[key] / (c.cpu * 1e3))).toFixed(2);
    const iterationsPerYield = cells.every((c) => c.yields > 0 && c.iterations >= 0) ? median(cells.map((c) => c.iterations / c.yields)).toFixed(2) : '-';
    const modes = cells.every((c) => c.mode === null) ? '-' : cells.map((c) => c.mode).join(', ');
    const reasons = {};
    for (const c of cells) for (const [reason, count] of Object.entries(c.reasons)) reasons[reason] = (reasons[reason] ?? 0) + count;
    const byReason = Object.keys(reasons).length === 0 ? '-' : Object.entries(reasons).map(([r, n]) => `${r} ${n}`).join(', ');
    console.log(`| ${mode} | ${median(cells.map((c) => c.perCpuSecond)).toFixed(0)} | ${ratios.map((r) => r.toFixed(3)).join(', ')} | ${spreadOf(ratios)} | ${spreadOf(wallRatios)} | ${perMs('pauses')} | ${perMs('yields')} | ${iterationsPerYield} | ${modes} | ${byReason} |`);
  }
  console.log(`\ntarget: every "asked" mode at the scheduler's default slice (${DEFAULT_SLICE_US / 1000} ms) >= 0.97x no checks (CPU time), in every round`);
}
if (Object.keys(busy.paired).length > 0) {
  const spreadOf = (xs) => `${median(xs).toFixed(3)} [${Math.min(...xs).toFixed(3)}-${Math.max(...xs).toFixed(3)}]`;
  console.log(`\nThe same, paired within each cell (${BUSY_ROUNDS} rounds x ${BUSY_CELL_SECONDS} s of the loop thread's CPU per cell, in chunks of ${BUSY_CHUNK_MS} ms that alternate the mode with the loop without checks, the thread registered as in the mode):\n`);
  console.log('| mode | / no yields, loop thread CPU, per round | median [min-max] | / no yields, process CPU, median [min-max] | pauses per CPU ms of the mode | yields per CPU ms of the mode |');
  console.log('|---|---|---:|---:|---:|---:|');
  for (const [mode, cells] of Object.entries(busy.paired)) {
    const ratios = cells.map((c) => c.ratio);
    const perMs = (key) => median(cells.map((c) => c[key] / (c.modeSeconds * 1e3))).toFixed(2);
    console.log(`| ${mode} | ${ratios.map((r) => r.toFixed(3)).join(', ')} | ${spreadOf(ratios)} | ${spreadOf(cells.map((c) => c.processRatio))} | ${perMs('pauses')} | ${perMs('yields')} |`);
  }
}
console.log(JSON.stringify({ results, busy: busy.rows, busyPaired: busy.paired, busySkipped: busy.skipped, busyRatios }));
