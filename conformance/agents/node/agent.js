#!/usr/bin/env node
// SPDX-License-Identifier: Apache-2.0 OR MIT
// Conformance agent for sdk-node: the agent protocol of spec/CONFORMANCE.md on stdin/stdout, every
// operation done through the public API of @morpheus-sched/node (nothing of the protocol is here).
//
// Requests are read synchronously, so Node's event loop runs only while a request awaits something.
// Async checkpoints are awaited on that real event loop: before each one the agent queues a probe
// with setImmediate, ahead of anything the checkpoint queues. When the probe runs and the checkpoint
// has not finished, the checkpointing task is parked in the event loop (it yielded): the probe sends
// the "suspended" event and blocks on the harness's "resume", so the task cannot resume before it.
'use strict';
const fs = require('node:fs');
const morpheus = require('../../../sdk-node');

const BREAK = process.env.MORPHEUS_CONFORMANCE_BREAK ?? '';

class ProtocolError extends Error {}

// ------------------------------------------------------------------------------------------------
// Line I/O on fds 0 and 1, synchronous.

let pending = Buffer.alloc(0);
const chunk = Buffer.alloc(65536);

function readLine() {
  for (;;) {
    const newline = pending.indexOf(0x0a);
    if (newline >= 0) {
      const line = pending.subarray(0, newline).toString('utf8');
      pending = pending.subarray(newline + 1);
      return line;
    }
    let n;
    try {
      n = fs.readSync(0, chunk, 0, chunk.length, null);
    } catch (error) {
      if (error.code === 'EAGAIN') continue;
      if (error.code === 'EOF') return null;
      throw error;
    }
    if (n === 0) return null;
    pending = Buffer.concat([pending, chunk.subarray(0, n)]);
  }
}

function send(message) {
  fs.writeSync(1, JSON.stringify(message) + '\n');
}

/** The OS thread id of the calling thread (`/proc/thread-self` -> `PID/task/TID`). */
function gettid() {
  return Number(fs.readlinkSync('/proc/thread-self').split('/').pop());
}

// ------------------------------------------------------------------------------------------------
// Operations

let region = null;
let worker = null;

function needWorker(op) {
  if (worker === null) {
    throw morpheus.MorpheusError.of('NOT_REGISTERED', `NOT_REGISTERED: ${op} needs a worker, and this thread holds none`);
  }
  return worker;
}

/** The SDK's status call (spec/SCB.md §6): attached, detached (false), or GENERATION_CHANGED when lost. */
function status() {
  const held = needWorker('status');
  try {
    held.status();
    return { attached: true };
  } catch (error) {
    if (error instanceof morpheus.errors.DetachedError) return { attached: false };
    throw error;
  }
}

function suspend(id) {
  send({ id, event: 'suspended' });
  const line = readLine();
  const resume = line === null ? null : JSON.parse(line);
  if (resume === null || resume.op !== 'resume' || resume.id !== id) {
    process.stderr.write(`node agent: expected resume for ${id}, got ${line}\n`);
    process.exit(3);
  }
}

async function checkpointAsync(id) {
  if (BREAK === 'ack_before_yield') {
    // The broken order on purpose: acknowledge (sync checkpoint), then yield.
    const yielded = morpheus.shouldYield();
    if (yielded) {
      suspend(id);
      await new Promise((resolve) => setImmediate(resolve));
    }
    return yielded;
  }
  // The probe runs once, before the yield's first pass of the loop (SCB.md §5.7: that pass
  // acknowledges, and the task resumes YIELD_PASSES passes later): one suspension per yield.
  let finished = false;
  const probe = () => {
    if (!finished) suspend(id);
  };
  setImmediate(probe);
  const yielded = await morpheus.checkpoint();
  finished = true;
  // The checkpointing task ends here and gives control back to the loop, as the Python agent's does
  // (run_until_complete): the rotation then sees its turn over (SCB.md §5.7). Without this the next
  // request's checkpoint would continue the same turn, a slice of wall time later, and step aside.
  await new Promise((resolve) => setImmediate(resolve));
  return yielded;
}

async function checkpointLoop(request) {
  const end = performance.now() + request.duration_ms;
  let iterations = 0;
  let yields = 0;
  if (request.mode === 'async') {
    while (performance.now() < end) {
      for (let i = 0; i < 64; i++) {
        iterations++;
        if (await morpheus.checkpoint()) yields++;
      }
    }
  } else {
    while (performance.now() < end) {
      for (let i = 0; i < 64; i++) {
        iterations++;
        if (morpheus.shouldYield()) yields++;
      }
    }
  }
  return { iterations, yields };
}

/**
 * `count` CPU-bound tasks started together on this one event loop, each making `checkpoints` async
 * checkpoints back to back with nothing else to await (spec/SCB.md §5.7: the SDK's rotation serves
 * them). Resolves when every task has ended. `tick_ns`: the rotation times turns by the SDK's test clock
 * (`_setTurnClock`), advanced by it just before each checkpoint; `turns` counts the runs of checkpoints
 * one task made back to back. `callbacks`: also the loop's own work, a task that awaits the loop's next
 * turn (setImmediate) that many times; `longest_run`: the most checkpoints made between two of its steps.
 */
async function tasks(request) {
  const tick = request.tick_ns ?? null;
  if (tick !== null && !(Number.isInteger(tick) && tick >= 1)) throw new ProtocolError('tasks needs a positive integer tick_ns');
  const callbacks = request.callbacks ?? 0;
  if (!(Number.isInteger(callbacks) && callbacks >= 0)) throw new ProtocolError('tasks needs a positive integer callbacks');
  let [steps, yields, turns, last, clock, light, run, longestRun] = [0, 0, 0, -1, 0, callbacks, 0, 0];
  const one = async (me) => {
    for (let i = 0; i < request.checkpoints; i++) {
      steps++;
      if (me !== last) [turns, last] = [turns + 1, me];
      if (light > 0) longestRun = Math.max(longestRun, ++run);
      if (tick !== null) clock += tick;
      if (await morpheus.checkpoint()) yields++;
    }
  };
  const work = async () => {
    for (; light > 0; light--, run = 0) await new Promise((resolve) => setImmediate(resolve));
  };
  if (tick !== null) morpheus._setTurnClock(() => clock);
  try {
    const cpu = Array.from({ length: request.count }, (_, me) => one(me));
    await Promise.all(callbacks > 0 ? [...cpu, work()] : cpu);
    // As after an async checkpoint: the tasks' turn ends here and the loop has control again.
    await new Promise((resolve) => setImmediate(resolve));
  } finally {
    if (tick !== null) morpheus._setTurnClock();
  }
  return callbacks > 0 ? { steps, yields, turns, longest_run: longestRun } : { steps, yields, turns };
}

function state() {
  const out = { attached: region !== null, registered: worker !== null, depth: morpheus.criticalDepth() };
  if (worker !== null) {
    const counts = worker.yieldCounts();
    Object.assign(out, {
      slot: worker.slot,
      cached_ack: Number(worker.acknowledgedSeq),
      yields: Object.values(counts).reduce((a, b) => a + b, 0),
      mode: worker.runtimeMode,
      escapable: worker.escapable,
      priority: worker.priority,
    });
  }
  return out;
}

async function handle(id, request) {
  switch (request.op) {
    case 'attach':
      region = request.path === '' ? null : morpheus.attach(request.path ?? undefined);
      return { attached: region !== null };
    case 'register': {
      // What the application asks for at registration (absent or null: the SDK's defaults).
      const asked = {};
      if (request.escapable !== undefined && request.escapable !== null) asked.escapable = request.escapable;
      if (request.priority !== undefined && request.priority !== null) asked.priority = request.priority;
      if (region !== null) {
        if (!Number.isInteger(request.slot)) throw new ProtocolError('register needs an integer slot');
        worker = morpheus.initWorker({ region, slot: request.slot, ...asked });
      } else {
        worker = morpheus.initWorker({ detached: true, ...asked });
      }
      return { slot: worker.slot, tid: gettid(), attached: worker.attached };
    }
    case 'register_agent': {
      // Registration through the agent (SCB.md §4.1) by discovery (§1.2): no region, no slot.
      const asked = {};
      if (request.escapable !== undefined && request.escapable !== null) asked.escapable = request.escapable;
      if (request.priority !== undefined && request.priority !== null) asked.priority = request.priority;
      worker = morpheus.initWorker(asked);
      return { slot: worker.slot, tid: gettid(), attached: worker.attached };
    }
    case 'checkpoint': {
      let yielded;
      if (request.mode === 'sync') yielded = morpheus.shouldYield();
      else if (request.mode === 'async') yielded = await checkpointAsync(id);
      else throw new ProtocolError(`mode must be sync or async, got ${JSON.stringify(request.mode)}`);
      // Reported exactly as the SDK returns it: a lost worker's checkpoint is a plain false (§6).
      return { yielded };
    }
    case 'checkpoint_loop':
      return checkpointLoop(request);
    case 'critical_enter':
      return { depth: morpheus.criticalEnter() };
    case 'critical_exit':
      return { depth: morpheus.criticalExit() };
    case 'set_escapable':
      if (typeof request.value !== 'boolean') throw new ProtocolError('value must be a boolean');
      needWorker('set_escapable').escapable = request.value;
      return {};
    case 'set_priority':
      if (!Number.isInteger(request.value)) throw new ProtocolError('value must be an integer');
      needWorker('set_priority').priority = request.value;
      return {};
    case 'state':
      return state();
    case 'status':
      return status();
    case 'explicit_yield':
      needWorker('explicit_yield').recordExplicitYield();
      return {};
    case 'mode_clock':
      if (!Number.isInteger(request.ns) || request.ns < 0) throw new ProtocolError('mode_clock needs an integer ns >= 0');
      morpheus._setModeClock(request.ns); // the main thread's, where every op runs
      return {};
    case 'tasks':
      if (!Number.isInteger(request.count) || !Number.isInteger(request.checkpoints)) {
        throw new ProtocolError('tasks needs integers count and checkpoints');
      }
      return tasks(request);
    case 'shutdown': {
      const held = needWorker('shutdown');
      worker = null;
      held.close();
      return {};
    }
    default:
      return null;
  }
}

async function main() {
  send({
    protocol: 'morpheus-conformance',
    version: 1,
    sdk: 'node',
    runtime_kind: 'NODE',
    abi_major: morpheus.ABI_MAJOR,
    abi_minor: morpheus.ABI_MINOR,
    checkpoint_modes: ['sync', 'async'],
    state_fields: ['escapable', 'priority'],
    ops: ['explicit_yield', 'tasks', 'turn_clock', 'mode_clock'],
    pid: process.pid,
  });
  for (let line = readLine(); line !== null; line = readLine()) {
    let request;
    try {
      request = JSON.parse(line);
    } catch (error) {
      send({ id: null, ok: false, error: 'BAD_REQUEST', message: String(error) });
      continue;
    }
    const { id } = request;
    if (request.op === 'exit') break;
    try {
      const result = await handle(id, request);
      if (result === null) send({ id, ok: false, error: 'UNSUPPORTED', message: `unknown op ${request.op}` });
      else send({ id, ok: true, ...result });
    } catch (error) {
      if (error instanceof morpheus.MorpheusError) {
        send({ id, ok: false, error: error.code, message: error.message });
      } else if (error instanceof ProtocolError) {
        send({ id, ok: false, error: 'BAD_REQUEST', message: error.message });
      } else {
        throw error;
      }
    }
  }
  // Exit without shutting the worker down (the harness has judged what it cares about).
  process.exit(0);
}

main().catch((error) => {
  process.stderr.write(`node agent: ${error && error.stack ? error.stack : error}\n`);
  process.exit(2);
});
