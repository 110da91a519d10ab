// SPDX-License-Identifier: Apache-2.0 OR MIT
// The service benchmark: bench/service-server.js under load, per yield mode, with the sim scheduler
// (scx_morpheus --backend sim, observer mode, default slice) running throughout.
// Load: 2 closed-loop /heavy clients and 50 /light requests per second, open loop, latency measured
// from each request's intended send time; every keep-alive connection is opened before the run (Node
// accepts one connection per loop iteration, which a busy loop would delay by seconds).
// Usage: node bench/service.mjs SCX_MORPHEUS [SECONDS] [ROUNDS]
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const [scx, secondsArg = '8', roundsArg = '3'] = process.argv.slice(2);
if (!scx) throw new Error('usage: node bench/service.mjs SCX_MORPHEUS [SECONDS] [ROUNDS]');
const SECONDS = Number(secondsArg);
const ROUNDS = Number(roundsArg);
const MODES = ['none', 'immediate:1', 'immediate:10', 'immediate:100', 'morpheus'];
const LIGHT_PER_SECOND = 50;
const LIGHT_SOCKETS = 16;

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'morpheus-node-service-'));
const region = path.join(dir, 'region');
const socket = path.join(dir, 'sock');
const scheduler = spawn(scx, ['--backend', 'sim', '--mode', 'observer', '--region', region, '--socket', socket, '--max-workers', '4'], {
  stdio: ['ignore', 'ignore', 'ignore'],
});
for (let i = 0; i < 200 && !fs.existsSync(socket); i++) await new Promise((r) => setTimeout(r, 50));
if (!fs.existsSync(socket)) throw new Error('scx_morpheus did not start');

function get(agent, port, route) {
  return new Promise((resolve, reject) => {
    const request = http.get({ host: '127.0.0.1', port, path: route, agent }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (c) => (body += c));
      response.on('end', () => resolve(body));
    });
    request.on('error', reject);
  });
}

const percentile = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

async function cell(mode) {
  const server = spawn(process.execPath, [path.join(here, 'service-server.js')], {
    env: { ...process.env, BENCH_MODE: mode, BENCH_REGION: region, BENCH_SOCKET: socket },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const [line] = await once(server.stdout.setEncoding('utf8'), 'data');
  const port = new URL(JSON.parse(line).address).port;
  const heavyAgent = new http.Agent({ keepAlive: true, maxSockets: 2 });
  const lightAgent = new http.Agent({ keepAlive: true, maxSockets: LIGHT_SOCKETS });
  // Open every connection before the load starts.
  await Promise.all([...Array(LIGHT_SOCKETS)].map(() => get(lightAgent, port, '/light')));
  await Promise.all([0, 1].map(() => get(heavyAgent, port, '/light')));
  await get(lightAgent, port, '/stats/reset');
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
  const stats = JSON.parse(await get(lightAgent, port, '/stats'));
  heavyAgent.destroy();
  lightAgent.destroy();
  server.kill('SIGTERM');
  await once(server, 'exit');
  return { mode, heavyPerSecond: heavyDone / SECONDS, p50: percentile(latencies, 50), p99: percentile(latencies, 99), delayP99: stats.delayP99Ms, yields: stats.yields };
}

const rows = {};
const load = [os.loadavg()[0]];
for (let round = 0; round < ROUNDS; round++) {
  for (const mode of MODES) (rows[mode] ??= []).push(await cell(mode));
}
load.push(os.loadavg()[0]);
scheduler.kill('SIGINT');
await once(scheduler, 'exit');
fs.rmSync(dir, { recursive: true, force: true });

const median = (xs) => percentile(xs, 50);
const base = median(rows.none.map((r) => r.heavyPerSecond));
console.log(`node ${process.version}; ${SECONDS} s x ${ROUNDS} rounds per mode, medians of the rounds; load average ${load[0].toFixed(1)} -> ${load[1].toFixed(1)}\n`);
console.log('| heavy loop yields | light p50 ms | light p99 ms | event-loop delay p99 ms | heavy throughput vs no yields |');
console.log('|---|---:|---:|---:|---:|');
for (const mode of MODES) {
  const r = rows[mode];
  console.log(`| ${mode} | ${median(r.map((x) => x.p50)).toFixed(2)} | ${median(r.map((x) => x.p99)).toFixed(2)} | ${median(r.map((x) => x.delayP99)).toFixed(2)} | ${(median(r.map((x) => x.heavyPerSecond)) / base).toFixed(3)} |`);
}
console.log(JSON.stringify(rows));
