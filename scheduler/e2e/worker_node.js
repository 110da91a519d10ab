// SPDX-License-Identifier: GPL-2.0-only
// The Node SDK's test worker for the real-kernel test (e2e/guest.sh): one role per process (a Node
// process runs its JavaScript on one thread), registered through the agent by the packaged
// @morpheus-sched/node, printing the same report line as worker.rs, worker_c.c and worker_py.py.
//
//     node worker_node.js [--ready FILE] (--seconds S | --until FILE) ROLE      (cooperative, spin, critical, unescapable)
//
// --ready FILE: once registered, the worker writes `pid=P tid=T` (its process and thread) to FILE.
// --until FILE: it runs until FILE exists, or its directory is gone (the test that owned it has ended
// without making it), instead of for a time: the test decides when (as worker.rs).
//
// The SDK's API does not expose the SCB, so its counters are read by `morpheus-e2e-worker --scb-of
// PID SLOT` from this process's own mapping of the region, while the worker is still registered (and
// the critical role still in its section). The cooperative role uses the asynchronous checkpoint, Node's
// yield point: it yields to the event loop, then acknowledges.
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const morpheus = require('@morpheus-sched/node');

const ROLES = ['cooperative', 'spin', 'critical', 'unescapable'];

function parseArgs(argv) {
  const usage = 'usage: node worker_node.js [--ready FILE] (--seconds S | --until FILE) ROLE';
  const options = {};
  let i = 0;
  for (; i + 1 < argv.length && argv[i].startsWith('--'); i += 2) {
    if (!['--seconds', '--until', '--ready'].includes(argv[i])) throw new Error(`unknown option '${argv[i]}'; ${usage}`);
    options[argv[i].slice(2)] = argv[i + 1];
  }
  if (i !== argv.length - 1 || (options.seconds === undefined) === (options.until === undefined)) throw new Error(usage);
  const seconds = Number(options.seconds);
  if (options.seconds !== undefined && !(seconds > 0 && seconds <= 3600)) throw new Error(`--seconds ${options.seconds}: expected a number in (0, 3600]`);
  if (!ROLES.includes(argv[i])) throw new Error(`unknown role '${argv[i]}' (${ROLES.join(', ')})`);
  return { seconds, until: options.until, ready: options.ready, role: argv[i] };
}

// Work the optimiser cannot remove.
function burn(iterations) {
  let x = 0x9e3779b9;
  for (let i = 0; i < iterations; i++) x = (Math.imul(x, 31) + i) >>> 0;
  return x;
}

function scbOf(slot) {
  const line = execFileSync('morpheus-e2e-worker', ['--scb-of', String(process.pid), String(slot)], { encoding: 'utf8' });
  return Object.fromEntries(line.trim().split(/\s+/).map((kv) => kv.split('=')));
}

async function main() {
  const { seconds, until, ready, role } = parseArgs(process.argv.slice(2));
  // The critical role opens its section before it registers (the depth is the thread's), so the SCB
  // says in_critical from the moment the worker is RUNNING, whatever registration costs under TCG.
  if (role === 'critical') morpheus.criticalEnter();
  // Node workers are not escapable unless asked (ESCAPABLE_DEFAULT, SCB.md §5.5).
  const worker = morpheus.initWorker({ escapable: role !== 'unescapable' });
  if (!worker.attached || worker.slot === null) {
    console.log(`role=${role} sdk=node error=registered but detached (${worker.detachReason})`);
    return 1;
  }
  const start = scbOf(worker.slot);
  if (ready !== undefined) {
    // The JavaScript thread's own tid, from the kernel; whole or not at all: written aside, then renamed.
    const tid = fs.readlinkSync('/proc/thread-self').split('/').pop();
    fs.writeFileSync(`${ready}.tmp`, `pid=${process.pid} tid=${tid}\n`);
    fs.renameSync(`${ready}.tmp`, ready);
  }
  const deadline = performance.now() + seconds * 1000;
  const untilDir = until === undefined ? undefined : path.dirname(until);
  const running = until === undefined ? () => performance.now() < deadline : () => !fs.existsSync(until) && fs.existsSync(untilDir);
  let yields = 0;
  while (running()) {
    burn(20000);
    if (role === 'cooperative' && (await morpheus.checkpoint())) yields += 1;
  }
  // Taken before the section closes: afterwards the worker, still ignoring requests, may rightly be
  // escalated, and that must not count against the section.
  const scb = scbOf(worker.slot);
  const report = `role=${role} sdk=node slot=${worker.slot} preempt_seq_start=${start.preempt_seq} preempt_seq=${scb.preempt_seq} ` +
    `last_ack_seq=${scb.last_ack_seq} escalations=${scb.escalations} in_critical=${scb.in_critical} yields=${yields}`;
  if (role === 'critical') morpheus.criticalExit();
  console.log(report);
  worker.close();
  return 0;
}

main().then(
  (code) => { process.exitCode = code; },
  (error) => { console.log(`sdk=node error=${error && error.stack ? error.stack : error}`); process.exitCode = 1; },
);
