// SPDX-License-Identifier: Apache-2.0 OR MIT
// Requests served by rotation on the event loop's thread (spec/SCB.md §5.7): one task steps aside per
// request, the yielder goes to the back of the FIFO, nobody waits forever, and a connection made
// before a yield is accepted, read and answered before the CPU-bound task resumes. The test plays the
// scheduler on a region file (direct registration); nothing here depends on timing.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { once } = require('node:events');
const morpheus = require('@morpheus-sched/node');
const { TestRegion } = require('./region.js');

process.env.MORPHEUS_REGION = '';
const SLOT = 0;

let region;
let worker;
test.beforeEach(() => {
  region = new TestRegion();
  worker = morpheus.initWorker({ region: region.path, slot: SLOT });
});
test.afterEach(() => {
  worker.close();
  region.close();
  morpheus._setTurnClock();
});

// Turns are measured with a clock each step of work advances (the CPU time of a step, made exact), so
// which task resumes never depends on how fast the machine ran.
let clock = 0;
test.beforeEach(() => morpheus._setTurnClock(() => clock));

function spin() {
  clock += 1000;
  let h = 1;
  for (let i = 0; i < 2000; i++) h = Math.imul(h ^ (h >>> 13), 0x5bd1e995) + i;
  return h;
}

test('CPU-bound tasks take turns of one request each, the yielder to the back', async () => {
  const REQUESTS = 8;
  let steps = 0;
  let requests = 0;
  const resumed = [];
  // Who ran the steps from the first request on, one [name, steps] entry per turn.
  const turns = [];
  // Two CPU-bound tasks; every 10th step (of either) the "scheduler" asks once more.
  const task = async (name) => {
    while (requests < REQUESTS) {
      spin();
      if (requests > 0) {
        if (turns.length === 0 || turns[turns.length - 1][0] !== name) turns.push([name, 0]);
        turns[turns.length - 1][1]++;
      }
      if (++steps % 10 === 0) {
        region.bump(SLOT);
        requests++;
      }
      if (await morpheus.checkpoint()) resumed.push(name);
    }
  };
  await Promise.all([task('A'), task('B')]);
  assert.equal(resumed.length, REQUESTS, `one yield per request: ${resumed.join(' ')}`);
  // A turn lasts one request (10 steps) or, for a task that was computing during a yield, one step
  // (it steps aside at its first checkpoint): the yielder goes to the back, so no task runs two
  // requests' worth in a row.
  const shown = turns.map(([name, n]) => `${name}${n}`).join(' ');
  assert.ok(turns.length >= REQUESTS - 1, `a turn per request: ${shown}`);
  for (const [, n] of turns) assert.ok(n <= 10, `no turn longer than one request: ${shown}`);
  assert.equal(region.scb(SLOT, 'yield_count'), BigInt(REQUESTS));
  assert.equal(region.scb(SLOT, 'last_ack_seq'), BigInt(REQUESTS));
});

test('a task whose turn was cut short by a repeated request resumes first, until it has caught up (run-time weighting)', async () => {
  let requests = 0;
  let sinceRequest = 0;
  const turns = [];
  // Three CPU-bound tasks; the "scheduler" asks after every 10 steps of work, except that the 4th
  // request comes 2 steps after the 3rd (a turn cut short).
  const task = async (name) => {
    while (requests < 12) {
      spin();
      if (turns.length === 0 || turns[turns.length - 1][0] !== name) turns.push([name, 0]);
      turns[turns.length - 1][1]++;
      if (++sinceRequest === (requests === 3 ? 2 : 10)) {
        region.bump(SLOT);
        requests++;
        sinceRequest = 0;
      }
      await morpheus.checkpoint();
    }
  };
  await Promise.all([task('A'), task('B'), task('C')]);
  const shown = turns.map(([name, n]) => `${name}${n}`).join(' ');
  // The task cut short after 2 steps has the least run time: it is resumed at once and runs a whole
  // turn more (2 + 10 steps in a row); every other turn is at most one request's worth. A strict FIFO
  // would resume the queue's head instead.
  assert.equal(turns.filter(([, n]) => n === 12).length, 1, `the cut-short task resumes first: ${shown}`);
  for (const [, n] of turns) assert.ok(n <= 12, `no task runs longer: ${shown}`);
});

test('nobody waits forever: when the resumed task ends, the next waiting one resumes without a request', async () => {
  const order = [];
  // A yields for request 1. B runs during that yield and sees request 2, a new one: B yields too.
  // A resumes first and ends; B must then resume although no further request comes.
  const a = (async () => {
    region.bump(SLOT);
    assert.equal(await morpheus.checkpoint(), true);
    order.push('A resumed');
  })();
  const b = (async () => {
    assert.equal(await morpheus.checkpoint(), false, 'B runs during A\'s yield: request 1 is not its');
    region.bump(SLOT);
    assert.equal(await morpheus.checkpoint(), true);
    order.push('B resumed');
  })();
  await Promise.all([a, b]);
  assert.deepEqual(order, ['A resumed', 'B resumed']);
  assert.equal(region.scb(SLOT, 'yield_count'), 2n);
});

test('a sync checkpoint during an async yield does not step aside for that request', async () => {
  region.bump(SLOT);
  const yielder = morpheus.checkpoint();
  assert.equal(morpheus.shouldYield(), false);
  assert.equal(region.scb(SLOT, 'last_ack_seq'), 1n);
  assert.equal(await yielder, true);
  assert.equal(region.scb(SLOT, 'yield_count'), 1n);
});

test('a connection made before the yield is accepted, read and answered before the CPU-bound task resumes', async () => {
  const dir = fs.mkdtempSync(path.join(region.dir, 'client-'));
  const sent = path.join(dir, 'sent');
  let answered = false;
  const server = http.createServer((request, response) => {
    answered = true;
    response.end('light');
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address();
  // The client connects, sends its request, then says so with a file; it prints the answer.
  const client = spawn(
    process.execPath,
    [
      '-e',
      `const net = require('node:net'); const fs = require('node:fs');
       const s = net.connect(${port}, '127.0.0.1', () => {
         s.write('GET /light HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n', () => fs.writeFileSync(${JSON.stringify(sent)}, ''));
       });
       let body = ''; s.setEncoding('utf8'); s.on('data', (d) => (body += d)); s.on('end', () => console.log(body.split('\\r\\n\\r\\n')[1]));`,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  try {
    // The CPU-bound task: busy (no poll runs) until the request is in the kernel's buffers, then the
    // scheduler asks once; when the task resumes, the request must have been answered.
    let answeredAtResume = null;
    for (;;) {
      spin();
      if (fs.existsSync(sent) && region.scb(SLOT, 'preempt_seq') === 0n) {
        assert.equal(answered, false, 'no poll ran while the task was busy');
        region.bump(SLOT);
      }
      if (await morpheus.checkpoint()) {
        answeredAtResume = answered;
        break;
      }
    }
    assert.equal(answeredAtResume, true, `the request was not answered within the yield's ${morpheus.YIELD_PASSES} passes`);
    const [body] = await Promise.all([
      new Promise((resolve) => {
        let out = '';
        client.stdout.setEncoding('utf8').on('data', (d) => (out += d));
        client.stdout.on('end', () => resolve(out.trim()));
      }),
      once(client, 'exit'),
    ]);
    assert.equal(body, 'light');
  } finally {
    client.kill();
    server.close();
  }
});
