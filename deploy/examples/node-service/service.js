// SPDX-License-Identifier: Apache-2.0 OR MIT
// The example Node service of deploy/ (image localhost/morpheus/node-service, built by
// deploy/images/build.sh): each ROLE runs on a worker_threads thread of its own, which registers with
// the agent through @morpheus-sched/node (the socket: MORPHEUS_SOCKET, default /run/morpheus/agent.sock)
// and works as its role says. The main thread only reports: one line per thread when it registers,
// runs detached (with the reason: no agent, or the agent refused it) or registers again after an
// agent restart.
//
//     node service.js ROLE[,ROLE...]      roles: cooperative, hog, unescapable, critical
//     node service.js --probe-pid PID     can this container see or signal process PID? (prints errno)
//
// - cooperative: short bursts of work, a checkpoint after each (acknowledges every request at once);
// - hog: escapable, 250 ms bursts (HOG_BURST_MS) with no checkpoint inside, then one: the escalation candidate;
// - unescapable: the same bursts, registered with escapable=0: never escalated (spec/SCB.md §5.5);
// - critical: enters a critical section before registering and never leaves it: never escalated,
//   and what the "always in a critical section" alert of deploy/prometheus/rules.yaml detects.
// With PORT set, GET /healthz on that port answers each thread's last report as JSON.
'use strict';
const { Worker, isMainThread, parentPort, workerData } = require('node:worker_threads');

const ROLES = ['cooperative', 'hog', 'unescapable', 'critical'];
// A hog's and an unescapable worker's burst between checkpoints (HOG_BURST_MS; default 250).
const BURST_MS = Number(process.env.HOG_BURST_MS) > 0 ? Number(process.env.HOG_BURST_MS) : 250;

// Work the optimiser cannot remove.
function burn(iterations) {
  let x = 0x9e3779b9;
  for (let i = 0; i < iterations; i++) x = (Math.imul(x, 31) + i) >>> 0;
  return x;
}

function burnFor(ms) {
  const until = performance.now() + ms;
  let x = 0;
  while (performance.now() < until) x ^= burn(5000);
  return x;
}

async function runRole(role) {
  const morpheus = require('@morpheus-sched/node');
  morpheus.notices.on('notice', ({ level, message }) => parentPort.postMessage({ role, notice: `${level}: ${message}` }));
  if (role === 'critical') morpheus.criticalEnter();
  let worker;
  try {
    worker = morpheus.initWorker({ escapable: role !== 'unescapable' });
  } catch (error) {
    // An agent that refuses this process (a socket it may not use, a refused registration): say why
    // and serve without hints rather than fail.
    parentPort.postMessage({ role, notice: `refused by the agent, running detached: ${error.message}` });
    worker = morpheus.initWorker({ detached: true, escapable: role !== 'unescapable' });
  }
  const report = () => ({ role, attached: worker.attached, slot: worker.slot, reattachments: worker.reattachments,
    detachReason: worker.detachReason ?? null, detachDetail: worker.detachDetail ?? null });
  let last = JSON.stringify(report());
  parentPort.postMessage({ role, report: report() });
  for (;;) {
    if (role === 'critical') {
      burn(1 << 20); // in the section for good: no checkpoint
      continue;
    }
    if (role === 'cooperative') burn(20000);
    else burnFor(BURST_MS);
    await morpheus.checkpoint();
    const now = JSON.stringify(report());
    if (now !== last) {
      last = now;
      parentPort.postMessage({ role, report: report() });
    }
  }
}

function probe(pid) {
  const visible = require('node:fs').readdirSync('/proc').filter((name) => /^\d+$/.test(name)).map(Number);
  let signal = 'ok';
  try {
    process.kill(pid, 0);
  } catch (error) {
    signal = error.code;
  }
  console.log(`probe: pid=${pid} signal=${signal} in_proc=${visible.includes(pid)} own_processes=${visible.length}`);
}

function main() {
  const args = process.argv.slice(2);
  if (args[0] === '--probe-pid' && args.length === 2 && /^\d+$/.test(args[1])) return probe(Number(args[1]));
  const roles = (args[0] ?? '').split(',').filter(Boolean);
  const unknown = roles.filter((r) => !ROLES.includes(r));
  if (args.length !== 1 || roles.length === 0 || unknown.length) {
    console.error(`service: usage: node service.js ROLE[,ROLE...] (${ROLES.join(', ')}) | --probe-pid PID` +
      (unknown.length ? `; unknown role '${unknown[0]}'` : ''));
    process.exitCode = 2;
    return;
  }
  const reports = {};
  for (const role of roles) {
    const thread = new Worker(__filename, { workerData: { role } });
    thread.on('message', (m) => {
      if (m.notice) console.log(`service: role=${m.role} notice ${m.notice}`);
      if (!m.report) return;
      reports[m.role] = m.report;
      const r = m.report;
      console.log(r.attached
        ? `service: role=${r.role} registered slot=${r.slot} reattachments=${r.reattachments}`
        : `service: role=${r.role} detached reason=${r.detachReason}${r.detachDetail ? ` detail=${r.detachDetail}` : ''}`);
    });
    thread.on('error', (e) => { console.error(`service: role=${role} failed: ${e && e.stack ? e.stack : e}`); process.exit(1); });
  }
  if (process.env.PORT) {
    require('node:http').createServer((req, res) => {
      res.writeHead(req.url === '/healthz' ? 200 : 404, { 'content-type': 'application/json' });
      res.end(JSON.stringify(reports));
    }).listen(Number(process.env.PORT));
  }
}

if (isMainThread) main();
else runRole(workerData.role).catch((e) => { parentPort.postMessage({ role: workerData.role, notice: `error: ${e.stack}` }); process.exit(1); });
