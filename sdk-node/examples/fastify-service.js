// SPDX-License-Identifier: Apache-2.0 OR MIT
// A Fastify service with a CPU-heavy route that checkpoints and a light one. Run it with the main
// thread registered by the preload:
//
//   node --require @morpheus-sched/node/register examples/fastify-service.js [--port 3000]
//
// GET /heavy?units=N hashes N units of ~10 µs each and looks after every unit whether the scheduler
// asked this thread to yield; when it did, the route awaits checkpoint(), which steps aside for its
// turn of the event loop (the I/O poll runs, so /light requests are served), and carries on. GET /light answers at once. Without a
// scheduler (detached) checkpoints never yield and cost one atomic load.
'use strict';
const crypto = require('node:crypto');
const Fastify = require('fastify');
const morpheus = require('@morpheus-sched/node');

// One unit of pure-JS CPU work (no native hashing: that would leave the JS thread idle).
function unit(seed) {
  let h = seed | 0;
  for (let i = 0; i < 2000; i++) h = Math.imul(h ^ (h >>> 13), 0x5bd1e995) + i;
  return h;
}

// The hot loop lives in a plain function and returns to the handler only when asked to step aside:
// V8 runs work inlined into an async function that awaits about 1.5x slower even when it never
// yields (BENCHMARKS.md), so the awaits stay in the handler.
function hashUnits(state, units, requested) {
  while (state.done < units) {
    state.h = unit(state.h);
    state.done++;
    if (requested(state.done)) return true;
  }
  return false;
}

/** Morpheus: step aside when the scheduler asks (the default). */
const MORPHEUS = { requested: morpheus.yieldRequested, pause: morpheus.checkpoint };

/**
 * The service. `stepAside` says when the heavy route steps aside and how: `requested(unitsDone)` is
 * asked after every unit, `pause()` is awaited when it said yes (and resolves true if the route did
 * yield). The default is Morpheus; null never steps aside; the benchmark (bench/service.mjs) swaps in
 * fixed setImmediate cadences to compare with.
 */
function build({ stepAside = MORPHEUS } = {}) {
  const app = Fastify({ logger: false, keepAliveTimeout: 60_000 });
  const never = () => false;
  app.get('/heavy', async (request) => {
    const units = Math.min(Number(request.query.units ?? 20000), 1_000_000);
    const state = { h: crypto.randomInt(1 << 30), done: 0 };
    let yields = 0;
    if (stepAside === null) {
      hashUnits(state, units, never);
    } else {
      while (hashUnits(state, units, stepAside.requested)) {
        if (await stepAside.pause()) yields++;
      }
    }
    return { units, yields, hash: state.h >>> 0 };
  });
  app.get('/light', async () => {
    const worker = morpheus.currentWorker();
    return { ok: true, attached: worker !== null && worker.attached };
  });
  return app;
}

async function main() {
  const portFlag = process.argv.indexOf('--port');
  const port = portFlag > 0 ? Number(process.argv[portFlag + 1]) : 3000;
  if (morpheus.currentWorker() === null) morpheus.initWorker(); // not preloaded: register here
  const app = build();
  const address = await app.listen({ port, host: '127.0.0.1' });
  // One line a supervisor (or the package test) can read.
  console.log(JSON.stringify({ listening: address, worker: morpheus.currentWorker()?.detachReason ?? 'attached' }));
  const stop = () => app.close().then(() => process.exit(0));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

if (require.main === module) main();
module.exports = { build, unit, MORPHEUS };
