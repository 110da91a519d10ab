// SPDX-License-Identifier: GPL-2.0-only
//! What every scheduler backend provides, and which one runs.
//!
//! Three backends implement [`Backend`]:
//! * `sim` (src/sim.rs): a normal kernel; reads worker CPU time from /proc, decides with the policy
//!   header through FFI, and escalates with effects any kernel offers (SCHED_IDLE demotion, cgroup v2
//!   cpu.max).
//! * `kernel` (src/kernel.rs, cargo feature `kernel`): the sched_ext BPF scheduler; the BPF side
//!   decides and the agent drains its ring buffers and applies cgroup caps.
//! * `trace` (src/trace.rs, the same cargo feature): kernels with BPF and BTF but no sched_ext; BPF
//!   tracing programs run the kernel backend's worker layer at every context switch, and the agent
//!   applies the sim backend's effects.
//!
//! The agent (main.rs) owns the registration channel (src/registry.rs), the pressure feed
//! (src/pressure.rs) and the stats loop; it calls the backend's `tick` at `tick_interval`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use morpheus_abi as abi;

use crate::domains::{Assigned, RegionMaker, Workers};
use crate::stats::{Counters, Reactions};

/// A backend's tick error that asks the agent to set everything up again rather than exit (the BPF
/// scheduler exited with scx's restart code: `UserExitInfo::should_restart`).
#[derive(Debug)]
pub struct RestartRequested;

impl std::fmt::Display for RestartRequested {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the BPF scheduler asked to be restarted")
    }
}

impl std::error::Error for RestartRequested {}

/// `--base-order`: how the kernel backend's sched_ext ops order every runnable task
/// (src/policy/morpheus_policy.h, enum morpheus_base_order, states the rules).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BaseOrder {
    /// Deadline: queued time plus the CPU used since the task last slept, less a credit for waking
    /// often (opt-in until a comparison run shows it ahead of `Cputime`).
    Deadline,
    /// Least CPU time used for the task's weight first (the default until `Recent` was measured
    /// ahead of it; kept for the comparison's before/after).
    Cputime,
    /// `Cputime`'s weighted vtime with a waking task's credit bounded by a slice lag (an eighth of
    /// a slice) instead of a whole slice (opt-in until a comparison run shows it ahead of `Cputime`).
    Lag,
    /// `Lag`'s key plus the CPU the task used since it last slept (capped at a slice), the task's
    /// vtime kept apart from its key (opt-in until a comparison run shows it ahead of `Cputime`).
    Burst,
    /// `Burst` with its term counting only the CPU since the last sleep beyond twice the task's
    /// usual burst (opt-in until a comparison run shows it ahead of `Cputime`).
    Spare,
    /// `Burst` with no term while the task has slept and used less than a base slice of CPU since
    /// (a task preempted soon after waking keeps its place), the whole term otherwise and for a
    /// task that never slept (the default until `Arrival` was measured ahead of it; ahead of `Cputime`
    /// in four comparison runs, BENCHMARKS.md).
    Recent,
    /// `Recent`, but a task that slept recently is keyed at the slice-lag floor whatever CPU it
    /// used before that sleep, so such tasks run in the order they were queued (the default: ahead
    /// of `Recent` in every Table 1 cell of two comparison runs, BENCHMARKS.md).
    Arrival,
}

/// Everything the command line decides, validated (see main.rs).
#[derive(Clone, Debug)]
pub struct Config {
    pub slice_ns: u64,
    pub grace_ns: u64,
    pub hint_min_interval_ns: u64,
    pub throttle_max_ns: u64,
    pub mode: abi::SchedulerMode,
    pub policy: abi::EscalationPolicy,
    /// SCB slots in the region.
    pub max_workers: u32,
    /// Slots one process may hold at once (registration flood cap).
    pub max_workers_per_process: u32,
    /// Slots one uid may hold at once; also the size of each uid's region.
    pub max_workers_per_uid: u32,
    /// Kernel backend: where its region map is pinned (the sim backend has no region file: §1.1).
    #[cfg_attr(not(feature = "kernel"), allow(dead_code))]
    pub region_path: Option<PathBuf>,
    pub socket_path: PathBuf,
    /// The effect journal (S7): every demotion and cap is recorded before it is applied.
    pub journal: Option<Arc<crate::journal::Journal>>,
    /// Sim backend sampling period.
    pub tick: Duration,
    pub verbose: u8,
    /// Kernel backend: the BPF scheduler's exit dump size (0: the kernel's default).
    #[cfg_attr(not(feature = "kernel"), allow(dead_code))]
    pub exit_dump_len: u32,
    /// Kernel backend: the base policy's queue order.
    #[cfg_attr(not(feature = "kernel"), allow(dead_code))]
    pub base_order: BaseOrder,
    /// Kernel backend: the wake-up preemption margin in ns (0: the default, a slice lag).
    #[cfg_attr(not(feature = "kernel"), allow(dead_code))]
    pub wake_margin_ns: u64,
    /// Kernel backend: fill the base policy's debug trace (`--debug-base-trace`).
    #[cfg_attr(not(feature = "kernel"), allow(dead_code))]
    pub debug_base_trace: bool,
}

/// A registration changed the owner of a slot (`slot`: the agent's global slot number, the index of
/// [`Workers`]). Called by the registry thread synchronously, before it replies, so a backend that
/// keeps its own tid -> slot index (the BPF side) is current by the time the worker starts running
/// checkpoints.
pub trait SlotObserver: Send + Sync {
    /// `slot` now belongs to `worker` (its thread, process, domain and SCB index). An error refuses
    /// the registration (reg_status INTERNAL) and the registry frees the slot again.
    fn assigned(&self, slot: u32, worker: &Assigned) -> Result<()>;
    /// `slot` was released (UNREGISTER, or its thread's descriptor said it exited): `worker` is who
    /// held it. Lift anything in force for it, and forget only what still belongs to this holder.
    fn released(&self, slot: u32, worker: &Assigned);
}

/// A scheduler backend. Created by [`open`]; driven by the agent's main loop on one thread.
pub trait Backend {
    /// Which backing published the region (stored in the header's `backend` field).
    fn kind(&self) -> abi::Backend;

    /// Who creates each trust domain's region, if the backend must reach them itself (kernel: a BPF
    /// map per uid in the program's array of maps). None: sealed memfds (sim).
    fn region_maker(&self) -> Option<Arc<dyn RegionMaker>> {
        None
    }

    /// Told about slot hand-overs, if the backend needs to know (kernel: tid -> slot map).
    fn slot_observer(&self) -> Option<Arc<dyn SlotObserver>> {
        None
    }

    /// How often the agent calls [`Backend::tick`].
    fn tick_interval(&self) -> Duration;

    /// How often the agent calls [`Backend::tick`] while no worker is registered.
    fn idle_tick_interval(&self) -> Duration {
        self.tick_interval()
    }

    /// Waits up to `timeout` before the next [`Backend::tick`]; a backend with something to handle
    /// sooner (kernel: an escalation record in the BPF ring) returns early.
    fn wait(&mut self, timeout: Duration) -> Result<()> {
        std::thread::sleep(timeout);
        Ok(())
    }

    /// One round of work: observe workers, emit hints, apply and lift escalations (sim); drain the
    /// hint/escalation rings and apply cgroup caps (kernel). Must not block for long.
    /// `pressure_level` is the agent's own latest sample (never read back from a region).
    fn tick(&mut self, now_ns: u64, pressure_level: u32) -> Result<()>;

    /// escalation_event records of the actions taken or undone since the last call (sim: demotions,
    /// cgroup caps and their lifting). A backend whose events travel elsewhere (kernel: the BPF ring
    /// the backend drains itself) returns none.
    fn take_events(&mut self) -> Vec<abi::EscalationEvent> {
        Vec::new()
    }

    /// Counters since start (cumulative; gauges current).
    fn counters(&self) -> Counters;

    /// The scheduler's reaction times, measured from the backend's own decisions.
    fn reactions(&self) -> Reactions {
        Reactions::default()
    }

    /// Counters only this backend has, by name (kernel: the BPF program's own counters).
    fn backend_counters(&self) -> Vec<(String, u64)> {
        Vec::new()
    }

    /// Clean exit: lift every escalation still in force, detach from the kernel (the agent retires
    /// the regions). Called once; errors are reported but the agent exits anyway.
    fn shutdown(&mut self) -> Result<()>;
}

/// `--backend`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    /// `kernel` where the running kernel offers sched_ext (/sys/kernel/sched_ext exists), else `trace`
    /// where it has BPF with BTF, else `sim`.
    Auto,
    /// The sched_ext BPF scheduler.
    Kernel,
    /// BPF tracing programs beside the kernel's own scheduler (kernels with BPF and BTF, no sched_ext).
    Trace,
    /// The simulation backend for kernels without sched_ext.
    Sim,
}

/// Where the running kernel announces sched_ext support.
pub const SCHED_EXT_SYSFS: &str = "/sys/kernel/sched_ext";

/// Waits (at most `patience`) until the kernel has finished disabling a sched_ext scheduler, so a
/// restart does not find the previous instance still "enabled". True if it is disabled (or this kernel
/// has no sched_ext).
pub fn wait_sched_ext_disabled(patience: Duration) -> bool {
    let deadline = std::time::Instant::now() + patience;
    loop {
        match std::fs::read_to_string(format!("{SCHED_EXT_SYSFS}/state")) {
            Ok(state) if state.trim() != "disabled" => {}
            _ => return true,
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Resolves `auto` to a concrete backend.
pub fn resolve(choice: BackendChoice) -> BackendChoice {
    resolve_why(choice).0
}

/// Resolves `auto` to a concrete backend, and says why (for the log).
pub fn resolve_why(choice: BackendChoice) -> (BackendChoice, String) {
    if choice != BackendChoice::Auto {
        return (choice, String::new());
    }
    if std::path::Path::new(SCHED_EXT_SYSFS).exists() {
        return (BackendChoice::Kernel, format!("{SCHED_EXT_SYSFS} exists, using the sched_ext (kernel) backend"));
    }
    match probe_trace() {
        Ok(()) => (
            BackendChoice::Trace,
            format!("this kernel has no sched_ext ({SCHED_EXT_SYSFS} is missing) but BPF with BTF: using the tracing backend"),
        ),
        Err(e) => (
            BackendChoice::Sim,
            format!("this kernel has no sched_ext ({SCHED_EXT_SYSFS} is missing) and the tracing backend cannot run: {e:#}; using the simulation backend"),
        ),
    }
}

#[cfg(feature = "kernel")]
fn probe_trace() -> Result<()> {
    crate::trace::probe()
}

#[cfg(not(feature = "kernel"))]
fn probe_trace() -> Result<()> {
    anyhow::bail!("this scx_morpheus was built without the BPF backends (cargo feature `kernel`)")
}

/// Creates the chosen backend: builds and publishes the region, attaches whatever it attaches.
pub fn open(choice: BackendChoice, config: &Config, workers: &Arc<Workers>) -> Result<Box<dyn Backend>> {
    match resolve(choice) {
        BackendChoice::Sim => Ok(Box::new(crate::sim::SimBackend::open(config, Arc::clone(workers))?)),
        BackendChoice::Kernel => open_kernel(config, workers),
        BackendChoice::Trace => open_trace(config, workers),
        BackendChoice::Auto => unreachable!("resolved above"),
    }
}

#[cfg(feature = "kernel")]
fn open_trace(config: &Config, workers: &Arc<Workers>) -> Result<Box<dyn Backend>> {
    Ok(Box::new(crate::trace::TraceBackend::open(config, Arc::clone(workers))?))
}

#[cfg(not(feature = "kernel"))]
fn open_trace(_config: &Config, _workers: &Arc<Workers>) -> Result<Box<dyn Backend>> {
    anyhow::bail!("--backend trace: this scx_morpheus was built without the BPF backends (cargo feature `kernel`); use --backend sim")
}

#[cfg(feature = "kernel")]
fn open_kernel(config: &Config, workers: &Arc<Workers>) -> Result<Box<dyn Backend>> {
    Ok(Box::new(crate::kernel::KernelBackend::open(config, Arc::clone(workers))?))
}

#[cfg(not(feature = "kernel"))]
fn open_kernel(_config: &Config, _workers: &Arc<Workers>) -> Result<Box<dyn Backend>> {
    if std::path::Path::new(SCHED_EXT_SYSFS).exists() {
        anyhow::bail!(
            "--backend kernel: this scx_morpheus was built without the sched_ext backend \
             (cargo feature `kernel`); rebuild with the default features (they include `kernel`), or use --backend sim"
        )
    }
    anyhow::bail!(
        "--backend kernel: this scx_morpheus was built without the sched_ext backend (cargo feature \
         `kernel`), and the running kernel has no sched_ext ({SCHED_EXT_SYSFS} is missing); use --backend sim"
    )
}
