#!/bin/sh
# SPDX-License-Identifier: Apache-2.0 OR MIT
# The agent image's entrypoint (busybox sh): checks, before the agent starts, the privileges its
# container needs for the options it was given, and exits 78 (EX_CONFIG) naming the first one missing;
# then execs scx_morpheus with the same arguments. Without this check a container short of a privilege
# would start and fail later, per worker (a refused demotion is an effect error in the stats).
#
# What each privilege is for (deploy/README.md, the DaemonSet's comments):
# - uid 0: the runtime directory, lock, journal and socket belong to root (spec/SCB.md §10).
# - the host's pid namespace: the agent opens /proc/<pid> of every registering process and thread;
#   in a pid namespace of its own it sees none of the services' processes.
# - CAP_CHOWN: gives the socket its group (--socket-group).
# - CAP_SYS_NICE (--mode enforced): demotes another user's thread to SCHED_IDLE and restores it.
# - CAP_SYS_PTRACE: pins each registering process (another user's) by /proc/<pid> entries that need
#   ptrace read access.
# - CAP_DAC_READ_SEARCH and CAP_CHECKPOINT_RESTORE: after a SIGKILL, the next agent retires its
#   predecessor's regions through each client's /proc/<pid>/map_files/ (a directory of the client's
#   uid, mode 0500), so that services in other pid namespaces notice and register again.
# - CAP_BPF and CAP_PERFMON, and bpffs on /sys/fs/bpf (--backend trace or kernel): the BPF programs and
#   the region pins.
set -eu

die() {
  echo "scx_morpheus image: error: $*" >&2
  exit 78
}

# Bit N of the effective capability set (capabilities(7) numbers).
has_cap() {
  eff=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status)
  [ $(((0x$eff >> $1) & 1)) -eq 1 ]
}

mode=observer backend=auto
prev=
for arg in "$@"; do
  case "$prev" in
    -m | --mode) mode=$arg ;;
    -b | --backend) backend=$arg ;;
  esac
  case "$arg" in
    --mode=*) mode=${arg#--mode=} ;;
    --backend=*) backend=${arg#--backend=} ;;
  esac
  prev=$arg
done

case " $* " in
  *" --help "* | *" -h "* | *" --version "* | *" -V "* | *" --help-stats "* | *" --monitor"*) exec /usr/local/bin/scx_morpheus "$@" ;;
esac

[ "$(id -u 2>/dev/null || echo x)" = 0 ] || die "runs as uid $(id -u), not root (uid 0): the runtime directory and socket must belong to root (runAsUser: 0)"
[ $$ -ne 1 ] || die "runs in a pid namespace of its own (it is pid 1): the agent must share the host's pid namespace to see the services' processes (hostPID: true; podman/docker --pid=host)"
has_cap 0 || die "missing capability CAP_CHOWN: the agent gives the socket its group (securityContext.capabilities.add: [CHOWN])"
has_cap 2 || die "missing capability CAP_DAC_READ_SEARCH: after a SIGKILL the agent retires its predecessor's regions through other users' /proc/<pid>/map_files (securityContext.capabilities.add: [DAC_READ_SEARCH])"
has_cap 40 || die "missing capability CAP_CHECKPOINT_RESTORE: after a SIGKILL the agent retires its predecessor's regions through /proc/<pid>/map_files (securityContext.capabilities.add: [CHECKPOINT_RESTORE])"
has_cap 19 || die "missing capability CAP_SYS_PTRACE: the agent pins registering processes of other users by their /proc/<pid> entries (securityContext.capabilities.add: [SYS_PTRACE])"
if [ "$mode" = enforced ]; then
  has_cap 23 || die "missing capability CAP_SYS_NICE: --mode enforced demotes other users' threads (securityContext.capabilities.add: [SYS_NICE])"
fi
case "$backend" in
  trace | kernel)
    has_cap 39 || die "missing capability CAP_BPF: --backend $backend loads BPF programs (securityContext.capabilities.add: [BPF])"
    has_cap 38 || die "missing capability CAP_PERFMON: --backend $backend attaches tracing programs (securityContext.capabilities.add: [PERFMON])"
    grep -q ' /sys/fs/bpf bpf ' /proc/self/mounts || die "no bpffs on /sys/fs/bpf: --backend $backend pins its region maps there (hostPath /sys/fs/bpf)"
    ;;
esac
exec /usr/local/bin/scx_morpheus "$@"
