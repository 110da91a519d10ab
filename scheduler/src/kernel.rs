// SPDX-License-Identifier: GPL-2.0-only
//! The sched_ext backend: loads src/bpf/main.bpf.c, publishes its region map, and carries out what the
//! BPF side cannot do itself.
//!
//! * Open/load/attach go through scx_utils' macros, so the ops name gets scx's version suffix and an
//!   error in the BPF program ends in a clean exit (the kernel falls back to its default scheduler);
//!   [`Backend::tick`] reports such an exit as an error so the agent stops.
//! * The region is the BPF_F_MMAPABLE array map `region`: mmapped here and wrapped in a [`Region`],
//!   so the header is written exactly like the simulation backend's. It is pinned at
//!   PINNED_REGION_PATH and unpinned on exit. The BPF side decides with its own copy of the
//!   configuration (load-time data set here) and the pressure level [`Backend::tick`] stores in its
//!   .bss: it never reads the header, which runtimes can write (S4, spec/SCB.md §10).
//! * The hint ring has one consumer, this agent (spec/SCB.md §8): it is not pinned, so no runtime can
//!   take records from it; runtimes learn of hints from preempt_seq and the SCB's hint fields.
//! * Registrations update the BPF `worker_slots` map (tid -> slot) before the registry replies.
//! * Escalation events: KICK was already done by the BPF side (logged here); THROTTLE caps the worker's
//!   cgroup with cpu.max until the BPF side's state machine lifts the episode (UNTHROTTLE record:
//!   acknowledged, not RUNNING, a critical section, or `throttle_max_ns`). Under sched_ext the
//!   kernel does not enforce cpu.max for our tasks; it hands the value to ops.cgroup_set_bandwidth and
//!   the BPF program enforces it (src/bpf/main.bpf.c, `cgroup_bw`).

#[allow(clippy::all, dead_code, non_camel_case_types, non_snake_case, non_upper_case_globals)]
mod bpf_intf {
    include!(concat!(env!("OUT_DIR"), "/bpf_intf.rs"));
}
#[allow(clippy::all, dead_code)]
mod bpf_skel {
    include!(concat!(env!("OUT_DIR"), "/bpf_skel.rs"));
}

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs;
use std::io::{self, Write};
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use libbpf_rs::{Link, MapCore, MapFlags, MapHandle, OpenObject, ProgramInput, RingBuffer, RingBufferBuilder};
use morpheus_abi as abi;
use scx_utils::{scx_ops_attach, scx_ops_load, scx_ops_open, uei_exited, uei_report};

use crate::backend::{Backend, Config, SlotObserver};
use crate::cgroup::{self, Caps};
use crate::domains::Domain;
use crate::region::{self, Region, RegionParams};
use crate::replay::{self, GateCase};
use crate::stats::{Counters, Reactions};
use bpf_skel::{BpfSkel, BpfSkelBuilder};

/// How often the BPF timer checks running workers for overruns: fine enough for the configured slice
/// and grace, never busier than every 100 µs.
fn check_interval_ns(config: &Config) -> u64 {
    (config.slice_ns.min(config.grace_ns) / 4).clamp(100_000, 1_000_000)
}

/// Logs how many instructions the verifier processed per program (the scheduler's veristat record,
/// scheduler/veristat/), so growth shows up in review.
fn log_verifier_complexity() {
    let mut progs: Vec<(String, u32)> = libbpf_rs::query::ProgInfoIter::default()
        .filter(|info| info.ty == libbpf_rs::ProgramType::StructOps)
        .map(|info| (info.name.to_string_lossy().into_owned(), info.verified_insns))
        .filter(|(name, _)| name.starts_with("morpheus_"))
        .collect();
    progs.sort();
    let line: Vec<String> = progs.iter().map(|(name, n)| format!("{name}={n}")).collect();
    log::info!("verified_insns: {}", line.join(" "));
}

/// A shared mapping of the region map's value; unmapped when the region is dropped.
struct MapMapping {
    base: NonNull<u8>,
    len: usize,
    _fd: OwnedFd,
}

// SAFETY: a MAP_SHARED mapping of kernel memory; every access goes through Region's atomics.
unsafe impl Send for MapMapping {}
unsafe impl Sync for MapMapping {}

impl Drop for MapMapping {
    fn drop(&mut self) {
        // SAFETY: exactly the range mapped in `map_region`.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

fn map_region(map: &dyn MapCore, scb_count: u32) -> Result<Region> {
    let value_size = map.value_size() as usize;
    if value_size < region::region_size(scb_count) {
        bail!(
            "the BPF region map holds {value_size} bytes, too small for {scb_count} SCBs ({} bytes)",
            region::region_size(scb_count)
        );
    }
    let fd = map.as_fd().try_clone_to_owned().context("cannot duplicate the region map fd")?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let len = value_size.div_ceil(page) * page;
    // SAFETY: mapping a BPF_F_MMAPABLE array map; checked for MAP_FAILED below.
    let ptr = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0)
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error()).context("cannot mmap the BPF region map (is it BPF_F_MMAPABLE?)");
    }
    let base = NonNull::new(ptr.cast::<u8>()).expect("mmap returned NULL");
    let mapping = MapMapping { base, len, _fd: fd };
    // SAFETY: `len` >= value_size bytes of page-aligned shared memory that live as long as `mapping`.
    unsafe { Region::from_mapping(base, value_size, PathBuf::from(abi::PINNED_REGION_PATH), scb_count, Box::new(mapping)) }
}

/// Stores generation 0 in a region left pinned by an instance that was killed, so runtimes still
/// mapping it detach (spec/SCB.md §1.1) instead of waiting on a scheduler that is gone.
fn retire_stale_region(path: &Path) {
    let Ok(map) = MapHandle::from_pinned_path(path) else { return };
    let value_size = map.value_size() as usize;
    if value_size < size_of::<abi::RegionHeader>() {
        return;
    }
    // SAFETY: mapping the first page of a BPF_F_MMAPABLE map's value; checked for MAP_FAILED.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let ptr = unsafe {
        libc::mmap(std::ptr::null_mut(), page, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, map.as_fd().as_raw_fd(), 0)
    };
    if ptr == libc::MAP_FAILED {
        return;
    }
    // SAFETY: the header lies in the mapped page; generation is an aligned u64 stored atomically.
    unsafe {
        let generation = ptr.cast::<u8>().add(std::mem::offset_of!(abi::RegionHeader, generation));
        let magic = std::ptr::read_volatile(ptr.cast::<u64>());
        if magic == abi::REGION_MAGIC {
            (*generation.cast::<std::sync::atomic::AtomicU64>()).store(0, std::sync::atomic::Ordering::Release);
        }
        libc::munmap(ptr, page);
    }
}

/// Removes a stale pin left by an instance that was killed (its maps live on while mapped).
fn unpin_stale(path: &Path) -> Result<()> {
    if path == Path::new(abi::PINNED_REGION_PATH) {
        retire_stale_region(path);
    }
    match fs::remove_file(path) {
        Ok(()) => {
            log::warn!("removed a stale pin at {} (a previous instance did not exit cleanly)", path.display());
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot remove the stale pin {}", path.display())),
    }
}

/// `--replay-gate`: answers conformance cases with the BPF program's escalation gate. The program is
/// opened and loaded exactly as for scheduling (so this kernel's verifier accepts the same object),
/// but the scheduler is never attached: for each case the region map gets the case's region image
/// and `gate_replay` runs once (BPF_PROG_TEST_RUN). Writes one answer line per case to `out`; a case
/// whose layout the map cannot hold gets an error line instead. Returns how many were refused.
pub fn replay_gate(cases: &[GateCase], out: &mut dyn Write) -> Result<usize> {
    scx_utils::try_set_rlimit_infinity();
    let mut open_object = MaybeUninit::uninit();
    let builder = BpfSkelBuilder::default();
    let mut skel = scx_ops_open!(builder, &mut open_object, morpheus_ops, None::<libbpf_rs::libbpf_sys::bpf_object_open_opts>)?;
    let skel = scx_ops_load!(skel, morpheus_ops, uei)?;
    // The replay programs' verifier complexity, beside the ops' (scheduler/veristat/; names are
    // truncated to 15 characters by the kernel).
    for name in ["gate_replay", "escalation_repl"] {
        if let Some(info) = libbpf_rs::query::ProgInfoIter::default()
            .filter(|info| info.name.to_string_lossy() == name)
            .max_by_key(|info| info.id)
        {
            log::info!("verified_insns: {name}={}", info.verified_insns);
        }
    }
    let value_size = skel.maps.region.value_size() as usize;
    let key = 0u32.to_ne_bytes();
    let mut refused = 0;
    for case in cases {
        if let Some((code, message)) = replay::layout_refusal(case, value_size) {
            log::warn!("case {}: refused, {}: {message}", case.name, code.name());
            writeln!(out, "{}", replay::refusal_line(case, code, &message))?;
            refused += 1;
            continue;
        }
        // The rest of the map (slots the image does not have) is zero, as in a fresh region.
        let mut value = vec![0u8; value_size];
        value[..case.image.len()].copy_from_slice(&case.image);
        skel.maps
            .region
            .update(&key, &value, MapFlags::ANY)
            .with_context(|| format!("case {}: cannot write the region image into the BPF region map", case.name))?;
        match case.op {
            replay::CaseOp::Gate => {
                let mut ctx = bpf_intf::morpheus_gate_replay_ctx { runtime_ns: case.runtime_ns, slot: case.slot, _pad: 0 };
                let retval = run_syscall_prog(&skel.progs.gate_replay, &mut ctx)
                    .with_context(|| format!("case {}: BPF_PROG_TEST_RUN of gate_replay failed", case.name))?;
                let verdict = replay::verdict_from_retval(retval).ok_or_else(|| {
                    anyhow!("case {}: gate_replay returned {}, which is no gate verdict", case.name, retval as i32)
                })?;
                writeln!(out, "{}", replay::answer_line(case, verdict))?;
            }
            replay::CaseOp::Escalate { now_ns, reset } => {
                let mut ctx = bpf_intf::morpheus_escalation_replay_ctx {
                    runtime_ns: case.runtime_ns,
                    now_ns,
                    slot: case.slot,
                    reset: reset as u32,
                    verdict: 0,
                    step: 0,
                    escalated: 0,
                    steps: 0,
                };
                let retval = run_syscall_prog(&skel.progs.escalation_replay, &mut ctx)
                    .with_context(|| format!("case {}: BPF_PROG_TEST_RUN of escalation_replay failed", case.name))?;
                if retval != 0 {
                    bail!("case {}: escalation_replay returned {}", case.name, retval as i32);
                }
                let verdict = replay::verdict_from_retval(ctx.verdict)
                    .ok_or_else(|| anyhow!("case {}: escalation_replay gave verdict {}", case.name, ctx.verdict))?;
                let step = replay::step_from_raw(ctx.step)
                    .ok_or_else(|| anyhow!("case {}: escalation_replay gave step {}", case.name, ctx.step))?;
                writeln!(out, "{}", replay::escalation_answer_line(case, verdict, step, ctx.escalated != 0, ctx.steps))?;
            }
        }
    }
    out.flush()?;
    Ok(refused)
}

/// Runs a SEC("syscall") program once (BPF_PROG_TEST_RUN) with `ctx` as its context; the kernel copies
/// a syscall program's context back into the buffer it came from (the results of escalation_replay).
/// Returns the program's return value.
fn run_syscall_prog<T: Copy>(prog: &libbpf_rs::ProgramMut<'_>, ctx: &mut T) -> Result<u32> {
    // SAFETY: a plain C struct viewed as its bytes for the duration of the call.
    let bytes = unsafe { std::slice::from_raw_parts_mut((ctx as *mut T).cast::<u8>(), size_of::<T>()) };
    let input = ProgramInput { context_in: Some(bytes), ..Default::default() };
    Ok(prog.test_run(input)?.return_value)
}

/// A worker whose cgroup is capped.
struct Throttle {
    cgroup: PathBuf,
    /// The thread the cap was applied for (a slot can change hands).
    tid: u32,
}

/// Throttles in force; shared with the slot observer so that a released slot is lifted at once.
struct Throttles {
    region: Arc<Region>,
    by_slot: HashMap<u32, Throttle>,
    /// Where cgroup v2 is mounted (None: it is not, and throttles fall back as refusals).
    cgroup2_root: Option<PathBuf>,
    caps: Caps,
    applied: u64,
    lifted: u64,
    fallbacks: u64,
    errors: u64,
}

impl Throttles {
    fn apply(&mut self, slot: u32, pid: u32, tid: u32) {
        if self.by_slot.contains_key(&slot) {
            // Already capped for this episode (a repeated record); one cap per slot.
            return;
        }
        let result = self
            .cgroup2_root
            .as_deref()
            .ok_or_else(|| anyhow!("cgroup v2 is not mounted"))
            .and_then(|root| cgroup::cgroup_dir_of(root, pid, tid))
            .and_then(|dir| self.caps.cap(&dir).map(|()| dir));
        match result {
            Ok(cgroup) => {
                log::info!("throttle: slot {slot} (tid {tid}) capped via {}/cpu.max", cgroup.display());
                self.by_slot.insert(slot, Throttle { cgroup, tid });
                self.applied += 1;
            }
            Err(e) => {
                // Nothing is in force; the BPF side's episode still ends by its own rules.
                log::warn!("throttle of slot {slot} (tid {tid}) not applied: {e:#}");
                self.fallbacks += 1;
            }
        }
    }

    fn lift(&mut self, slot: u32, why: &str) {
        let Some(throttle) = self.by_slot.remove(&slot) else { return };
        if let Err(e) = self.caps.release(&throttle.cgroup) {
            log::warn!("{e:#}");
            self.errors += 1;
        }
        self.lifted += 1;
        log::info!("unthrottle: slot {slot} ({why})");
    }

    /// The BPF program decides when an episode ends (its UNTHROTTLE record); should that record be
    /// lost to a full ring, a cap whose episode the SCB shows closed (escalated = 0), or whose slot
    /// changed hands, is lifted here.
    fn lift_closed(&mut self) {
        let due: Vec<u32> = self
            .by_slot
            .iter()
            .filter(|(&slot, t)| {
                let scb = self.region.scb(slot);
                scb.escalated().load(std::sync::atomic::Ordering::Relaxed) == 0
                    || scb.tid().load(std::sync::atomic::Ordering::Relaxed) != t.tid
            })
            .map(|(&slot, _)| slot)
            .collect();
        for slot in due {
            self.lift(slot, "episode closed");
        }
    }
}

/// Keeps the BPF tid -> slot map in step with the registry.
struct KernelSlots {
    worker_slots: MapHandle,
    throttles: Arc<Mutex<Throttles>>,
}

impl SlotObserver for KernelSlots {
    fn assigned(&self, slot: u32, tid: u32, _pid: u32) -> Result<()> {
        self.worker_slots
            .update(&tid.to_ne_bytes(), &slot.to_ne_bytes(), MapFlags::ANY)
            .with_context(|| format!("cannot record tid {tid} -> slot {slot} in the BPF worker_slots map"))
    }

    fn released(&self, slot: u32, tid: u32, _pid: u32) {
        if let Err(e) = self.worker_slots.delete(&tid.to_ne_bytes()) {
            log::debug!("tid {tid} was not in the BPF worker_slots map: {e}");
        }
        self.throttles.lock().unwrap().lift(slot, "slot released");
    }
}

/// What the ring buffer callbacks hand to `tick`.
#[derive(Default)]
struct Drained {
    hints: Vec<abi::Hint>,
    events: Vec<abi::EscalationEvent>,
}

fn read_record<T: Copy>(data: &[u8]) -> Option<T> {
    // SAFETY: T is a plain C record; read_unaligned copes with any alignment.
    (data.len() >= size_of::<T>()).then(|| unsafe { std::ptr::read_unaligned(data.as_ptr().cast::<T>()) })
}

pub struct KernelBackend {
    skel: BpfSkel<'static>,
    link: Option<Link>,
    region: Arc<Region>,
    rings: RingBuffer<'static>,
    drained: Rc<RefCell<Drained>>,
    throttles: Arc<Mutex<Throttles>>,
    observer: Arc<KernelSlots>,
    tick_interval: Duration,
    pinned: Vec<PathBuf>,
    /// Per slot: last_ack_seq when its last hint/escalation was seen, to find the first of an episode.
    hint_ack: HashMap<u32, u64>,
    event_ack: HashMap<u32, u64>,
    hint_records: u64,
    kick_records: u64,
    /// Overrun -> hint (first hint after a yield point), and grace expiry -> escalation.
    reactions: Reactions,
    shut_down: bool,
}

impl KernelBackend {
    pub fn open(config: &Config) -> Result<Self> {
        if config.max_workers > abi::MAX_WORKERS {
            bail!(
                "--max-workers {}: the kernel backend's region map holds at most {} SCBs (MAX_WORKERS)",
                config.max_workers,
                abi::MAX_WORKERS
            );
        }
        if let Some(path) = &config.region_path {
            if path != Path::new(abi::PINNED_REGION_PATH) {
                bail!(
                    "--region {}: the kernel backend always publishes its region at {}",
                    path.display(),
                    abi::PINNED_REGION_PATH
                );
            }
        }
        // Before touching any pin: a running scheduler (ours or not) keeps its maps and paths.
        if scx_utils::compat::is_sched_ext_enabled().unwrap_or(false) {
            bail!(
                "another sched_ext scheduler is already running (/sys/kernel/sched_ext/state is 'enabled'); \
                 stop it first"
            );
        }
        scx_utils::try_set_rlimit_infinity();

        // The skeleton borrows its object for as long as the process serves; one per process.
        let open_object: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
        let mut builder = BpfSkelBuilder::default();
        builder.obj_builder.debug(config.verbose > 1);
        let mut skel = scx_ops_open!(builder, open_object, morpheus_ops, None::<libbpf_rs::libbpf_sys::bpf_object_open_opts>)?;
        skel.struct_ops.morpheus_ops_mut().exit_dump_len = config.exit_dump_len;

        let rodata = skel.maps.rodata_data.as_mut().expect("the BPF program has .rodata");
        rodata.check_interval_ns = check_interval_ns(config);
        rodata.nr_possible_cpus = *scx_utils::NR_CPU_IDS as u32;
        rodata.throttle_max_ns = config.throttle_max_ns;
        // The configuration the live paths decide with (S4): load-time data only the agent writes. The
        // header publishes the same values for runtimes; the BPF side never reads them back from it.
        rodata.cfg_scheduler_mode = config.mode.raw();
        rodata.cfg_escalation_policy = config.policy.raw();
        rodata.cfg_slice_ns = config.slice_ns;
        rodata.cfg_grace_ns = config.grace_ns;
        rodata.cfg_hint_min_interval_ns = config.hint_min_interval_ns;
        rodata.cfg_scb_count = config.max_workers;

        let skel = scx_ops_load!(skel, morpheus_ops, uei)?;
        let mut skel: BpfSkel<'static> = skel;

        // Region: write and publish the header before anything can run a worker.
        let region = Arc::new(map_region(&skel.maps.region, config.max_workers)?);
        let previous = region.generation();
        region.publish(
            &RegionParams {
                scb_count: config.max_workers,
                mode: config.mode,
                policy: config.policy,
                slice_ns: config.slice_ns,
                grace_ns: config.grace_ns,
                hint_min_interval_ns: config.hint_min_interval_ns,
                backend: abi::Backend::Kernel,
                // No HINT_RING: the ring is the agent's alone (SCB.md §8), nothing is pinned for runtimes.
                optional_features: if crate::pressure::PressureFeed::psi_available() {
                    abi::feature::PRESSURE_RECORD
                } else {
                    0
                },
            },
            region::new_generation(previous),
        );

        let throttles = Arc::new(Mutex::new(Throttles {
            region: Arc::clone(&region),
            by_slot: HashMap::new(),
            cgroup2_root: cgroup::cgroup2_root(),
            caps: Caps::with_journal(config.journal.clone()),
            applied: 0,
            lifted: 0,
            fallbacks: 0,
            errors: 0,
        }));
        let observer = Arc::new(KernelSlots {
            worker_slots: MapHandle::try_from(&skel.maps.worker_slots).context("worker_slots map handle")?,
            throttles: Arc::clone(&throttles),
        });

        let drained = Rc::new(RefCell::new(Drained::default()));
        let hints = MapHandle::try_from(&skel.maps.hints).context("hints ring handle")?;
        let events = MapHandle::try_from(&skel.maps.escalation_events).context("escalation ring handle")?;
        let mut rb = RingBufferBuilder::new();
        let sink = Rc::clone(&drained);
        rb.add(&hints, move |data: &[u8]| {
            if let Some(h) = read_record::<abi::Hint>(data) {
                sink.borrow_mut().hints.push(h);
            }
            0
        })?;
        let sink = Rc::clone(&drained);
        rb.add(&events, move |data: &[u8]| {
            if let Some(e) = read_record::<abi::EscalationEvent>(data) {
                sink.borrow_mut().events.push(e);
            }
            0
        })?;
        let rings = rb.build().context("cannot set up the ring buffer consumer")?;

        let link = scx_ops_attach!(skel, morpheus_ops)?;
        log_verifier_complexity();

        // Pinned only once attached, so a start that fails leaves the paths as they were.
        fs::create_dir_all(abi::PIN_DIR)
            .with_context(|| format!("cannot create {} (is bpffs mounted on /sys/fs/bpf?)", abi::PIN_DIR))?;
        // Root only (SCB.md §10): runtimes get the region map's fd with their registration reply.
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(abi::PIN_DIR, fs::Permissions::from_mode(0o700))
                .with_context(|| format!("cannot make {} root-only", abi::PIN_DIR))?;
        }
        let mut pinned = Vec::new();
        // A hint ring an older instance pinned would still be drained by its runtimes: remove it.
        unpin_stale(Path::new(abi::PINNED_HINTS_PATH))?;
        let path = PathBuf::from(abi::PINNED_REGION_PATH);
        unpin_stale(&path)?;
        skel.maps.region.pin(&path).with_context(|| format!("cannot pin a BPF map at {}", path.display()))?;
        pinned.push(path);
        log::info!(
            "sched_ext scheduler attached (overrun check every {} µs); region pinned at {}",
            check_interval_ns(config) / 1000,
            abi::PINNED_REGION_PATH
        );

        Ok(KernelBackend {
            skel,
            link: Some(link),
            region,
            rings,
            drained,
            throttles,
            observer,
            tick_interval: config.tick,
            pinned,
            hint_ack: HashMap::new(),
            event_ack: HashMap::new(),
            hint_records: 0,
            kick_records: 0,
            reactions: Reactions::default(),
            shut_down: false,
        })
    }

    fn bss(&self) -> &bpf_skel::types::bss {
        self.skel.maps.bss_data.as_ref().expect("the BPF program has .bss")
    }

    fn counter(&self, idx: bpf_intf::morpheus_counter) -> u64 {
        // SAFETY: reading a u64 of the mmapped .bss that BPF updates atomically.
        unsafe { std::ptr::read_volatile(&self.bss().counters[idx as usize]) }
    }

    /// Raw BPF counters by name (the stats' `backend_counters`).
    pub fn bpf_counters(&self) -> Vec<(&'static str, u64)> {
        let names = [
            ("hints_emitted", bpf_intf::morpheus_counter_MORPHEUS_CNT_HINTS_EMITTED),
            ("hints_rate_limited", bpf_intf::morpheus_counter_MORPHEUS_CNT_HINTS_RATE_LIMITED),
            ("hints_ring_full", bpf_intf::morpheus_counter_MORPHEUS_CNT_HINTS_RING_FULL),
            ("escalations", bpf_intf::morpheus_counter_MORPHEUS_CNT_ESCALATIONS),
            ("kicks", bpf_intf::morpheus_counter_MORPHEUS_CNT_KICKS),
            ("throttles", bpf_intf::morpheus_counter_MORPHEUS_CNT_THROTTLES),
            ("events_ring_full", bpf_intf::morpheus_counter_MORPHEUS_CNT_EVENTS_RING_FULL),
            ("worker_runs", bpf_intf::morpheus_counter_MORPHEUS_CNT_WORKER_RUNS),
            ("ack_resets", bpf_intf::morpheus_counter_MORPHEUS_CNT_ACK_RESETS),
            ("sleep_resets", bpf_intf::morpheus_counter_MORPHEUS_CNT_SLEEP_RESETS),
            ("stale_slots", bpf_intf::morpheus_counter_MORPHEUS_CNT_STALE_SLOTS),
            ("timer_runs", bpf_intf::morpheus_counter_MORPHEUS_CNT_TIMER_RUNS),
            ("cpu_max_held_back", bpf_intf::morpheus_counter_MORPHEUS_CNT_BW_THROTTLED),
            ("wake_preempts", bpf_intf::morpheus_counter_MORPHEUS_CNT_WAKE_PREEMPTS),
            ("kicks_spared_critical", bpf_intf::morpheus_counter_MORPHEUS_CNT_KICKS_SPARED_CRITICAL),
            ("holds_spared_critical", bpf_intf::morpheus_counter_MORPHEUS_CNT_HOLDS_SPARED_CRITICAL),
            ("held_in_critical", bpf_intf::morpheus_counter_MORPHEUS_CNT_HELD_IN_CRITICAL),
        ];
        names.iter().map(|&(name, idx)| (name, self.counter(idx))).collect()
    }

    fn drain(&mut self) -> Result<()> {
        self.rings.consume().context("consuming the BPF ring buffers")?;
        let drained = std::mem::take(&mut *self.drained.borrow_mut());
        for hint in drained.hints {
            self.hint_records += 1;
            let slot = hint.slot;
            if slot >= self.region.scb_count() {
                continue;
            }
            // The first request since the worker's last acknowledgement measures the reaction time.
            let ack = self.region.scb(slot).last_ack_seq().load(std::sync::atomic::Ordering::Acquire);
            if hint.preempt_seq == ack + 1 || self.hint_ack.get(&slot) != Some(&ack) {
                self.reactions.hint.push(hint.overrun_ns);
            }
            self.hint_ack.insert(slot, ack);
        }
        for ev in drained.events {
            let slot = ev.slot;
            if slot >= self.region.scb_count() {
                continue;
            }
            let ack = self.region.scb(slot).last_ack_seq().load(std::sync::atomic::Ordering::Acquire);
            if self.event_ack.get(&slot) != Some(&ack) {
                self.reactions.escalation.push(ev.overrun_ns);
            }
            self.event_ack.insert(slot, ack);
            match abi::EscalationAction::try_from(ev.action) {
                Ok(abi::EscalationAction::Kick) => {
                    self.kick_records += 1;
                    log::debug!("kick: slot {slot} (tid {}) {} µs past slice + grace", ev.tid, ev.overrun_ns / 1000);
                }
                Ok(abi::EscalationAction::Throttle) => {
                    self.throttles.lock().unwrap().apply(slot, ev.pid, ev.tid);
                }
                Ok(abi::EscalationAction::Unthrottle) => {
                    self.throttles.lock().unwrap().lift(slot, "lifted by the scheduler");
                }
                other => log::warn!("unexpected escalation action {other:?} from the BPF program"),
            }
        }
        Ok(())
    }
}

impl Backend for KernelBackend {
    fn kind(&self) -> abi::Backend {
        abi::Backend::Kernel
    }

    fn shared_domain(&self) -> Option<Arc<Domain>> {
        // Every client maps the one BPF region map: its fd goes with each registration reply.
        let fd = self.skel.maps.region.as_fd().try_clone_to_owned().ok()?;
        Some(Arc::new(Domain { region: Arc::clone(&self.region), fd }))
    }

    fn slot_observer(&self) -> Option<Arc<dyn SlotObserver>> {
        Some(Arc::clone(&self.observer) as Arc<dyn SlotObserver>)
    }

    fn tick_interval(&self) -> Duration {
        self.tick_interval
    }

    fn tick(&mut self, _now_ns: u64, pressure_level: u32) -> Result<()> {
        if uei_exited!(&self.skel, uei) {
            // The kernel has already fallen back to its default scheduler; say why and stop.
            let _ = self.link.take();
            return match uei_report!(&self.skel, uei) {
                Ok(uei) if uei.should_restart() => Err(anyhow::Error::new(crate::backend::RestartRequested)),
                Ok(_) => Err(anyhow!("the BPF scheduler was unloaded by the kernel")),
                Err(e) => Err(e.context("the BPF scheduler exited with an error")),
            };
        }
        // The BPF side copies it into each SCB; it never reads the header's pressure record.
        let bss = self.skel.maps.bss_data.as_mut().expect("the BPF program has .bss");
        // SAFETY: an aligned u32 of the mmapped .bss that BPF only loads.
        unsafe { std::ptr::write_volatile(&mut bss.pressure_level, pressure_level) };
        self.drain()?;
        self.throttles.lock().unwrap().lift_closed();
        Ok(())
    }

    fn counters(&self) -> Counters {
        let mut c = Counters { ticks: self.counter(bpf_intf::morpheus_counter_MORPHEUS_CNT_TIMER_RUNS), ..Counters::default() };
        c.hints_emitted = self.counter(bpf_intf::morpheus_counter_MORPHEUS_CNT_HINTS_EMITTED) + self.counter(bpf_intf::morpheus_counter_MORPHEUS_CNT_HINTS_RING_FULL);
        c.hints_dropped = self.counter(bpf_intf::morpheus_counter_MORPHEUS_CNT_HINTS_RATE_LIMITED) + self.counter(bpf_intf::morpheus_counter_MORPHEUS_CNT_HINTS_RING_FULL);
        for (i, slot) in c.gate.iter_mut().enumerate() {
            // SAFETY: as in `counter`.
            *slot = unsafe { std::ptr::read_volatile(&self.bss().gate_verdicts[i]) };
        }
        let t = self.throttles.lock().unwrap();
        c.actions[abi::EscalationAction::Kick.raw() as usize] = self.counter(bpf_intf::morpheus_counter_MORPHEUS_CNT_KICKS);
        c.actions[abi::EscalationAction::Throttle.raw() as usize] = t.applied;
        c.actions[abi::EscalationAction::Unthrottle.raw() as usize] = t.lifted;
        c.fallbacks = t.fallbacks;
        c.effect_errors = t.errors;
        c.spared_in_critical = self.counter(bpf_intf::morpheus_counter_MORPHEUS_CNT_KICKS_SPARED_CRITICAL)
            + self.counter(bpf_intf::morpheus_counter_MORPHEUS_CNT_HOLDS_SPARED_CRITICAL);
        c.held_in_critical = self.counter(bpf_intf::morpheus_counter_MORPHEUS_CNT_HELD_IN_CRITICAL);
        for (i, slot) in c.escalations_by_policy.iter_mut().enumerate().take(bpf_intf::MORPHEUS_NR_POLICIES as usize) {
            // SAFETY: as in `counter`.
            *slot = unsafe { std::ptr::read_volatile(&self.bss().escalations_by_policy[i]) };
        }
        c
    }

    fn reactions(&self) -> Reactions {
        self.reactions.clone()
    }

    fn backend_counters(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = self.bpf_counters().into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        for step in morpheus_policy_ffi::EscalationStep::ALL {
            if let Some(why) = step.lift_reason() {
                // SAFETY: as in `counter`.
                let n = unsafe { std::ptr::read_volatile(&self.bss().lifts_by_step[step as usize]) };
                out.push((format!("lifts_{why}"), n));
            }
        }
        out.push(("hint_records".into(), self.hint_records));
        out.push(("kick_records".into(), self.kick_records));
        out
    }

    fn shutdown(&mut self) -> Result<()> {
        if self.shut_down {
            return Ok(());
        }
        self.shut_down = true;
        // Drain what is left so the final report is complete; errors here do not stop the clean-up.
        let _ = self.drain();
        {
            let mut t = self.throttles.lock().unwrap();
            let slots: Vec<u32> = t.by_slot.keys().copied().collect();
            for slot in slots {
                t.lift(slot, "scheduler exiting");
            }
        }
        self.region.retire();
        // Detach: the kernel switches every task back to its default scheduler.
        let _ = self.link.take();
        let mut errors = Vec::new();
        for path in self.pinned.drain(..) {
            if let Err(e) = fs::remove_file(&path) {
                if e.kind() != io::ErrorKind::NotFound {
                    errors.push(format!("cannot unpin {}: {e}", path.display()));
                }
            }
        }
        // Only ours lives there; leave the directory if something else was put in it.
        let _ = fs::remove_dir(abi::PIN_DIR);

        let c = self.counters();
        log::info!(
            "BPF counters: {}",
            self.bpf_counters().iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
        );
        log::info!(
            "gate verdicts: {}; escalations by policy: {:?}",
            c.gate.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(","),
            // SAFETY: as in `counter`.
            (0..bpf_intf::MORPHEUS_NR_POLICIES as usize)
                .map(|i| unsafe { std::ptr::read_volatile(&self.bss().escalations_by_policy[i]) })
                .collect::<Vec<_>>()
        );
        let lifts: Vec<String> = morpheus_policy_ffi::EscalationStep::ALL
            .iter()
            .filter_map(|step| step.lift_reason().map(|why| (*step as usize, why)))
            // SAFETY: as in `counter`.
            .map(|(i, why)| format!("{why}={}", unsafe { std::ptr::read_volatile(&self.bss().lifts_by_step[i]) }))
            .collect();
        log::info!("escalation lifts: {}", lifts.join(" "));
        log::info!("reaction overrun->hint: {}", self.reactions.hint.summary());
        log::info!("reaction grace expiry->escalation: {}", self.reactions.escalation.summary());
        log::info!("hint records drained: {}, kick records: {}", self.hint_records, self.kick_records);

        match uei_report!(&self.skel, uei) {
            Ok(_) => {}
            Err(e) => errors.push(format!("{e:#}")),
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(anyhow!(errors.join("; ")))
        }
    }
}

impl Drop for KernelBackend {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            log::warn!("kernel backend clean-up: {e:#}");
        }
    }
}
