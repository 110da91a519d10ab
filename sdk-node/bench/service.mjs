// SPDX-License-Identifier: Apache-2.0 OR MIT
// The service benchmark: the example Fastify service (bench/service-server.js) driven over loopback,
// one server process per cell, with the sim scheduler (scx_morpheus --backend sim, observer mode)
// running throughout. Two tables, one run:
//
// 1. Light latency under heavy load, per yield mode (none, setImmediate every 1/10/100 units,
//    Morpheus): 2 closed-loop /heavy clients plus LIGHT_PER_SECOND /light requests per second, open
//    loop, latency measured from each request's intended send time; every keep-alive connection is
//    opened before the run (Node accepts one connection per loop iteration, which a busy loop would
//    delay by seconds). The scheduler's slice is --slice-us.
// 2. What Morpheus costs the heavy route when nothing is asked: one closed-loop /heavy client, no
//    light load, against a second scheduler whose slice (10 s) a heavy request never reaches. The figure is each
//    request's CPU time (measured in the server around the handler, so the machine's other load does
//    not stretch it), Morpheus against the plain loop, rounds alternating the order.
//
// Usage: node bench/service.mjs --scheduler PATH [--seconds 6] [--rounds 3] [--slice-us 1000] [--tick-us 1000]
//        [--modes none,immediate:1,...,morpheus] [--out FILE]
// (--modes picks the light-latency cells, e.g. to profile one; `none` is always run, the baseline.)
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const { values: args } = parseArgs({
  options: {
    scheduler: { type: 'string' },
    seconds: { type: 'string', default: '6' },
    rounds: { type: 'string', default: '3' },
    'slice-us': { type: 'string', default: '1000' },
    'tick-us': { type: 'string', default: '1000' },
    modes: { type: 'string' },
    out: { type: 'string' },
  },
});
if (!args.scheduler) throw new Error('usage: node bench/service.mjs --scheduler PATH [--seconds S] [--rounds R] [--slice-us US] [--out FILE]');
const SECONDS = Number(args.seconds);
const ROUNDS = Number(args.rounds);
const SLICE_US = Number(args['slice-us']);
// The sim backend's sampling period (its own default is 1000 µs): a turn overruns the slice by up to one tick.
const TICK_US = Number(args['tick-us']);
for (const [name, value] of [['seconds', SECONDS], ['rounds', ROUNDS], ['slice-us', SLICE_US], ['tick-us', TICK_US]]) {
  if (!Number.isFinite(value) || value <= 0) throw new Error(`--${name}: expected a positive number, got ${args[name]}`);
}
const ALL_MODES = ['none', 'immediate:1', 'immediate:10', 'immediate:100', 'morpheus'];
const MODES = args.modes === undefined ? ALL_MODES : ['none', ...args.modes.split(',').filter((m) => m !== 'none')];
for (const mode of MODES) {
  if (!ALL_MODES.includes(mode) && !/^immediate:[1-9][0-9]*$/.test(mode)) throw new Error(`--modes: unknown mode ${mode} (none, immediate:N, morpheus)`);
}
const LIGHT_PER_SECOND = 50;
const LIGHT_SOCKETS = 16;
// The longest slice scx_morpheus accepts (10 s): far beyond one heavy request (~0.2 s of CPU).
const QUIET_SLICE_US = 10_000_000;

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'morpheus-node-service-'));

/** A sim scheduler with its own socket; resolves once it listens. */
async function startScheduler(name, sliceUs, started) {
  const socket = path.join(dir, `${name}.sock`);
  const child = spawn(args.scheduler, ['--backend', 'sim', '--mode', 'observer', '--socket', socket, '--slice-us', String(sliceUs), '--tick-us', String(TICK_US), '--max-workers', '4'], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  started.push(child);
  for (let i = 0; i < 400 && !fs.existsSync(socket) && child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 50));
  if (!fs.existsSync(socket)) throw new Error(`${args.scheduler} did not start listening at ${socket}`);
  return { child, socket };
}

function get(agent, port, route) {
  return new Promise((resolve, reject) => {
    const request = http.get({ host: '127.0.0.1', port, path: route, agent }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (c) => (body += c));
      response.on('end', () => (response.statusCode === 200 ? resolve(body) : reject(new Error(`${route}: HTTP ${response.statusCode} ${body}`))));
    });
    request.on('error', reject);
  });
}

const percentile = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const median = (xs) => percentile(xs, 50);

async function startServer(mode, socket) {
  // BENCH_SERVER_NODE_ARGS: extra node flags for the servers, e.g. --cpu-prof --cpu-prof-dir=DIR.
  const nodeArgs = (process.env.BENCH_SERVER_NODE_ARGS ?? '').split(' ').filter(Boolean);
  const server = spawn(process.execPath, [...nodeArgs, path.join(here, 'service-server.js')], {
    env: { ...process.env, BENCH_MODE: mode, BENCH_SOCKET: socket },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let line = '';
  server.stdout.setEncoding('utf8');
  while (!line.includes('\n')) {
    const [chunk] = await Promise.race([once(server.stdout, 'data'), once(server, 'exit').then(() => [null])]);
    if (chunk === null) throw new Error(`the ${mode} server exited before listening`);
    line += chunk;
  }
  const port = new URL(JSON.parse(line.split('\n')[0]).address).port;
  return { server, port };
}

async function stopServer(server) {
  server.kill('SIGTERM');
  if (server.exitCode === null && server.signalCode === null) await once(server, 'exit');
}

/** Table 1: light latency while two heavy clients keep the route busy. */
async function loadedCell(mode, socket) {
  const { server, port } = await startServer(mode, socket);
  const heavyAgent = new http.Agent({ keepAlive: true, maxSockets: 2 });
  const lightAgent = new http.Agent({ keepAlive: true, maxSockets: LIGHT_SOCKETS });
  await Promise.all([...Array(LIGHT_SOCKETS)].map(() => get(lightAgent, port, '/light')));
  await Promise.all([0, 1].map(() => get(heavyAgent, port, '/light')));
  await get(lightAgent, port, '/stats/reset');
  const cpuStart = process.cpuUsage();
  const end = performance.now() + SECONDS * 1000;
  let heavyDone = 0;
  const heavyClient = async () => {
    while (performance.now() < end) {
      await get(heavyAgent, port, '/heavy');
      heavyDone++;
    }
  };
  const latencies = [];
  const lights = [];
  const start = performance.now();
  for (let k = 0; start + (k * 1000) / LIGHT_PER_SECOND < end; k++) {
    const intended = start + (k * 1000) / LIGHT_PER_SECOND;
    lights.push(
      new Promise((r) => setTimeout(r, Math.max(0, intended - performance.now())))
        .then(() => get(lightAgent, port, '/light'))
        .then(() => latencies.push(performance.now() - intended)),
    );
  }
  await Promise.all([heavyClient(), heavyClient(), ...lights]);
  const wall = (performance.now() - start) / 1000;
  const stats = JSON.parse(await get(lightAgent, port, '/stats'));
  heavyAgent.destroy();
  lightAgent.destroy();
  await stopServer(server);
  const cpu = process.cpuUsage(cpuStart);
  return {
    mode,
    heavyPerSecond: heavyDone / wall,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    delayP99: stats.delayP99Ms,
    yields: stats.yields,
    heavyCpuMs: median(stats.heavyCpuUs) / 1000,
    serverCpuMsPerHeavy: stats.cpuUs / 1000 / heavyDone,
    runP50: percentile(stats.runsMs, 50),
    runP99: percentile(stats.runsMs, 99),
    runs: stats.runsMs.length,
    clientCpuShare: (cpu.user + cpu.system) / 1e6 / wall,
  };
}

/** Table 2: one heavy client, nothing asked; the CPU time of each heavy request. */
async function idleCell(mode, socket) {
  const { server, port } = await startServer(mode, socket);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  await get(agent, port, '/light');
  await get(agent, port, '/heavy?units=2000'); // warm-up: the route compiled before the window
  await get(agent, port, '/stats/reset');
  const end = performance.now() + SECONDS * 1000;
  const walls = [];
  while (performance.now() < end) {
    const t = performance.now();
    await get(agent, port, '/heavy');
    walls.push(performance.now() - t);
  }
  const stats = JSON.parse(await get(agent, port, '/stats'));
  agent.destroy();
  await stopServer(server);
  const yields = stats.yields ? Object.values(stats.yields).reduce((a, b) => a + b, 0) : 0;
  return { mode, requests: stats.heavyCpuUs.length, cpuMs: median(stats.heavyCpuUs) / 1000, wallMs: median(walls), yields };
}

const loadBefore = os.loadavg();
const schedulers = [];
const rows = {};
const idle = [];
try {
  const asking = await startScheduler('asking', SLICE_US, schedulers);
  const quiet = await startScheduler('quiet', QUIET_SLICE_US, schedulers);
  for (let round = 0; round < ROUNDS; round++) {
    for (const mode of MODES) (rows[mode] ??= []).push(await loadedCell(mode, asking.socket));
    const order = round % 2 === 0 ? ['none', 'morpheus'] : ['morpheus', 'none'];
    const cells = {};
    for (const mode of order) cells[mode] = await idleCell(mode, quiet.socket);
    idle.push(cells);
  }
} finally {
  for (const child of schedulers) {
    child.kill('SIGINT');
    if (child.exitCode === null && child.signalCode === null) await once(child, 'exit');
  }
  fs.rmSync(dir, { recursive: true, force: true });
}
const loadAfter = os.loadavg();

const lines = [];
const out = (s = '') => lines.push(s);
out(`node ${process.version}; ${os.cpus().length} CPUs; load average (1 min) ${loadBefore[0].toFixed(1)} before, ${loadAfter[0].toFixed(1)} after; ${SECONDS} s x ${ROUNDS} rounds per cell, medians of the rounds`);
out(`command: node bench/service.mjs --scheduler ${path.basename(args.scheduler)} --seconds ${SECONDS} --rounds ${ROUNDS} --slice-us ${SLICE_US} --tick-us ${TICK_US}`);
out();
out(`Light latency under heavy load (scx_morpheus --backend sim --mode observer --slice-us ${SLICE_US} --tick-us ${TICK_US}):`);
out();
out('| heavy loop yields | light p50 ms | light p99 ms | event-loop delay p99 ms | heavy run p50 ms | heavy run p99 ms | heavy req/s vs none | heavy CPU ms per request | server CPU ms per heavy request | yields per cell |');
out('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
const base = median(rows.none.map((r) => r.heavyPerSecond));
for (const mode of MODES) {
  const r = rows[mode];
  const yields = r.map((x) => (x.yields ? Object.values(x.yields).reduce((a, b) => a + b, 0) : '-'));
  out(`| ${mode} | ${median(r.map((x) => x.p50)).toFixed(2)} | ${median(r.map((x) => x.p99)).toFixed(2)} | ${median(r.map((x) => x.delayP99)).toFixed(2)} | ${median(r.map((x) => x.runP50)).toFixed(2)} | ${median(r.map((x) => x.runP99)).toFixed(2)} | ${(median(r.map((x) => x.heavyPerSecond)) / base).toFixed(3)} | ${median(r.map((x) => x.heavyCpuMs)).toFixed(1)} | ${median(r.map((x) => x.serverCpuMsPerHeavy)).toFixed(1)} | ${yields.join(', ')} |`);
}
out();
out(`Heavy route when nothing is asked (one client; scheduler slice ${QUIET_SLICE_US / 1e6} s; CPU time per request, median of the cell):`);
out();
out('| round | none CPU ms | morpheus CPU ms | morpheus / none | none wall ms | morpheus wall ms | requests (none, morpheus) | morpheus yields |');
out('|---|---:|---:|---:|---:|---:|---:|---:|');
idle.forEach((c, i) => {
  out(`| ${i + 1} | ${c.none.cpuMs.toFixed(1)} | ${c.morpheus.cpuMs.toFixed(1)} | ${(c.morpheus.cpuMs / c.none.cpuMs).toFixed(3)} | ${c.none.wallMs.toFixed(1)} | ${c.morpheus.wallMs.toFixed(1)} | ${c.none.requests}, ${c.morpheus.requests} | ${c.morpheus.yields} |`);
});
const costRatio = median(idle.map((c) => c.morpheus.cpuMs / c.none.cpuMs));
out();
out(`Morpheus / none, CPU time per heavy request, median of the rounds: ${costRatio.toFixed(3)} (target <= 1.03)`);
const text = lines.join('\n');
console.log(text);
console.log(JSON.stringify({ rows, idle, costRatio, loadBefore, loadAfter }));
if (args.out) fs.writeFileSync(args.out, `${text}\n`);
