// SPDX-License-Identifier: Apache-2.0 OR MIT
// The service benchmark: the example Fastify service (bench/service-server.js) driven over loopback,
// one server process per cell, with scx_morpheus (observer mode) running throughout with BOTH host
// backends side by side: sim (a /proc sampler on its --tick-us) and trace (BPF on the host kernel; only
// where the kernel and the user allow it, and the output says why not otherwise). Each round runs
// every cell once, the order rotated from round to round; each backend's Morpheus cells are compared
// with the fixed cadences and the plain loop of the same round. Three tables, one run:
//
// 1. Light latency under heavy load, per yield mode (none, setImmediate every 1/10/100 units,
//    Morpheus on each backend): 2 closed-loop /heavy clients plus LIGHT_PER_SECOND /light requests
//    per second, open loop, latency measured from each request's intended send time; every keep-alive
//    connection is opened before the run (Node accepts one connection per loop iteration, which a busy
//    loop would delay by seconds). The scheduler's slice is --slice-us. Per backend and round: the
//    light p99 over the best fixed cadence's light p99 of that round (target <= 1 in every round).
// 2. Heavy only, the scheduler asking at its slice (the busy loop with nobody waiting): one
//    closed-loop /heavy client, no light load; per backend and round, heavy throughput against the
//    plain loop's: the inverse ratio of the CPU time of a request (measured in the server around the
//    handler, so the machine's other load does not stretch it; target >= 0.97), and of requests per
//    wall second.
// 3. What Morpheus costs the heavy route when nothing is asked: the same heavy-only cell against a
//    further sim scheduler whose slice (10 s) a heavy request never reaches, against the same round's
//    plain loop of table 2.
//
// Usage: node bench/service.mjs --scheduler PATH [--seconds 6] [--rounds 5] [--slice-us 1000] [--tick-us 1000]
//        [--modes none,immediate:1,...,morpheus] [--out FILE]
// (--modes picks the light-latency cells, e.g. to profile one; `none` is always run, the baseline;
// `morpheus` stands for one cell per backend.)
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { startAgent, startAgents, BACKENDS } from './agents.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const { values: args } = parseArgs({
  options: {
    scheduler: { type: 'string' },
    seconds: { type: 'string', default: '6' },
    rounds: { type: 'string', default: '5' },
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
const FIXED = MODES.filter((m) => m.startsWith('immediate:'));
const LIGHT_PER_SECOND = 50;
const LIGHT_SOCKETS = 16;
// The longest slice scx_morpheus accepts (10 s): far beyond one heavy request (~0.2 s of CPU).
const QUIET_SLICE_US = 10_000_000;

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'morpheus-node-service-'));

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
  const { server, port } = await startServer(mode.startsWith('morpheus') ? 'morpheus' : mode, socket);
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
  const start = performance.now();
  const end = start + SECONDS * 1000;
  const walls = [];
  while (performance.now() < end) {
    const t = performance.now();
    await get(agent, port, '/heavy');
    walls.push(performance.now() - t);
  }
  const perSecond = walls.length / ((performance.now() - start) / 1000);
  const stats = JSON.parse(await get(agent, port, '/stats'));
  agent.destroy();
  await stopServer(server);
  const yields = stats.yields ? Object.values(stats.yields).reduce((a, b) => a + b, 0) : 0;
  return { mode, requests: stats.heavyCpuUs.length, cpuMs: median(stats.heavyCpuUs) / 1000, wallMs: median(walls), perSecond, yields };
}

const loadBefore = os.loadavg();
const rows = {};
const heavy = [];
let skipped = {};
let backends = [];
{
  const started = [];
  try {
    const asking = await startAgents(args.scheduler, dir, { sliceUs: SLICE_US, tickUs: TICK_US });
    started.push(...Object.values(asking.agents));
    skipped = asking.skipped;
    backends = BACKENDS.filter((b) => asking.agents[b]);
    for (const [backend, why] of Object.entries(skipped)) console.error(`service.mjs: the ${backend} backend is left out: ${why}`);
    const quiet = await startAgent(args.scheduler, 'sim', dir, { sliceUs: QUIET_SLICE_US, tickUs: TICK_US, name: 'quiet' });
    started.push(quiet);
    // The light-latency cells: the fixed modes once, Morpheus once per backend.
    const loaded = MODES.flatMap((m) => (m === 'morpheus' ? backends.map((b) => [`morpheus:${b}`, asking.agents[b].socket]) : [[m, asking.agents.sim.socket]]));
    // The heavy-only cells: the plain loop, Morpheus per backend (asked at the slice), Morpheus never asked.
    const alone = [['none', asking.agents.sim.socket], ...backends.map((b) => [`morpheus:${b}`, asking.agents[b].socket]), ['morpheus:quiet', quiet.socket]];
    for (let round = 0; round < ROUNDS; round++) {
      const rotate = (xs) => xs.map((_, i) => xs[(i + round) % xs.length]);
      for (const [mode, socket] of rotate(loaded)) (rows[mode] ??= []).push(await loadedCell(mode, socket));
      const cells = {};
      for (const [mode, socket] of rotate(alone)) cells[mode] = await idleCell(mode.startsWith('morpheus') ? 'morpheus' : mode, socket);
      heavy.push(cells);
      console.error(`service.mjs: round ${round + 1} of ${ROUNDS} done`);
    }
  } finally {
    for (const agent of started) await agent.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
const loadAfter = os.loadavg();

const lines = [];
const out = (s = '') => lines.push(s);
const spread = (xs) => `${median(xs).toFixed(3)} [${Math.min(...xs).toFixed(3)}–${Math.max(...xs).toFixed(3)}]`;
const perRound = (xs) => xs.map((x) => x.toFixed(2)).join(', ');
out(`node ${process.version}; ${os.cpus().length} CPUs; load average (1 min) ${loadBefore[0].toFixed(1)} before, ${loadAfter[0].toFixed(1)} after; ${SECONDS} s per cell, ${ROUNDS} rounds (cells interleaved, order rotated each round)`);
out(`command: node bench/service.mjs --scheduler ${path.basename(args.scheduler)} --seconds ${SECONDS} --rounds ${ROUNDS} --slice-us ${SLICE_US} --tick-us ${TICK_US}`);
out(`backends: ${backends.map((b) => (b === 'sim' ? `sim (--tick-us ${TICK_US})` : b)).join(', ')}${Object.entries(skipped).map(([b, why]) => `; ${b} left out: ${why}`).join('')}`);
out();
out(`Light latency under heavy load (scx_morpheus --mode observer --slice-us ${SLICE_US}; medians of the rounds):`);
out();
out('| heavy loop yields | light p50 ms | light p99 ms | light p99 per round | event-loop delay p99 ms | heavy run p50 ms | heavy run p99 ms | heavy req/s vs none | server CPU ms per heavy request | yields per cell |');
out('|---|---:|---:|---|---:|---:|---:|---:|---:|---:|');
const base = median(rows.none.map((r) => r.heavyPerSecond));
for (const mode of Object.keys(rows)) {
  const r = rows[mode];
  const yields = r.map((x) => (x.yields ? Object.values(x.yields).reduce((a, b) => a + b, 0) : '-'));
  out(`| ${mode} | ${median(r.map((x) => x.p50)).toFixed(2)} | ${median(r.map((x) => x.p99)).toFixed(2)} | ${perRound(r.map((x) => x.p99))} | ${median(r.map((x) => x.delayP99)).toFixed(2)} | ${median(r.map((x) => x.runP50)).toFixed(2)} | ${median(r.map((x) => x.runP99)).toFixed(2)} | ${(median(r.map((x) => x.heavyPerSecond)) / base).toFixed(3)} | ${median(r.map((x) => x.serverCpuMsPerHeavy)).toFixed(1)} | ${yields.join(', ')} |`);
}
const summary = {};
out();
out('Per backend, each ratio within a round (median [min–max] of the rounds, then each round):');
out();
out('| backend | light p99 / best fixed cadence (target <= 1 every round) | per round | best cadence per round | heavy throughput / none, CPU per request (target >= 0.97) | per round | heavy req/s / none, wall | yields per heavy request |');
out('|---|---:|---|---|---:|---|---:|---:|');
for (const backend of backends) {
  const mine = rows[`morpheus:${backend}`];
  const best = mine.map((_, i) => FIXED.reduce((b, m) => (b === null || rows[m][i].p99 < rows[b][i].p99 ? m : b), null));
  const light = mine.map((x, i) => (best[i] === null ? NaN : x.p99 / rows[best[i]][i].p99));
  const cpu = heavy.map((c) => c.none.cpuMs / c[`morpheus:${backend}`].cpuMs);
  const wall = heavy.map((c) => c[`morpheus:${backend}`].perSecond / c.none.perSecond);
  const yieldsPerRequest = median(heavy.map((c) => c[`morpheus:${backend}`].yields / c[`morpheus:${backend}`].requests));
  summary[backend] = { light, best, cpu, wall, lightMet: light.every((x) => x <= 1), heavyMet: cpu.every((x) => x >= 0.97) };
  out(`| ${backend} | ${spread(light)} | ${perRound(light)} | ${best.map((m) => (m ?? '-').replace('immediate:', 'every ')).join(', ')} | ${spread(cpu)} | ${perRound(cpu)} | ${spread(wall)} | ${yieldsPerRequest.toFixed(1)} |`);
}
out();
for (const backend of backends) {
  const s = summary[backend];
  out(`${backend}: light p99 <= best fixed cadence in ${s.light.filter((x) => x <= 1).length} of ${ROUNDS} rounds (${s.lightMet ? 'met' : 'missed'}); heavy >= 0.97x none in ${s.cpu.filter((x) => x >= 0.97).length} of ${ROUNDS} rounds (${s.heavyMet ? 'met' : 'missed'})`);
}
out();
out(`Heavy route alone (one client, no light load; CPU time per request in the server, median of the cell; "quiet": a sim scheduler whose ${QUIET_SLICE_US / 1e6} s slice a request never reaches, i.e. nothing asked):`);
out();
const aloneModes = Object.keys(heavy[0]);
out(`| round | ${aloneModes.map((m) => `${m} CPU ms`).join(' | ')} | ${aloneModes.map((m) => `${m} req/s`).join(' | ')} | ${aloneModes.filter((m) => m !== 'none').map((m) => `${m} yields`).join(' | ')} |`);
out(`|---|${aloneModes.map(() => '---:').join('|')}|${aloneModes.map(() => '---:').join('|')}|${aloneModes.filter((m) => m !== 'none').map(() => '---:').join('|')}|`);
heavy.forEach((c, i) => {
  out(`| ${i + 1} | ${aloneModes.map((m) => c[m].cpuMs.toFixed(1)).join(' | ')} | ${aloneModes.map((m) => c[m].perSecond.toFixed(2)).join(' | ')} | ${aloneModes.filter((m) => m !== 'none').map((m) => c[m].yields).join(' | ')} |`);
});
const costRatio = median(heavy.map((c) => c['morpheus:quiet'].cpuMs / c.none.cpuMs));
out();
out(`Nothing asked: Morpheus / none, CPU time per heavy request, median of the rounds: ${costRatio.toFixed(3)} (target <= 1.03)`);
const text = lines.join('\n');
console.log(text);
console.log(JSON.stringify({ rows, heavy, summary, skipped, costRatio, loadBefore, loadAfter }));
if (args.out) fs.writeFileSync(args.out, `${text}\n`);
