// SPDX-License-Identifier: GPL-2.0-only
//! The agent's layers, as a library: the binary (src/main.rs) wires them together, and the fuzz
//! targets (fuzz/) and their stable-toolchain harness (tests/fuzz_smoke.rs) drive the parsers and the
//! request handler directly.

pub mod backend;
pub mod build_id;
pub mod cgroup;
pub mod domains;
pub mod fuzzing;
pub mod identity;
pub mod journal;
#[cfg(feature = "kernel")]
pub mod kernel; // The sched_ext backend (src/kernel.rs + src/bpf/), behind the cargo feature `kernel`.
pub mod lock;
pub mod openmetrics;
pub mod pressure;
pub mod region;
pub mod registry;
pub mod replay;
pub mod rundir;
pub mod sim;
pub mod snapshot;
pub mod stats;
pub mod stats_socket;
pub mod subuid;
pub mod top;
#[cfg(feature = "kernel")]
pub mod trace; // The tracing backend (src/trace.rs + src/bpf/trace.bpf.c), built with the sched_ext one.
pub mod watch;

/// CLOCK_MONOTONIC in nanoseconds (the clock of last_hint_ns and escalation events).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
