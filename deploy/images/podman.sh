#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# `podman` with the options every script of deploy/ passes, sourced by them (defines `pod`).
#
# - runtime runc: Debian's crun (1.8) refuses a cgroup v1/v2 hybrid host ("cgroups in hybrid mode not
#   supported"), which the CI machine is; runc handles both.
# - cgroupfs: no systemd is running on CI machines, so podman manages cgroups itself.
# - events to a file: journald may be absent.
# - every `run` gets explicit nofile/nproc limits (`pod_run`): podman's default raises RLIMIT_NOFILE to
#   1048576, which a runtime without CAP_SYS_RESOURCE (a container CI machine) may not do.
# MORPHEUS_PODMAN_ROOT, if set, keeps images and containers in a private store (tests do not share the
# machine's store with other users of podman).
pod() {
  local store=()
  if [[ -n "${MORPHEUS_PODMAN_ROOT:-}" ]]; then
    store=(--root "$MORPHEUS_PODMAN_ROOT/storage" --runroot "$MORPHEUS_PODMAN_ROOT/run" --tmpdir "$MORPHEUS_PODMAN_ROOT/tmp")
    mkdir -p "$MORPHEUS_PODMAN_ROOT/tmp"
  fi
  podman --runtime runc --cgroup-manager cgroupfs --events-backend file "${store[@]}" "$@"
}

# `podman run` with the limits above; arguments as `podman run`'s.
pod_run() {
  pod run --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 "$@"
}
