// SPDX-License-Identifier: GPL-2.0-only
//! The tracing backend (`--backend trace`): the kernel backend's precision on kernels without
//! sched_ext. The kernel's own scheduler (EEVDF) schedules every task; src/bpf/trace.bpf.c only watches
//! it, and links the same worker layer (src/bpf/worker.bpf.c) as the sched_ext program.
//!
//! * The BPF side accounts each registered thread's CPU time since its last yield point at every
//!   context switch (tp_btf/sched_switch), and the worker layer's check timer (a BPF timer, brought
//!   forward to the slice end of a worker that starts running) decides hints and the escalation gate
//!   with src/policy/morpheus_policy.h, publishing into the per-uid region maps exactly as the kernel
//!   backend does. The agent's side of the worker layer (regions, `worker_slots` and the `worker_tids`
//!   bitmap, the rings, counters and reaction times) is src/kernel.rs's `LayerAgent` and `LayerSlots`,
//!   shared with the kernel backend.
//! * The header's `backend` is `KERNEL`: the region is the same pinned BPF_F_MMAPABLE array map and
//!   the hints come from the same BPF worker layer, so a runtime cannot tell the two apart (the field
//!   is informative, spec/SCB.md §2).
//! * Escalation: no BPF program can preempt a CPU here, so the worker layer reports a KICK (and a
//!   THROTTLE) to the agent, which applies the simulation backend's effects (SCHED_IDLE demotion,
//!   cgroup v2 cpu.max; src/sim.rs's `Effects`, journalled) and undoes them when the worker layer
//!   reports the episode lifted (or its slot is released, or the episode is seen closed). Right after
//!   applying one, in_critical is loaded again and the effect undone at once if a section began
//!   meanwhile (spec/SCB.md §5.6).
//! * A thread's exit reaches the worker layer when its task_struct is freed (worker_exit), so a thread
//!   that gets an exited worker's tid is never taken for it.
//! * Needs BPF with BTF (tp_btf programs attach by the kernel's BTF): [`probe`] says what is missing.

#[allow(clippy::all, dead_code)]
mod bpf_skel {
    include!(concat!(env!("OUT_DIR"), "/trace/bpf_skel.rs"));
}

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapHandle, OpenObject, ProgramInput};
use morpheus_abi as abi;
use morpheus_abi::EscalationAction;

use crate::backend::{Backend, Config, SlotObserver};
use crate::domains::{Assigned, Workers};
use crate::kernel;
use crate::identity::Thread;
use crate::sim::{Cause, Effect, Effects, Released};
use crate::stats::Counters;
use bpf_skel::{BpfSkel, BpfSkelBuilder};

/// Where the kernel publishes its BTF, which tp_btf programs attach by.
pub const BTF_VMLINUX: &str = "/sys/kernel/btf/vmlinux";

/// Test-only: names another path to check for the kernel's BTF, so a test can show what a kernel
/// without BTF gets (the real programs still load from [`BTF_VMLINUX`]).
pub const BTF_PATH_ENV: &str = "MORPHEUS_TEST_BTF_PATH";

/// How often the trace agent ticks while workers are registered. Its tick decides nothing: hints and
/// the gate are the worker layer's (sched_switch and the BPF check timer), a record the agent must act
/// on (a kick or throttle, or its lift) wakes it at once, and so does a hint or detection record that
/// finds its ring half full. What is left to the tick is the stats (hint records counted, detection
/// records timed, the SCBs sampled), answers to stats requests, and lifting the effects of a released slot, none of which needs
/// 10 ms: each tick is a wake-up of the agent (~70 µs of CPU a tick with 8 busy workers on this
/// project's loaded 2-CPU host, scheduler/BENCHMARKS.md), which at 10 ms alone cost 0.7 % of a CPU.
const AGENT_TICK: Duration = Duration::from_millis(50);

/// statfs's f_type of a bpffs mount (include/uapi/linux/magic.h).
const BPF_FS_MAGIC: libc::c_long = 0xcafe4a11;

/// Whether this machine can run the tracing backend: the kernel's BTF is published, bpf(2) creates a
/// map for this process, and bpffs is mounted where the regions are pinned. The error names what is
/// missing.
pub fn probe() -> Result<()> {
    let btf = std::env::var_os(BTF_PATH_ENV).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(BTF_VMLINUX));
    if !btf.is_file() {
        bail!(
            "the kernel publishes no BTF ({} is missing: a kernel built without CONFIG_DEBUG_INFO_BTF); \
             the tracing backend attaches its programs by BTF",
            btf.display()
        );
    }
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        ..Default::default()
    };
    // SAFETY: a NUL-terminated name and valid options that outlive the call; the fd is closed below.
    let fd = unsafe {
        libbpf_rs::libbpf_sys::bpf_map_create(libbpf_rs::libbpf_sys::BPF_MAP_TYPE_ARRAY, c"morpheus_probe".as_ptr(), 4, 4, 1, &opts)
    };
    if fd < 0 {
        let errno = -fd;
        match errno {
            libc::ENOSYS => bail!("the kernel has no bpf(2) system call (ENOSYS: built without CONFIG_BPF_SYSCALL)"),
            libc::EPERM | libc::EACCES => bail!(
                "bpf(2) is refused to this process ({}): the tracing backend needs root (CAP_BPF and CAP_PERFMON)",
                std::io::Error::from_raw_os_error(errno)
            ),
            _ => bail!("bpf(2) cannot create a map here: {}", std::io::Error::from_raw_os_error(errno)),
        }
    }
    // SAFETY: the fd was just created here and is not used again.
    unsafe { libc::close(fd) };
    // The regions are pinned under PIN_DIR (spec/SCB.md §1.3), which needs bpffs mounted there.
    let bpffs = Path::new(abi::PIN_DIR).parent().unwrap_or(Path::new("/"));
    // SAFETY: statfs is a plain C struct, all-zero a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let cpath = std::ffi::CString::new(bpffs.as_os_str().as_encoded_bytes()).context("the bpffs path holds a NUL byte")?;
    // SAFETY: a NUL-terminated path and a statfs buffer that outlive the call.
    let rc = unsafe { libc::statfs(cpath.as_ptr(), &mut st) };
    if rc != 0 || st.f_type != BPF_FS_MAGIC {
        bail!(
            "bpffs is not mounted on {} (the tracing backend pins each uid's region there; mount it with `mount -t bpf bpf {}`)",
            bpffs.display(),
            bpffs.display()
        );
    }
    Ok(())
}

/// Effects the agent has in force for one slot's episode.
struct InForce {
    /// The registered thread the effects were applied to (the slot's identity at that time).
    thread: Arc<Thread>,
    pid: u32,
    preempt_seq: u64,
    effects: Vec<Effect>,
}

/// Keeps the worker layer's tid -> slot map in step with the registry; released slots are lifted at
/// the next tick (on the agent's thread, where the effects live).
struct TraceSlots {
    slots: kernel::LayerSlots,
    released: Released,
}

impl SlotObserver for TraceSlots {
    fn assigned(&self, slot: u32, worker: &Assigned) -> Result<()> {
        self.slots.record(slot, worker)
    }

    fn released(&self, slot: u32, worker: &Assigned) {
        self.slots.forget(slot, worker.tid);
        self.released.released(slot, worker);
    }
}

pub struct TraceBackend {
    /// The loaded object: its programs, maps and the .bss mapping `layer` reads live as long as it.
    #[allow(dead_code)]
    skel: BpfSkel<'static>,
    links: Vec<Link>,
    layer: kernel::LayerAgent,
    observer: Arc<TraceSlots>,
    /// The worker layer's `workers` map (whether an episode is still open).
    workers_map: MapHandle,
    effects: Effects,
    in_force: HashMap<u32, InForce>,
    /// The agent's side: effects applied and undone, fallbacks, spared and held in critical sections.
    counters: Counters,
    escalation_records: u64,
    shut_down: bool,
}

impl TraceBackend {
    pub fn open(config: &Config, table: Arc<Workers>) -> Result<Self> {
        probe().context("--backend trace")?;
        kernel::check_layer_config(config, "tracing")?;
        scx_utils::try_set_rlimit_infinity();

        let open_object: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
        let mut builder = BpfSkelBuilder::default();
        builder.obj_builder.debug(config.verbose > 1);
        let mut skel = builder.open(open_object).context("cannot open the tracing backend's BPF object")?;
        let rodata = skel.maps.rodata_data.as_mut().expect("the BPF program has .rodata");
        kernel::set_layer_rodata!(&mut *rodata, config);
        let mut skel = skel.load().context("the kernel refused the tracing backend's BPF programs (verifier log above with -vv)")?;

        let workers_map = MapHandle::try_from(&skel.maps.workers).context("workers map handle")?;
        let observer = Arc::new(TraceSlots {
            slots: kernel::LayerSlots::new(&skel.maps.worker_slots, &skel.maps.worker_tids, &skel.maps.worker_tid_summary)?,
            released: Released::default(),
        });
        let links = vec![
            skel.progs.morpheus_switch.attach().context("cannot attach tp_btf/sched_switch (no sched_switch tracepoint in the kernel's BTF?)")?,
            skel.progs.morpheus_task_free.attach().context("cannot attach tp_btf/sched_process_free (no sched_process_free tracepoint in the kernel's BTF?)")?,
        ];
        let ret = run_syscall_prog(&skel.progs.trace_init).context("BPF_PROG_TEST_RUN of trace_init failed")?;
        if ret != 0 {
            bail!("the tracing backend's check timer did not start: {}", std::io::Error::from_raw_os_error(-(ret as i32)));
        }
        log_verifier_complexity();

        let bss = kernel::layer_bss!(skel);
        let maps = [&skel.maps.hints, &skel.maps.detections, &skel.maps.escalation_events, &skel.maps.regions];
        let layer = kernel::LayerAgent::new(config, table, maps, Arc::clone(&observer) as Arc<dyn SlotObserver>, bss, AGENT_TICK)?;
        log::info!("tracing backend attached (sched_switch accounting; {})", layer.describe(config));
        Ok(TraceBackend {
            skel,
            links,
            layer,
            observer,
            workers_map,
            effects: Effects::new(config),
            in_force: HashMap::new(),
            counters: Counters::default(),
            escalation_records: 0,
            shut_down: false,
        })
    }

    /// Undoes the effects in force for `slot`. `held_in_critical`: the worker is in a critical section
    /// now, so an effect was in force over it (the worker layer lifts for that at its next check).
    fn lift(&mut self, slot: u32, why: &str) {
        let Some(f) = self.in_force.remove(&slot) else { return };
        if !f.effects.is_empty() {
            if let Some(a) = self.layer.table.get(slot).filter(|a| Arc::ptr_eq(&a.thread, &f.thread)) {
                if a.domain.region.scb(a.local).in_critical().load(Ordering::Acquire) != 0 {
                    self.counters.held_in_critical += 1;
                }
            }
        }
        self.effects.lift(&mut self.counters, &self.layer.table, slot, &f.thread, f.pid, f.effects, f.preempt_seq, why);
    }

    /// Carries out an action the worker layer decided (a KICK: SCHED_IDLE demotion; a THROTTLE: the
    /// cgroup cap, or the demotion where none can be set) for the thread the agent's table names.
    fn act(&mut self, ev: &abi::EscalationEvent) {
        let slot = ev.slot;
        let Some(holder) = self.layer.table.get(slot) else {
            log::debug!("escalation of slot {slot} not applied: the slot is free");
            return;
        };
        let (tid, pid) = (holder.tid, holder.pid);
        if self.in_force.get(&slot).is_some_and(|f| !Arc::ptr_eq(&f.thread, &holder.thread)) {
            self.lift(slot, "slot changed hands");
        }
        let demoted = self.in_force.get(&slot).is_some_and(|f| f.effects.iter().any(|e| matches!(e, Effect::Demoted(_))));
        let throttled = self.in_force.get(&slot).is_some_and(|f| f.effects.iter().any(|e| matches!(e, Effect::Throttled(_))));
        if throttled {
            return;
        }
        if ev.action == EscalationAction::Kick.raw() {
            log::debug!("kick: slot {slot} (tid {tid}) {} µs past slice + grace", ev.overrun_ns / 1000);
        }
        let cause = Cause { preempt_seq: ev.preempt_seq, overrun_ns: ev.overrun_ns };
        let taken = self.effects.apply(&mut self.counters, slot, ev.action, &holder.thread, pid, cause, demoted);
        let entry = self
            .in_force
            .entry(slot)
            .or_insert_with(|| InForce { thread: Arc::clone(&holder.thread), pid, preempt_seq: ev.preempt_seq, effects: Vec::new() });
        entry.effects.extend(taken);
        // Where the effect takes hold: a section that began after the decision is not held.
        let scb = holder.domain.region.scb(holder.local);
        // SAFETY: an SCB of a live mapping the slot's domain holds.
        if !unsafe { morpheus_policy_ffi::effect_may_hold(scb.as_ptr()) } {
            self.counters.spared_in_critical += 1;
            let f = self.in_force.remove(&slot).expect("inserted above");
            self.effects.lift(&mut self.counters, &self.layer.table, slot, &f.thread, f.pid, f.effects, f.preempt_seq, "critical section");
        }
    }

    fn drain(&mut self) -> Result<()> {
        for ev in self.layer.drain()? {
            self.escalation_records += 1;
            match EscalationAction::try_from(ev.action) {
                Ok(EscalationAction::Kick | EscalationAction::Throttle) => {
                    self.layer.time_event(&ev);
                    self.act(&ev);
                }
                Ok(EscalationAction::Unthrottle | EscalationAction::Restore) => self.lift(ev.slot, "lifted by the worker layer"),
                other => log::warn!("unexpected escalation action {other:?} from the BPF program"),
            }
        }
        Ok(())
    }
}

/// `--backend trace --replay-gate`: answers conformance cases with the tracing backend's object (its
/// copy of the worker layer and of src/bpf/replay.bpf.c), opened and loaded exactly as for tracing (so
/// this kernel's verifier accepts the same object) but never attached; [`kernel::replay_cases`] runs
/// the cases. The conformance matrix's `trace` column (scheduler/e2e/trace-gate.sh). Returns how many
/// were refused.
pub fn replay_gate(cases: &[crate::replay::GateCase], out: &mut dyn std::io::Write) -> Result<usize> {
    // No probe: the replay pins nothing, so it needs no bpffs; a kernel without BTF refuses the load.
    scx_utils::try_set_rlimit_infinity();
    let mut open_object = MaybeUninit::uninit();
    let skel = BpfSkelBuilder::default().open(&mut open_object).context("cannot open the tracing backend's BPF object")?;
    let skel = skel.load().context("the kernel refused the tracing backend's BPF programs (they need BPF with BTF)")?;
    let regions = MapHandle::try_from(&skel.maps.regions).context("regions map handle")?;
    kernel::replay_cases(regions, &skel.progs.gate_replay, &skel.progs.escalation_replay, &skel.progs.hint_replay, cases, out)
}

/// Logs how many instructions the verifier processed per program (scheduler/veristat/).
fn log_verifier_complexity() {
    let mut progs: Vec<(String, u32)> = libbpf_rs::query::ProgInfoIter::default()
        .map(|info| (info.name.to_string_lossy().into_owned(), info.verified_insns))
        .filter(|(name, _)| ["morpheus_switch", "morpheus_task_f", "trace_init"].contains(&name.as_str()))
        .collect();
    progs.sort();
    progs.dedup_by(|a, b| a.0 == b.0);
    let line: Vec<String> = progs.iter().map(|(name, n)| format!("{name}={n}")).collect();
    log::info!("verified_insns: {}", line.join(" "));
}

/// Runs a SEC("syscall") program without context once; returns its return value.
fn run_syscall_prog(prog: &libbpf_rs::ProgramMut<'_>) -> Result<u32> {
    Ok(prog.test_run(ProgramInput::default())?.return_value)
}

impl Backend for TraceBackend {
    kernel::layer_backend_methods!();

    fn tick(&mut self, _now_ns: u64, pressure_level: u32) -> Result<()> {
        self.layer.set_pressure(pressure_level);
        self.drain()?;
        for (slot, thread) in self.observer.released.take() {
            if self.in_force.get(&slot).is_some_and(|f| Arc::ptr_eq(&f.thread, &thread)) {
                self.lift(slot, "slot released");
            }
        }
        // A lift record lost to a full ring: the worker layer's own bookkeeping says the episode closed.
        let due: Vec<u32> = self
            .in_force
            .iter()
            .filter(|(&slot, f)| {
                !self.layer.table.get(slot).is_some_and(|a| Arc::ptr_eq(&a.thread, &f.thread)) || kernel::episode_open(&self.workers_map, slot) == Some(false)
            })
            .map(|(&slot, _)| slot)
            .collect();
        for slot in due {
            self.lift(slot, "episode closed");
        }
        Ok(())
    }

    fn take_events(&mut self) -> Vec<abi::EscalationEvent> {
        self.effects.take_events()
    }

    fn counters(&self) -> Counters {
        let mut c = self.counters.clone();
        self.layer.fill_counters(&mut c);
        c.workers = self.layer.table.assigned().len() as u64;
        c
    }

    fn backend_counters(&self) -> Vec<(String, u64)> {
        let mut out = self.layer.backend_counters();
        out.push(("escalation_records".into(), self.escalation_records));
        out
    }

    fn shutdown(&mut self) -> Result<()> {
        if self.shut_down {
            return Ok(());
        }
        self.shut_down = true;
        let _ = self.drain();
        let slots: Vec<u32> = self.in_force.keys().copied().collect();
        for slot in slots {
            self.lift(slot, "scheduler exiting");
        }
        // Detach: the programs stop at once (the timer goes with the maps when the object is freed).
        self.links.clear();
        let mut errors = Vec::new();
        self.layer.finish(&mut errors);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(anyhow!(errors.join("; ")))
        }
    }
}

impl Drop for TraceBackend {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            log::warn!("tracing backend clean-up: {e:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domains::RegionMaker;
    use crate::kernel::bpf_intf;
    use libbpf_rs::{MapCore, MapFlags};

    /// The tracing backend's object loaded on this kernel with a region of the replay domain, which the
    /// replay programs (bind_replay) find their worker slots in; the region lives as long as the caller
    /// keeps the second value.
    fn loaded_with_replay_region(open_object: &mut MaybeUninit<OpenObject>) -> (BpfSkel<'_>, crate::domains::NewRegion) {
        let skel = BpfSkelBuilder::default().open(open_object).expect("open the tracing backend's object");
        let skel = skel.load().expect("load the tracing backend's object (root, BPF with BTF)");
        let maker = kernel::BpfRegions {
            outer: MapHandle::try_from(&skel.maps.regions).unwrap(),
            pin_dir: None,
            pinned: Arc::default(),
        };
        let region = maker.create(0, bpf_intf::MORPHEUS_REPLAY_DOMAIN, abi::MAX_WORKERS).expect("a region in the replay domain");
        (skel, region)
    }

    /// Who the worker layer takes for a worker, asked of the real programs (bind_replay, run with
    /// BPF_PROG_TEST_RUN on this kernel): a thread started after its tid's worker_slots entry was
    /// written is a later holder of the tid and is never bound, even to a slot no thread was bound to
    /// yet (the registering thread exited before any run of it bound it); the registering thread,
    /// started before, is; and once bound, a later holder is not taken either.
    #[test]
    #[ignore = "needs root and bpf(2) with BTF: run with --ignored (//scheduler:region_pin_test does)"]
    fn a_thread_started_after_a_registration_is_never_taken_for_that_worker() {
        let mut open_object = MaybeUninit::uninit();
        let (skel, _region) = loaded_with_replay_region(&mut open_object);
        let entries = MapHandle::try_from(&skel.maps.worker_slots).unwrap();
        // A tid past the worker_tids bitmap: the layer looks it up in worker_slots directly.
        let tid = bpf_intf::MORPHEUS_TID_LIMIT + 7;
        let (slot, registered_ns) = (1u32, 1_000_000_000u64);
        let entry = bpf_intf::morpheus_worker_slot { slot, domain: bpf_intf::MORPHEUS_REPLAY_DOMAIN, local: 0, _pad: 0, registered_ns };
        // SAFETY: a plain C struct viewed as its bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts((&entry as *const bpf_intf::morpheus_worker_slot).cast::<u8>(), size_of_val(&entry))
        };
        entries.update(&tid.to_ne_bytes(), bytes, MapFlags::ANY).unwrap();
        let bound = |start_ns: u64| {
            let mut ctx = bpf_intf::morpheus_bind_replay_ctx { start_ns, tid, slot };
            // SAFETY: a plain C struct viewed as its bytes for the duration of the call.
            let ctx = unsafe {
                std::slice::from_raw_parts_mut((&mut ctx as *mut bpf_intf::morpheus_bind_replay_ctx).cast::<u8>(), size_of_val(&ctx))
            };
            let input = ProgramInput { context_in: Some(ctx), ..Default::default() };
            skel.progs.bind_replay.test_run(input).expect("BPF_PROG_TEST_RUN of bind_replay").return_value
        };
        assert_eq!(bound(registered_ns + 1), 0, "a thread started after the registration was taken for the worker of a slot nothing was bound to");
        assert_eq!(bound(registered_ns - 1), 1, "the thread started before the registration was not taken for its worker");
        assert_eq!(bound(registered_ns + 2), 0, "a thread started after the registration took the bound worker's slot");
        assert_eq!(bound(registered_ns - 1), 1, "the bound thread lost its slot to a later holder of its tid");
    }

    /// The two levels of the tid bitmap as the real programs read them (bind_replay: worker_running's
    /// lookup, run with BPF_PROG_TEST_RUN on this kernel), written by the agent's own writer
    /// (kernel::LayerSlots): a recorded tid is found while another tid of its word and block is
    /// recorded and forgotten, a tid of another summary word is found after the first block's last tid
    /// is forgotten, and a tid recorded again in a block whose bit was cleared is found. And the
    /// programs do read the summary: with the tid's block bit cleared behind the agent's back the same
    /// registration is not found, so this fails if the agent leaves the block bit clear.
    #[test]
    #[ignore = "needs root and bpf(2) with BTF: run with --ignored (//scheduler:region_pin_test does)"]
    fn a_recorded_tid_is_found_through_both_levels_of_the_tid_bitmap() {
        let mut open_object = MaybeUninit::uninit();
        let (skel, _region) = loaded_with_replay_region(&mut open_object);
        let slots = kernel::LayerSlots::new(&skel.maps.worker_slots, &skel.maps.worker_tids, &skel.maps.worker_tid_summary).unwrap();
        let workers = MapHandle::try_from(&skel.maps.workers).unwrap();
        let summary = MapHandle::try_from(&skel.maps.worker_tid_summary).unwrap();
        let limits = crate::domains::DomainLimits { total: 2, per_user: 2 };
        let domains = crate::domains::Domains::new(crate::region::RegionParams::enforced_with_defaults(4, abi::Backend::Kernel), 7, None, limits);
        let domain = domains.for_uid(40004, 40004).unwrap();
        assert_eq!(domain.index, bpf_intf::MORPHEUS_REPLAY_DOMAIN, "the records must name the replay domain's region");
        // SAFETY: no preconditions.
        let me = unsafe { libc::gettid() } as u32;
        let pinned = Arc::new(crate::identity::Peer::this_process().expect("pin this process").thread(me).expect("this thread"));
        // Only the numbers are written to the maps: each record names another tid, pinned as this thread.
        let thread = |tid: u32| Assigned { tid, pid: tid, uid: 40004, thread: Arc::clone(&pinned), domain: Arc::clone(&domain), local: 0 };
        // Whether a run of `tid` (started before any registration) finds its worker_slots entry: the
        // slot's bookkeeping is zeroed first, so only a lookup that found the entry binds it.
        let found = |tid: u32, slot: u32| {
            let zero = vec![0u8; size_of::<bpf_intf::worker_ctx>()];
            workers.update(&slot.to_ne_bytes(), &zero, MapFlags::ANY).unwrap();
            let mut ctx = bpf_intf::morpheus_bind_replay_ctx { start_ns: 1, tid, slot };
            // SAFETY: a plain C struct viewed as its bytes for the duration of the call.
            let ctx = unsafe {
                std::slice::from_raw_parts_mut((&mut ctx as *mut bpf_intf::morpheus_bind_replay_ctx).cast::<u8>(), size_of_val(&ctx))
            };
            let input = ProgramInput { context_in: Some(ctx), ..Default::default() };
            skel.progs.bind_replay.test_run(input).expect("BPF_PROG_TEST_RUN of bind_replay").return_value == 1
        };
        let block = bpf_intf::MORPHEUS_TID_SUMMARY_BLOCK;
        // a and b share a word and a block; c is in another word of the summary.
        let (a, b, c) = (5 * block + 3, 5 * block + 4, 100 * block + 5);
        slots.record(1, &thread(a)).unwrap();
        assert!(found(a, 1), "a recorded tid was not found");
        slots.record(2, &thread(b)).unwrap();
        assert!(found(b, 2), "a second tid of the same word and block was not found");
        slots.forget(2, b);
        assert!(found(a, 1), "a recorded tid was lost when another tid of its block was forgotten");
        slots.record(3, &thread(c)).unwrap();
        slots.forget(1, a);
        assert!(found(c, 3), "a tid of another summary word was lost when the first block's last tid was forgotten");
        slots.record(4, &thread(a)).unwrap();
        assert!(found(a, 4), "a tid recorded again in a block whose bit had been cleared was not found");
        // Clear a's block bit behind the agent's back: the programs must then miss it (they read the
        // summary before the bitmap), and find it again once the bit is back.
        let (word, bit) = ((a >> bpf_intf::MORPHEUS_TID_SUMMARY_SHIFT) / 64, 1u64 << ((a >> bpf_intf::MORPHEUS_TID_SUMMARY_SHIFT) % 64));
        let value = u64::from_ne_bytes(summary.lookup(&word.to_ne_bytes(), MapFlags::ANY).unwrap().unwrap()[..8].try_into().unwrap());
        assert_ne!(value & bit, 0, "the agent left a recorded tid's block bit clear");
        summary.update(&word.to_ne_bytes(), &(value & !bit).to_ne_bytes(), MapFlags::ANY).unwrap();
        assert!(!found(a, 4), "the programs found a tid whose block bit is clear: they do not read the summary");
        summary.update(&word.to_ne_bytes(), &value.to_ne_bytes(), MapFlags::ANY).unwrap();
        assert!(found(a, 4));
        slots.forget(4, a);
        slots.forget(3, c);
        let all = (0..bpf_intf::MORPHEUS_TID_SUMMARY_WORDS)
            .map(|w| u64::from_ne_bytes(summary.lookup(&w.to_ne_bytes(), MapFlags::ANY).unwrap().unwrap()[..8].try_into().unwrap()))
            .fold(0, |acc, v| acc | v);
        assert_eq!(all, 0, "block bits left set once every recorded tid was forgotten");
    }
}
