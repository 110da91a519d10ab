// SPDX-License-Identifier: Apache-2.0 OR MIT
// The schedulers the benchmarks run against: scx_morpheus with its sim backend (a /proc sampler on
// its tick, any kernel, no root) and with its tracing backend (BPF on the host kernel: root, BPF and
// BTF), each an observer with a private socket. The tracing agent runs in a mount namespace of its
// own with a private bpffs on /sys/fs/bpf, so its pins meet no other agent's.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** The backends a benchmark compares, in the order its tables show them. */
export const BACKENDS = ['sim', 'trace'];

/**
 * Start `scx_morpheus --backend BACKEND` (observer, slice `sliceUs`, socket in `dir`) and resolve once
 * it listens: { child, socket, backend, stop() }. Rejects with the agent's own last lines when it
 * exits first (for the tracing backend: no root, no BPF or BTF, ...). Its CPUs are every CPU of the
 * machine, whatever the caller is pinned to.
 */
export async function startAgent(bin, backend, dir, { sliceUs, tickUs = 1000, name = backend } = {}) {
  const socket = path.join(dir, `${name}.sock`);
  const args = ['--backend', backend, '--mode', 'observer', '--socket', socket, '--slice-us', String(sliceUs), '--max-workers', '4'];
  if (backend === 'sim') args.push('--tick-us', String(tickUs));
  let command = [bin, ...args];
  if (backend === 'trace') {
    if (process.getuid() !== 0) throw new Error('the tracing backend needs root (BPF programs and maps), and this benchmark does not run as root');
    command = ['unshare', '--mount', '--propagation', 'private', 'sh', '-c', 'mount -t bpf bpf /sys/fs/bpf && exec "$0" "$@"', ...command];
  }
  const everyCpu = `0-${os.availableParallelism() - 1}`;
  const child = spawn('taskset', ['-c', everyCpu, ...command], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (chunk) => {
    log = (log + chunk).slice(-4000);
    if (process.env.BENCH_AGENT_LOG) process.stderr.write(chunk);
  });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGINT');
      await once(child, 'exit');
    }
  };
  for (let i = 0; i < 2400 && !fs.existsSync(socket) && child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 50));
  if (!fs.existsSync(socket)) {
    await stop();
    const last = log.trim().split('\n').slice(-3).join(' | ');
    throw new Error(`scx_morpheus --backend ${backend} did not start listening (exit ${child.exitCode ?? child.signalCode}): ${last || 'no output'}`);
  }
  return { child, socket, backend, stop };
}

/**
 * Start one agent per backend of BACKENDS at `sliceUs`: { agents: { sim, trace? }, skipped: { trace?: why } }.
 * `name(backend)` names each agent's socket (default: the backend), so that several sets can run at once.
 * The sim agent must start; a tracing agent that cannot (not root, a kernel without BPF or BTF) is
 * left out with the reason, which the benchmark prints.
 */
export async function startAgents(bin, dir, { name = (backend) => backend, ...options } = {}) {
  const agents = {};
  const skipped = {};
  for (const backend of BACKENDS) {
    try {
      agents[backend] = await startAgent(bin, backend, dir, { ...options, name: name(backend) });
    } catch (error) {
      if (backend === 'sim') {
        for (const agent of Object.values(agents)) await agent.stop();
        throw error;
      }
      skipped[backend] = error.message;
    }
  }
  return { agents, skipped };
}
