#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Guest half of the Python asyncio benchmark in the VM (run by e2e/pybench-vm.sh as /morpheus/test):
# sdk-python/bench/bench_asyncio.py (blocking / naive / morpheus, the latency probe) twice in one boot:
#   off       the kernel's default scheduler, the worker detached;
#   pressure  scx_morpheus on its sched_ext backend (observer, default slice and grace), the event-loop
#             thread registered through the agent's socket.
# The interpreter comes from the host's root over virtio-9p; the wheel and the benchmark from the
# initramfs. Each run's JSON is printed as one `pybench-json: NAME JSON` line for the host.
. /morpheus/python.env
BENCH_ARGS="--seconds 2 --repeat 1 --calls 0 --modes idle,blocking,naive,morpheus"
[ -r /morpheus/pybench.env ] && . /morpheus/pybench.env
mkdir -p /hostroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro hostroot /hostroot || { echo "pybench-vm: cannot mount the host's root"; exit 1; }
py() { env PYTHONHOME="$PY_HOME" LD_LIBRARY_PATH="$PY_LIBS" PYTHONPATH=/morpheus/py PYTHONDONTWRITEBYTECODE=1 "$PY_BIN" "$@"; }
echo "pybench-vm: kernel $(uname -r), $(nproc) CPUs; bench_asyncio.py $BENCH_ARGS"

# shellcheck disable=SC2086
py /morpheus/py/bench_asyncio.py $BENCH_ARGS --scheduler "off (kernel default scheduler, detached)" --json /tmp/off.json >/tmp/off.out 2>&1
rc_off=$?
sed 's/^/pybench-vm: off: /' /tmp/off.out
[ -f /tmp/off.json ] && echo "pybench-json: off $(tr -d '\n' </tmp/off.json)"

rm -f /run/morpheus/agent.sock
scx_morpheus --backend kernel --mode observer >/tmp/agent.log 2>&1 &
agent=$!
i=0
while [ ! -S /run/morpheus/agent.sock ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
# shellcheck disable=SC2086
py /morpheus/py/bench_asyncio.py $BENCH_ARGS --socket /run/morpheus/agent.sock \
	--scheduler "scx_morpheus sched_ext, observer, default slice and grace" --json /tmp/pressure.json >/tmp/pressure.out 2>&1
rc_p=$?
kill -INT $agent
wait $agent
sed 's/^/pybench-vm: pressure: /' /tmp/pressure.out
sed 's/^/pybench-vm: agent: /' /tmp/agent.log | grep -E 'BPF counters|hints|error' || true
[ -f /tmp/pressure.json ] && echo "pybench-json: pressure $(tr -d '\n' </tmp/pressure.json)"
echo "pybench-vm: exit off=$rc_off pressure=$rc_p"
[ $rc_off -eq 0 ] && [ $rc_p -eq 0 ]
