// SPDX-License-Identifier: Apache-2.0 OR MIT
// The server of the service benchmark (bench/service.mjs): the example service
// (examples/fastify-service.js) with the heavy route's per-unit hook chosen by BENCH_MODE, plus
// /stats routes:
//   none          a plain loop, never yields (what a service has without Morpheus)
//   immediate:N   `await new Promise(setImmediate)` every N units
//   morpheus      the example's own: `await checkpoint()` when yieldRequested() (thread registered
//                 through BENCH_SOCKET)
// GET /stats reports since GET /stats/reset: monitorEventLoopDelay's p99, the yields by reason, the
// CPU time of each completed /heavy request (process.cpuUsage around the handler: process-wide, so
// with two heavy requests interleaved it counts both), and the runs: how long the heavy route kept
// the loop each time, from its start or the end of a pause that yielded to the next pause that
// yields or its end (wall ms: the time a light request that arrived meanwhile waited for the loop), and the process's CPU time.
'use strict';
const { monitorEventLoopDelay } = require('node:perf_hooks');
const morpheus = require('..');
const { build, MORPHEUS } = require('../examples/fastify-service.js');

const mode = process.env.BENCH_MODE ?? 'none';

const immediate = () => new Promise((resolve) => setImmediate(() => resolve(true)));
let stepAside;
if (mode === 'none') {
  stepAside = null;
} else if (mode.startsWith('immediate:')) {
  const every = Number(mode.slice('immediate:'.length));
  if (!Number.isSafeInteger(every) || every < 1) throw new Error(`BENCH_MODE ${mode}: N must be an integer >= 1`);
  stepAside = { requested: (done) => done % every === 0, pause: immediate };
} else if (mode === 'morpheus') {
  const worker = morpheus.initWorker({ socket: process.env.BENCH_SOCKET });
  if (!worker.attached) throw new Error(`morpheus mode: not attached to the scheduler at ${process.env.BENCH_SOCKET}`);
  stepAside = MORPHEUS; // the example's default
} else {
  throw new Error(`BENCH_MODE: none, immediate:N or morpheus, not ${mode}`);
}

const delay = monitorEventLoopDelay({ resolution: 1 });
let heavyCpuUs = [];
// The start of the heavy route's current run (null: it does not hold the loop).
let runStart = null;
let runsMs = [];
// The process's CPU time since the reset (all of the server's work: heavy, light, the loop, GC).
let cpuSinceReset = process.cpuUsage();
const endRun = () => {
  if (runStart !== null) runsMs.push(performance.now() - runStart);
  runStart = null;
};
// A pause that did not yield (it resolved false: nothing was asked, or another task stepped aside
// for the request) never gave the loop up: the run goes on.
const timed = (pause) => () => {
  const paused = performance.now();
  const started = runStart;
  return pause().then((yielded) => {
    if (yielded) {
      if (started !== null) runsMs.push(paused - started);
      runStart = performance.now();
    }
    return yielded;
  });
};
const app = build({ stepAside: stepAside === null ? null : { requested: stepAside.requested, pause: timed(stepAside.pause) } });
app.addHook('preHandler', async (request) => {
  if (request.url.startsWith('/heavy')) runStart = performance.now();
});
app.addHook('onSend', async (request) => {
  if (request.url.startsWith('/heavy')) endRun();
});
app.addHook('onRequest', async (request) => {
  if (request.url.startsWith('/heavy')) request.cpuStart = process.cpuUsage();
});
app.addHook('onResponse', async (request) => {
  if (request.cpuStart) {
    const { user, system } = process.cpuUsage(request.cpuStart);
    heavyCpuUs.push(user + system);
  }
});
app.get('/stats/reset', async () => {
  delay.reset();
  heavyCpuUs = [];
  runsMs = [];
  cpuSinceReset = process.cpuUsage();
  return {};
});
app.get('/stats', async () => {
  const worker = morpheus.currentWorker();
  return { delayP99Ms: delay.percentile(99) / 1e6, yields: worker ? worker.yieldCounts() : null, heavyCpuUs, runsMs, cpuUs: (({ user, system }) => user + system)(process.cpuUsage(cpuSinceReset)) };
});
delay.enable();
app.listen({ port: 0, host: '127.0.0.1' }).then((address) => console.log(JSON.stringify({ address })));
// A clean exit on the benchmark's SIGTERM, so exit hooks run (the worker's release, --cpu-prof's write).
process.once('SIGTERM', () => process.exit(0));
