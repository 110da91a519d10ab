// SPDX-License-Identifier: Apache-2.0 OR MIT
// A Fastify service with a CPU-heavy route that checkpoints and a light one. Run it with the main
// thread registered by the preload:
//
//   node --require @morpheus-sched/node/register examples/fastify-service.js [--port 3000]
//
// GET /heavy?units=N hashes N units of ~10 µs each and awaits checkpoint() after every unit: when the
// scheduler asks this thread to yield, the route steps aside for one turn of the event loop (the I/O
// poll runs, so /light requests are served) and carries on. GET /light answers at once. Without a
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

function build() {
  const app = Fastify({ logger: false });
  app.get('/heavy', async (request) => {
    const units = Math.min(Number(request.query.units ?? 20000), 1_000_000);
    let h = crypto.randomInt(1 << 30);
    let yields = 0;
    for (let i = 0; i < units; i++) {
      h = unit(h);
      if (await morpheus.checkpoint()) yields++;
    }
    return { units, yields, hash: h >>> 0 };
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
module.exports = { build };
