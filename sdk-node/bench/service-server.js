// SPDX-License-Identifier: Apache-2.0 OR MIT
// The server of the service benchmark (bench/service.mjs): the example service
// (examples/fastify-service.js) with the heavy route's per-unit hook chosen by BENCH_MODE, plus
// /stats routes:
//   none          a plain loop, never yields (what a service has without Morpheus)
//   immediate:N   `await new Promise(setImmediate)` every N units
//   morpheus      the example's own: `await checkpoint()` when yieldRequested() (thread registered
//                 through BENCH_SOCKET)
// GET /stats reports since GET /stats/reset: monitorEventLoopDelay's p99, the yields by reason, and
// the CPU time of each completed /heavy request (process.cpuUsage around the handler: a cost that the
// machine's other load does not stretch).
'use strict';
const { monitorEventLoopDelay } = require('node:perf_hooks');
const morpheus = require('..');
const { build } = require('../examples/fastify-service.js');

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
  stepAside = undefined; // the example's default
} else {
  throw new Error(`BENCH_MODE: none, immediate:N or morpheus, not ${mode}`);
}

const delay = monitorEventLoopDelay({ resolution: 1 });
let heavyCpuUs = [];
const app = build(stepAside === undefined ? {} : { stepAside });
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
  return {};
});
app.get('/stats', async () => {
  const worker = morpheus.currentWorker();
  return { delayP99Ms: delay.percentile(99) / 1e6, yields: worker ? worker.yieldCounts() : null, heavyCpuUs };
});
delay.enable();
app.listen({ port: 0, host: '127.0.0.1' }).then((address) => console.log(JSON.stringify({ address })));
