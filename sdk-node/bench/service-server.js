// SPDX-License-Identifier: Apache-2.0 OR MIT
// The service of the service benchmark (bench/service.mjs): Fastify, GET /heavy runs UNITS units of
// ~9 µs of pure-JS work with a yield hook after each, GET /light answers at once, GET /stats reports
// the event loop's delay (monitorEventLoopDelay). The hook is chosen by BENCH_MODE:
//   none          never yields
//   immediate:N   `await new Promise(setImmediate)` every N units
//   morpheus      `await checkpoint()` after every unit (the thread registered through the agent)
'use strict';
const { monitorEventLoopDelay } = require('node:perf_hooks');
const Fastify = require('fastify');
const morpheus = require('..');

const mode = process.env.BENCH_MODE ?? 'none';
const units = Number(process.env.BENCH_UNITS ?? 20000);

function unit(seed) {
  let h = seed | 0;
  for (let i = 0; i < 1800; i++) h = Math.imul(h ^ (h >>> 13), 0x5bd1e995) + i;
  return h;
}

const immediate = () => new Promise((resolve) => setImmediate(resolve));
let heavy;
if (mode === 'none') {
  heavy = async () => {
    let h = 1;
    for (let i = 0; i < units; i++) h = unit(h);
    return h;
  };
} else if (mode.startsWith('immediate:')) {
  const every = Number(mode.slice('immediate:'.length));
  heavy = async () => {
    let h = 1;
    for (let i = 0; i < units; i++) {
      h = unit(h);
      if ((i + 1) % every === 0) await immediate();
    }
    return h;
  };
} else if (mode === 'morpheus') {
  morpheus.initWorker({ region: process.env.BENCH_REGION, socket: process.env.BENCH_SOCKET });
  heavy = async () => {
    let h = 1;
    for (let i = 0; i < units; i++) {
      h = unit(h);
      await morpheus.checkpoint();
    }
    return h;
  };
} else {
  throw new Error(`BENCH_MODE: none, immediate:N or morpheus, not ${mode}`);
}

const delay = monitorEventLoopDelay({ resolution: 1 });
const app = Fastify({ logger: false, keepAliveTimeout: 60_000 });
app.get('/heavy', async () => ({ h: await heavy() }));
app.get('/light', async () => ({ ok: true }));
app.get('/stats/reset', async () => {
  delay.reset();
  return {};
});
app.get('/stats', async () => {
  const worker = morpheus.currentWorker();
  return { delayP99Ms: delay.percentile(99) / 1e6, yields: worker ? worker.yieldCounts() : null };
});
delay.enable();
app.listen({ port: 0, host: '127.0.0.1' }).then((address) => console.log(JSON.stringify({ address })));
