// SPDX-License-Identifier: GPL-2.0-only
//! The sched_ext backend: loads src/bpf/main.bpf.c, publishes its region map, and carries out what the
//! BPF side cannot do itself.
//!
//! * Open/load/attach go through scx_utils' macros, so the ops name gets scx's version suffix and an
//!   error in the BPF program ends in a clean exit (the kernel falls back to its default scheduler);
//!   [`Backend::tick`] reports such an exit as an error so the agent stops.
//! * Regions: one per trust domain (uid, spec/SCB.md §10), each a BPF_F_MMAPABLE array map of one
//!   element created here at the uid's first registration ([`BpfRegions`]), inserted into the
//!   program's `regions` array of maps at the domain's index, mmapped and wrapped in a [`Region`] (so
//!   the header is written exactly like the simulation backend's), and handed only to that uid's
//!   clients. Each is pinned in the root-only PIN_DIR, only once its header is published (spec/SCB.md
//!   §1.3; the agent's own uid's at PINNED_REGION_PATH, the others' at `region-uid<uid>`) so that the
//!   next instance can retire them after a crash, and unpinned on exit. The BPF side decides with its own copy of the configuration (load-time data
//!   set here) and the pressure level [`Backend::tick`] stores in its .bss: it never reads a header,
//!   which runtimes can write (S4).
//! * The hint ring has one consumer, this agent (spec/SCB.md §8): it is not pinned, so no runtime can
//!   take records from it; runtimes learn of hints from preempt_seq and the SCB's hint fields.
//! * Registrations update the BPF `worker_slots` map (tid -> slot, domain, SCB index) before the
//!   registry replies; it is all the BPF side believes about who a worker is and where its SCB is.
//!   Hint and escalation records name the agent's slot; the worker's tid, pid and SCB come from the
//!   agent's table ([`Workers`]), never from the record or an SCB.
//! * Escalation events: KICK was already done by the BPF side (logged here); THROTTLE caps the worker's
//!   cgroup with cpu.max until the BPF side's state machine lifts the episode (UNTHROTTLE record:
//!   acknowledged, not RUNNING, a critical section, or `throttle_max_ns`). Under sched_ext the
//!   kernel does not enforce cpu.max for our tasks; it hands the value to ops.cgroup_set_bandwidth and
//!   the BPF program enforces it (src/bpf/cpumax.bpf.c, `cgroup_bw`).

#[allow(clippy::all, dead_code, non_camel_case_types, non_snake_case, non_upper_case_globals)]
pub(crate) mod bpf_intf {
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
use libbpf_rs::{Link, MapCore, MapFlags, MapHandle, MapType, OpenObject, ProgramInput, RingBuffer, RingBufferBuilder};
use morpheus_abi as abi;
use scx_utils::{scx_ops_attach, scx_ops_load, scx_ops_open, uei_exited, uei_report};

use crate::backend::{Backend, Config, SlotObserver};
use crate::cgroup::{self, Caps};
use crate::domains::{Assigned, NewRegion, RegionMaker, Workers};
use crate::region::{self, Region};
use crate::replay::{self, GateCase};
use crate::stats::{Counters, Reactions};
use bpf_skel::{BpfSkel, BpfSkelBuilder};

/// How often the agent ticks while workers are registered (the sched_ext host). Every decision is the
/// BPF program's; the tick only drains hint and kick records for the stats and samples the SCBs for
/// yields by reason and acknowledgement latency (to this resolution). A throttle record wakes the agent
/// at once, and so does a hint record that finds the hint ring half full. Under the VM's emulation a
/// 1 ms tick cost the agent ~28 % of a CPU (starvation scenario, 3 s of /proc/<pid>/stat), time the
/// single emulation thread took from the CPU the workers share.
pub(crate) const AGENT_TICK: Duration = Duration::from_millis(10);

/// How often the agent ticks while no worker is registered, when nothing wakes it sooner: there is
/// nothing to sample, and each wake-up costs the workload on that CPU a context switch.
const AGENT_IDLE_TICK: Duration = Duration::from_millis(100);

/// CPUs online now: the BPF program shares a CPU out among the tasks waiting for one
/// (`contended_slice`). Possible CPUs can be many more than the online ones in a VM, and would make
/// the shares too long.
fn online_cpus() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    u32::try_from(n).ok().filter(|&n| n > 0).unwrap_or(1)
}

/// How often the BPF timer checks running workers for overruns: fine enough for the configured slice
/// and grace, never busier than every 100 µs.
pub(crate) fn check_interval_ns(config: &Config) -> u64 {
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

/// Bytes of one domain's region map value (the BPF program's `struct morpheus_region`).
const REGION_VALUE_SIZE: usize = size_of::<bpf_intf::morpheus_region>();

/// Maps a region map's value read-write and wraps it; `fd` stays open as long as the region.
fn map_region(fd: OwnedFd, value_size: usize, path: PathBuf, scb_count: u32) -> Result<Region> {
    if value_size < region::region_size(scb_count) {
        bail!(
            "the BPF region map holds {value_size} bytes, too small for {scb_count} SCBs ({} bytes)",
            region::region_size(scb_count)
        );
    }
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
    unsafe { Region::from_mapping(base, value_size, path, scb_count, Box::new(mapping)) }
}

/// A new region map matching the `regions` template: an mmapable array of one element.
fn create_region_map(index: u32) -> Result<MapHandle> {
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        map_flags: libbpf_rs::libbpf_sys::BPF_F_MMAPABLE,
        ..Default::default()
    };
    MapHandle::create(MapType::Array, Some(format!("region_{index}")), 4, REGION_VALUE_SIZE as u32, 1, &opts)
        .with_context(|| format!("cannot create the region map of domain {index}"))
}

/// Where a domain's region is pinned in `dir` (PIN_DIR for the live scheduler): the agent's own
/// uid's at PINNED_REGION_PATH (1.2 clients of that uid, and checks that map a region without
/// registering), every other uid's beside it.
fn pin_path(dir: &Path, uid: u32) -> PathBuf {
    // SAFETY: no preconditions.
    if uid == unsafe { libc::geteuid() } {
        dir.join(Path::new(abi::PINNED_REGION_PATH).file_name().expect("PINNED_REGION_PATH names a file"))
    } else {
        dir.join(format!("region-uid{uid}"))
    }
}

/// Whether a name in PIN_DIR is one of our region pins.
fn is_region_pin(name: &str) -> bool {
    Path::new(abi::PINNED_REGION_PATH).file_name().is_some_and(|n| n == name) || name.starts_with("region-uid")
}

/// The regions of the trust domains: each a map of its own in the program's `regions` array of maps
/// (the worker layer's, so the tracing backend's program has them too).
pub struct BpfRegions {
    pub(crate) outer: MapHandle,
    /// Where each region is pinned (the live scheduler: PIN_DIR); the conformance replay pins nothing.
    pub(crate) pin_dir: Option<PathBuf>,
    /// Paths pinned so far, unpinned at shutdown.
    pub(crate) pinned: Arc<Mutex<Vec<PathBuf>>>,
}

impl RegionMaker for BpfRegions {
    fn create(&self, uid: u32, index: u32, scb_count: u32) -> Result<NewRegion> {
        if index >= self.outer.max_entries() {
            bail!("the scheduler holds at most {} trust domains (uids) and all are in use", self.outer.max_entries());
        }
        let map = create_region_map(index)?;
        let fd = map.as_fd().try_clone_to_owned().context("cannot duplicate a region map fd")?;
        let what = match &self.pin_dir {
            Some(dir) => pin_path(dir, uid),
            None => PathBuf::from(format!("bpf-map:region_{index}")),
        };
        let region = map_region(fd, REGION_VALUE_SIZE, what, scb_count)?;
        // Reachable by the BPF program only from here on (the header is published by the caller,
        // before any worker of the domain exists; the program never reads it). Not pinned yet: a
        // runtime that found the pin now would map a zeroed header (`name` pins it once published).
        let raw_fd = map.as_fd().as_raw_fd() as u32;
        self.outer
            .update(&index.to_ne_bytes(), &raw_fd.to_ne_bytes(), MapFlags::ANY)
            .with_context(|| format!("cannot insert the region of uid {uid} into the BPF regions map at {index}"))?;
        let fd = map.as_fd().try_clone_to_owned().context("cannot duplicate a region map fd")?;
        Ok(NewRegion { region, fd })
    }

    /// Pins the published region where its uid's runtimes look for it (a stale pin of a killed
    /// instance is removed first; a runtime looking in between finds no region, not a zeroed one).
    fn name(&self, uid: u32, new: &NewRegion) -> Result<Option<PathBuf>> {
        let Some(dir) = &self.pin_dir else { return Ok(None) };
        let path = pin_path(dir, uid);
        unpin_stale(&path)?;
        pin_fd(new.fd.as_fd(), &path).with_context(|| format!("cannot pin the region of uid {uid} at {}", path.display()))?;
        self.pinned.lock().unwrap_or_else(|p| p.into_inner()).push(path.clone());
        Ok(Some(path))
    }

    fn capacity(&self) -> u32 {
        self.outer.max_entries()
    }

    /// Empties the program's `regions` slot `index` (a BPF program still running with the old inner
    /// map keeps it alive until it returns: the kernel frees inner maps after an RCU grace period)
    /// and removes the pin, so the index can take a new domain's map and no runtime finds the retired
    /// region by name.
    fn release(&self, uid: u32, index: u32, pin: Option<&Path>) {
        if let Err(e) = self.outer.delete(&index.to_ne_bytes()) {
            log::warn!("cannot empty slot {index} of the BPF regions map (uid {uid}): {e}");
        }
        if let Some(pin) = pin {
            match fs::remove_file(pin) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => log::warn!("cannot remove the pin {} of uid {uid}'s freed region: {e}", pin.display()),
            }
            self.pinned.lock().unwrap_or_else(|p| p.into_inner()).retain(|p| p != pin);
        }
    }
}

/// Pins the BPF object `fd` at `path` (BPF_OBJ_PIN).
fn pin_fd(fd: std::os::fd::BorrowedFd<'_>, path: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let cpath = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a pin path holds a NUL byte"))?;
    // SAFETY: a valid fd and a NUL-terminated path that outlive the call.
    let rc = unsafe { libbpf_rs::libbpf_sys::bpf_obj_pin(fd.as_raw_fd(), cpath.as_ptr()) };
    if rc < 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    Ok(())
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
    if path.file_name().and_then(|n| n.to_str()).is_some_and(is_region_pin) {
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

/// Creates PIN_DIR root-only and clears what a killed instance left in it, before this instance pins
/// its regions there.
pub(crate) fn prepare_pin_dir() -> Result<()> {
    fs::create_dir_all(abi::PIN_DIR)
        .with_context(|| format!("cannot create {} (is bpffs mounted on /sys/fs/bpf?)", abi::PIN_DIR))?;
    // Root only (SCB.md §10): runtimes get the region map's fd with their registration reply.
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(abi::PIN_DIR, fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot make {} root-only", abi::PIN_DIR))?;
    }
    // A hint ring an older instance pinned would still be drained by its runtimes: remove it. The
    // regions a killed instance left pinned are retired (generation 0) so their workers detach.
    unpin_stale(Path::new(abi::PINNED_HINTS_PATH))?;
    unpin_stale_regions()
}

/// Unpins the regions this instance pinned (`pinned`), and PIN_DIR if nothing else is left in it.
pub(crate) fn unpin_all(pinned: &Mutex<Vec<PathBuf>>, errors: &mut Vec<String>) {
    let pinned = std::mem::take(&mut *pinned.lock().unwrap_or_else(|p| p.into_inner()));
    for path in pinned {
        if let Err(e) = fs::remove_file(&path) {
            if e.kind() != io::ErrorKind::NotFound {
                errors.push(format!("cannot unpin {}: {e}", path.display()));
            }
        }
    }
    // Only ours lives there; leave the directory if something else was put in it.
    let _ = fs::remove_dir(abi::PIN_DIR);
}

/// Retires and removes every region pin a killed instance left in PIN_DIR (one per uid it served).
fn unpin_stale_regions() -> Result<()> {
    let entries = match fs::read_dir(abi::PIN_DIR) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", abi::PIN_DIR)),
    };
    for entry in entries.flatten() {
        if entry.file_name().to_str().is_some_and(is_region_pin) {
            unpin_stale(&entry.path())?;
        }
    }
    Ok(())
}

/// `--replay-gate`: answers conformance cases with the BPF program's escalation gate. The program is
/// opened and loaded exactly as for scheduling (so this kernel's verifier accepts the same object),
/// but the scheduler is never attached; [`replay_cases`] runs the cases (BPF_PROG_TEST_RUN). Returns
/// how many were refused.
pub fn replay_gate(cases: &[GateCase], out: &mut dyn Write) -> Result<usize> {
    scx_utils::try_set_rlimit_infinity();
    let mut open_object = MaybeUninit::uninit();
    let builder = BpfSkelBuilder::default();
    let mut skel = scx_ops_open!(builder, &mut open_object, morpheus_ops, None::<libbpf_rs::libbpf_sys::bpf_object_open_opts>)?;
    let skel = scx_ops_load!(skel, morpheus_ops, uei)?;
    let regions = MapHandle::try_from(&skel.maps.regions).context("regions map handle")?;
    replay_cases(regions, &skel.progs.gate_replay, &skel.progs.escalation_replay, &skel.progs.hint_replay, cases, out)
}

/// The replay itself, for either backend's object once loaded (the sched_ext program, or the tracing
/// backend's: both link the same src/bpf/replay.bpf.c and worker layer): a region map is made for the
/// replay domain in `regions` as for any trust domain, and for each case it gets the case's region image
/// and `gate` (or `escalation`, or `hint`) runs once. Writes one answer line per case to `out`; a case whose layout
/// the map cannot hold gets an error line instead. Returns how many were refused.
pub(crate) fn replay_cases(
    regions: MapHandle,
    gate: &libbpf_rs::ProgramMut<'_>,
    escalation: &libbpf_rs::ProgramMut<'_>,
    hint: &libbpf_rs::ProgramMut<'_>,
    cases: &[GateCase],
    out: &mut dyn Write,
) -> Result<usize> {
    // The replay programs' verifier complexity, beside the ops' (scheduler/veristat/; names are
    // truncated to 15 characters by the kernel).
    for name in ["gate_replay", "escalation_repl", "hint_replay"] {
        if let Some(info) = libbpf_rs::query::ProgInfoIter::default()
            .filter(|info| info.name.to_string_lossy() == name)
            .max_by_key(|info| info.id)
        {
            log::info!("verified_insns: {name}={}", info.verified_insns);
        }
    }
    let maker = BpfRegions {
        outer: regions,
        pin_dir: None,
        pinned: Arc::default(),
    };
    // The program reaches the replay domain exactly as a live trust domain's region.
    let replay = maker.create(0, bpf_intf::MORPHEUS_REPLAY_DOMAIN, abi::MAX_WORKERS)?.region;
    let value_size = replay.len();
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
        // SAFETY: the mapping holds value_size bytes; no program runs while it is written (the
        // replays run synchronously below, the scheduler is not attached).
        unsafe { std::ptr::copy_nonoverlapping(value.as_ptr(), replay.header_ptr().cast::<u8>(), value_size) };
        match case.op {
            replay::CaseOp::Gate => {
                let mut ctx = bpf_intf::morpheus_gate_replay_ctx { runtime_ns: case.runtime_ns, slot: case.slot, _pad: 0 };
                let retval = run_syscall_prog(gate, &mut ctx)
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
                let retval = run_syscall_prog(escalation, &mut ctx)
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
            replay::CaseOp::Hint { now_ns } => {
                let mut ctx = bpf_intf::morpheus_hint_replay_ctx { runtime_ns: case.runtime_ns, now_ns, slot: case.slot, _pad: 0 };
                let retval = run_syscall_prog(hint, &mut ctx)
                    .with_context(|| format!("case {}: BPF_PROG_TEST_RUN of hint_replay failed", case.name))?;
                let decision = replay::hint_from_retval(retval).ok_or_else(|| {
                    anyhow!("case {}: hint_replay returned {}, which is no hint decision", case.name, retval as i32)
                })?;
                writeln!(out, "{}", replay::hint_answer_line(case, decision))?;
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
///
/// Lock order: the registry releases a slot holding the agent's slot table ([`Workers`]) and then
/// takes this; so whoever holds this never takes the table (callers look the holder up first).
struct Throttles {
    /// The BPF side's bookkeeping of each slot (its episode says whether a cap is still due).
    workers: MapHandle,
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
    /// Caps the cgroup of `holder`, the thread the agent's table names for `slot` (never a record's
    /// or an SCB's tid and pid); None: released since the BPF side decided, nobody to cap.
    fn apply(&mut self, slot: u32, holder: Option<&Assigned>) {
        if self.by_slot.contains_key(&slot) {
            // Already capped for this episode (a repeated record); one cap per slot.
            return;
        }
        let Some(Assigned { tid, thread, .. }) = holder else {
            log::debug!("throttle of slot {slot} not applied: the slot is free");
            return;
        };
        let tid = *tid;
        // The cgroup of the registered thread, read through its pinned descriptor (never by number).
        // As in the simulation backend: no cgroup to cap is a fallback alone (Counters::fallbacks); a
        // cap that failed to be written is also an effect error.
        let result = self
            .cgroup2_root
            .as_deref()
            .ok_or_else(|| anyhow!("cgroup v2 is not mounted"))
            .and_then(|root| cgroup::cgroup_dir_of(root, thread))
            .and_then(|dir| match self.caps.cap(&dir) {
                Ok(()) => Ok(dir),
                Err(e) => {
                    self.errors += 1;
                    Err(e)
                }
            });
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

    /// Whether the BPF side's episode of `slot` is open.
    fn episode_open(&self, slot: u32) -> Option<bool> {
        episode_open(&self.workers, slot)
    }

    /// Slots with a cap in force.
    fn capped(&self) -> Vec<u32> {
        self.by_slot.keys().copied().collect()
    }

    /// The BPF program decides when an episode ends (its UNTHROTTLE record); should that record be
    /// lost to a full ring, a cap whose episode the program shows closed, or whose slot changed
    /// hands (`holders`: the thread the agent's table names for each capped slot), is lifted here.
    fn lift_closed(&mut self, holders: &HashMap<u32, Option<u32>>) {
        let due: Vec<u32> = self
            .by_slot
            .iter()
            .filter(|(&slot, t)| {
                holders.get(&slot).is_some_and(|&holder| holder != Some(t.tid)) || self.episode_open(slot) == Some(false)
            })
            .map(|(&slot, _)| slot)
            .collect();
        for slot in due {
            self.lift(slot, "episode closed");
        }
    }
}

/// Whether the worker layer's episode of `slot` is open (`workers`: its `workers` map; its own
/// bookkeeping, which no runtime can write; the SCB's `escalated` only reports it). None if it cannot
/// be read.
pub(crate) fn episode_open(workers: &MapHandle, slot: u32) -> Option<bool> {
    let bytes = workers.lookup(&slot.to_ne_bytes(), MapFlags::ANY).ok()??;
    let ctx = read_record::<bpf_intf::worker_ctx>(&bytes)?;
    Some(ctx.esc.open != 0)
}

/// The worker layer's `worker_tids` bitmap (src/bpf/worker.bpf.c: one bit per tid below
/// MORPHEUS_TID_LIMIT) and its `worker_tid_summary` (one bit per block of MORPHEUS_TID_SUMMARY_BLOCK
/// tids), mapped read-write here: the agent is their only writer, and writes them only under `lock`
/// (TidLevels says in which order). A bit is set before the tid's `worker_slots` entry is written and
/// cleared only once the tid has no entry, so the BPF side, which takes a clear bit at either level for
/// "no worker" without looking in `worker_slots`, never misses a worker.
struct TidBits {
    tids: MapMapping,
    summary: MapMapping,
    lock: Mutex<()>,
}

/// Maps the BPF_F_MMAPABLE array map `map` of `words` u64 words read-write (`name` for errors).
fn map_words(map: &MapHandle, words: usize, name: &str) -> Result<MapMapping> {
    if map.value_size() as usize != size_of::<u64>() || map.max_entries() as usize != words {
        bail!("the BPF {name} map is not {words} u64 words");
    }
    let fd = map.as_fd().try_clone_to_owned().with_context(|| format!("cannot duplicate the {name} map fd"))?;
    let len = words * size_of::<u64>();
    // SAFETY: mapping a BPF_F_MMAPABLE array map of `len` bytes (the kernel rounds the mapping up to
    // whole pages); checked for MAP_FAILED below.
    let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error()).with_context(|| format!("cannot mmap the BPF {name} map"));
    }
    let base = NonNull::new(ptr.cast::<u8>()).expect("mmap returned NULL");
    Ok(MapMapping { base, len, _fd: fd })
}

impl MapMapping {
    /// The mapping as u64 words, each accessed atomically.
    fn words(&self) -> &[std::sync::atomic::AtomicU64] {
        // SAFETY: the mapping is `len` bytes, page-aligned (so u64-aligned), lives as long as self, and
        // every access to it here is atomic.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().cast::<std::sync::atomic::AtomicU64>(), self.len / size_of::<u64>()) }
    }
}

/// The two levels of the tid bitmap as words (`tids`: MORPHEUS_TID_WORDS, `summary`:
/// MORPHEUS_TID_SUMMARY_WORDS). The invariant the BPF side relies on: whenever a tid's bit in `tids` is
/// set, its block's bit in `summary` is set. `set` sets the block's bit first, then the tid's; `clear`
/// clears the tid's bit first, then the block's bit only if every bit of the block in `tids` is clear,
/// so no reader ever sees a tid's bit set under a clear block bit. The check and the clear are not one
/// atomic step: callers serialise every `set` and `clear` (TidBits' lock), so no bit of the block can
/// be set between them.
struct TidLevels<'a> {
    tids: &'a [std::sync::atomic::AtomicU64],
    summary: &'a [std::sync::atomic::AtomicU64],
}

impl TidLevels<'_> {
    /// The words (in `tids`) of `tid`'s block, its block's word in `summary` and the bits of the tid
    /// in its word and of the block in its summary word; None for a tid the bitmap does not cover (the
    /// BPF side looks those up in `worker_slots` directly).
    #[allow(clippy::type_complexity)]
    fn locate(&self, tid: u32) -> Option<(&[std::sync::atomic::AtomicU64], usize, &std::sync::atomic::AtomicU64, u64)> {
        if tid >= bpf_intf::MORPHEUS_TID_LIMIT {
            return None;
        }
        let block = (tid >> bpf_intf::MORPHEUS_TID_SUMMARY_SHIFT) as usize;
        let per_block = (bpf_intf::MORPHEUS_TID_SUMMARY_BLOCK / 64) as usize;
        let words = &self.tids[block * per_block..(block + 1) * per_block];
        Some((words, (tid / 64) as usize % per_block, &self.summary[block / 64], 1u64 << (block % 64)))
    }

    fn set(&self, tid: u32) {
        use std::sync::atomic::Ordering::SeqCst;
        if let Some((words, word, summary, block_bit)) = self.locate(tid) {
            summary.fetch_or(block_bit, SeqCst);
            words[word].fetch_or(1u64 << (tid % 64), SeqCst);
        }
    }

    fn clear(&self, tid: u32) {
        use std::sync::atomic::Ordering::SeqCst;
        if let Some((words, word, summary, block_bit)) = self.locate(tid) {
            words[word].fetch_and(!(1u64 << (tid % 64)), SeqCst);
            if words.iter().all(|w| w.load(SeqCst) == 0) {
                summary.fetch_and(!block_bit, SeqCst);
            }
        }
    }
}

impl TidBits {
    fn new(worker_tids: &MapHandle, worker_tid_summary: &MapHandle) -> Result<Self> {
        Ok(TidBits {
            tids: map_words(worker_tids, bpf_intf::MORPHEUS_TID_WORDS as usize, "worker_tids")?,
            summary: map_words(worker_tid_summary, bpf_intf::MORPHEUS_TID_SUMMARY_WORDS as usize, "worker_tid_summary")?,
            lock: Mutex::new(()),
        })
    }

    fn levels(&self) -> TidLevels<'_> {
        TidLevels { tids: self.tids.words(), summary: self.summary.words() }
    }

    fn set(&self, tid: u32) {
        let _serial = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.levels().set(tid);
    }

    fn clear(&self, tid: u32) {
        let _serial = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.levels().clear(tid);
    }
}

/// Who the worker layer takes for a worker: its `worker_slots` map (tid -> slot, domain, SCB index),
/// all the BPF side believes about who a worker is and where its SCB is, and the two-level tid bitmap
/// (`worker_tid_summary` over `worker_tids`, TidBits) that lets every other thread's context switch pass
/// with a load or two of hot memory. Written only under the
/// registry's table lock (the slot observer's calls).
pub(crate) struct LayerSlots {
    worker_slots: MapHandle,
    tids: TidBits,
}

impl LayerSlots {
    /// Over the worker layer's `worker_slots`, `worker_tids` and `worker_tid_summary` maps (either
    /// backend's object).
    pub(crate) fn new(
        worker_slots: &libbpf_rs::MapMut<'_>,
        worker_tids: &libbpf_rs::MapMut<'_>,
        worker_tid_summary: &libbpf_rs::MapMut<'_>,
    ) -> Result<Self> {
        Self::over(
            MapHandle::try_from(worker_slots).context("worker_slots map handle")?,
            &MapHandle::try_from(worker_tids).context("worker_tids map handle")?,
            &MapHandle::try_from(worker_tid_summary).context("worker_tid_summary map handle")?,
        )
    }

    fn over(worker_slots: MapHandle, worker_tids: &MapHandle, worker_tid_summary: &MapHandle) -> Result<Self> {
        Ok(LayerSlots { worker_slots, tids: TidBits::new(worker_tids, worker_tid_summary)? })
    }

    /// Records that thread `worker.tid` is the worker of `slot` (its domain and SCB index): its bit
    /// first, then its entry. Called after the thread's pidfd was opened and before its exit is
    /// watched (src/registry.rs), so the thread started before the entry's `registered_ns` (read
    /// here): the BPF side never takes a thread started after it for this worker (intf.h).
    pub(crate) fn record(&self, slot: u32, worker: &Assigned) -> Result<()> {
        let tid = worker.tid;
        let value = bpf_intf::morpheus_worker_slot {
            slot,
            domain: worker.domain.index,
            local: worker.local,
            _pad: 0,
            registered_ns: crate::monotonic_ns(),
        };
        // SAFETY: a plain C struct viewed as its bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts((&value as *const bpf_intf::morpheus_worker_slot).cast::<u8>(), size_of_val(&value))
        };
        self.tids.set(tid);
        self.worker_slots.update(&tid.to_ne_bytes(), bytes, MapFlags::ANY).with_context(|| {
            format!("cannot record tid {tid} -> slot {slot} (domain {}, SCB {}) in the BPF worker_slots map", value.domain, value.local)
        })
    }

    /// Removes thread `tid`'s entry, but only while it still names `slot`: the BPF side may have
    /// removed it already at the thread's exit, and a later registration of the same tid (another slot)
    /// may have written it since; its bit is cleared once the tid has no entry. Called under the
    /// registry's table lock, the only writer of entries, so between the lookup and the delete no
    /// registration can write the tid again; only the BPF side may delete it.
    pub(crate) fn forget(&self, slot: u32, tid: u32) {
        let (names_this_slot, absent) = match self.worker_slots.lookup(&tid.to_ne_bytes(), MapFlags::ANY) {
            Ok(Some(bytes)) => (read_record::<bpf_intf::morpheus_worker_slot>(&bytes).is_some_and(|v| v.slot == slot), false),
            Ok(None) => (false, true),
            Err(e) => {
                log::debug!("tid {tid}: cannot look up its BPF worker_slots entry: {e}");
                (true, false)
            }
        };
        if names_this_slot {
            if let Err(e) = self.worker_slots.delete(&tid.to_ne_bytes()) {
                log::debug!("tid {tid} was no longer in the BPF worker_slots map: {e}");
            }
        }
        if names_this_slot || absent {
            self.tids.clear(tid);
        }
    }
}

/// Keeps the BPF tid -> slot map in step with the registry.
///
/// `worker_slots` is keyed by the bare tid, so an entry must not outlive its thread: the registry
/// releases a slot the moment the thread's pidfd says it exited (src/registry.rs), and `released`
/// then deletes the entry, but only while it still names that slot. The BPF side may delete a tid's
/// entry itself when the task exits (`ops.exit_task`, the same rule from the kernel's side): the
/// agent's delete of an entry that is already gone is not an error, and an entry that a later
/// registration of the same tid wrote (another slot) is left alone.
struct KernelSlots {
    slots: LayerSlots,
    throttles: Arc<Mutex<Throttles>>,
}

impl SlotObserver for KernelSlots {
    fn assigned(&self, slot: u32, worker: &Assigned) -> Result<()> {
        self.slots.record(slot, worker)
    }

    fn released(&self, slot: u32, worker: &Assigned) {
        self.slots.forget(slot, worker.tid);
        self.throttles.lock().unwrap().lift(slot, "slot released");
    }
}

/// What the ring buffer callbacks hand to `tick`.
#[derive(Default)]
pub(crate) struct Drained {
    pub(crate) hints: Vec<abi::Hint>,
    /// The overruns of the detection records (first requests since an acknowledgement), ns.
    pub(crate) detections: Vec<u64>,
    pub(crate) events: Vec<abi::EscalationEvent>,
}

/// The consumer of the worker layer's three rings (`hints`, `detections`, `escalation_events`): the
/// callbacks collect the records in the returned Drained until the agent takes them.
pub(crate) fn layer_rings(
    hints: &MapHandle,
    detections: &MapHandle,
    events: &MapHandle,
) -> Result<(RingBuffer<'static>, Rc<RefCell<Drained>>)> {
    let drained = Rc::new(RefCell::new(Drained::default()));
    let mut rb = RingBufferBuilder::new();
    let sink = Rc::clone(&drained);
    rb.add(hints, move |data: &[u8]| {
        if let Some(h) = read_record::<abi::Hint>(data) {
            sink.borrow_mut().hints.push(h);
        }
        0
    })?;
    let sink = Rc::clone(&drained);
    rb.add(detections, move |data: &[u8]| {
        if let Some(d) = read_record::<bpf_intf::morpheus_detection>(data) {
            sink.borrow_mut().detections.push(d.overrun_ns);
        }
        0
    })?;
    let sink = Rc::clone(&drained);
    rb.add(events, move |data: &[u8]| {
        if let Some(e) = read_record::<abi::EscalationEvent>(data) {
            sink.borrow_mut().events.push(e);
        }
        0
    })?;
    Ok((rb.build().context("cannot set up the ring buffer consumer")?, drained))
}

/// The worker layer's counters (its `counters` array) by name, for the stats' `backend_counters`.
pub(crate) const LAYER_COUNTERS: [(&str, bpf_intf::morpheus_counter); 18] = [
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
    ("demoted_enqueues", bpf_intf::morpheus_counter_MORPHEUS_CNT_DEMOTED_ENQUEUES),
];

/// The base policy's debug trace (main.bpf.c's `base_trace`, filled with `--debug-base-trace`) by name.
const BASE_TRACE: [(&str, bpf_intf::morpheus_base_trace); bpf_intf::morpheus_base_trace_MORPHEUS_NR_BASE_TRACE as usize] = [
    ("wake_enqueues", bpf_intf::morpheus_base_trace_MORPHEUS_BT_WAKE_ENQUEUES),
    ("requeues", bpf_intf::morpheus_base_trace_MORPHEUS_BT_REQUEUES),
    ("direct", bpf_intf::morpheus_base_trace_MORPHEUS_BT_DIRECT),
    ("wake_wait_us", bpf_intf::morpheus_base_trace_MORPHEUS_BT_WAKE_WAIT_US),
    ("requeue_wait_us", bpf_intf::morpheus_base_trace_MORPHEUS_BT_REQUEUE_WAIT_US),
    ("direct_wait_us", bpf_intf::morpheus_base_trace_MORPHEUS_BT_DIRECT_WAIT_US),
    ("wake_wait_max_us", bpf_intf::morpheus_base_trace_MORPHEUS_BT_WAKE_WAIT_MAX_US),
    ("requeue_wait_max_us", bpf_intf::morpheus_base_trace_MORPHEUS_BT_REQUEUE_WAIT_MAX_US),
    ("wake_wait_ge1ms", bpf_intf::morpheus_base_trace_MORPHEUS_BT_WAKE_WAIT_GE1MS),
    ("wake_wait_ge2ms", bpf_intf::morpheus_base_trace_MORPHEUS_BT_WAKE_WAIT_GE2MS),
    ("wake_wait_ge4ms", bpf_intf::morpheus_base_trace_MORPHEUS_BT_WAKE_WAIT_GE4MS),
    ("wake_wait_ge8ms", bpf_intf::morpheus_base_trace_MORPHEUS_BT_WAKE_WAIT_GE8MS),
    ("requeue_wait_ge2ms", bpf_intf::morpheus_base_trace_MORPHEUS_BT_REQUEUE_WAIT_GE2MS),
    ("requeue_wait_ge8ms", bpf_intf::morpheus_base_trace_MORPHEUS_BT_REQUEUE_WAIT_GE8MS),
    ("wake_behind_us", bpf_intf::morpheus_base_trace_MORPHEUS_BT_WAKE_BEHIND_US),
    ("wake_ahead_us", bpf_intf::morpheus_base_trace_MORPHEUS_BT_WAKE_AHEAD_US),
    ("requeue_behind_us", bpf_intf::morpheus_base_trace_MORPHEUS_BT_REQUEUE_BEHIND_US),
    ("requeue_ahead_us", bpf_intf::morpheus_base_trace_MORPHEUS_BT_REQUEUE_AHEAD_US),
    ("wake_exec_us", bpf_intf::morpheus_base_trace_MORPHEUS_BT_WAKE_EXEC_US),
    ("requeue_exec_us", bpf_intf::morpheus_base_trace_MORPHEUS_BT_REQUEUE_EXEC_US),
    ("runs_preempted", bpf_intf::morpheus_base_trace_MORPHEUS_BT_RUNS_PREEMPTED),
    ("runs_slept", bpf_intf::morpheus_base_trace_MORPHEUS_BT_RUNS_SLEPT),
    ("run_us", bpf_intf::morpheus_base_trace_MORPHEUS_BT_RUN_US),
    ("wake_spared", bpf_intf::morpheus_base_trace_MORPHEUS_BT_WAKE_SPARED),
    ("wake_spared_ge1ms", bpf_intf::morpheus_base_trace_MORPHEUS_BT_WAKE_SPARED_GE1MS),
];

/// The reaction times the agent measures from the worker layer's records: overrun -> hint (the first
/// request since an acknowledgement: the worker layer's detection records, which it decides at the
/// hint, so the figure does not depend on the agent's tick) and grace expiry -> escalation (the first
/// record of an episode).
#[derive(Default)]
pub(crate) struct RecordTimes {
    /// Per slot: last_ack_seq when its last escalation was seen, to find the first of an episode.
    event_ack: HashMap<u32, u64>,
    pub(crate) reactions: Reactions,
}

impl RecordTimes {
    /// A detection record's overrun (ns).
    pub(crate) fn detection(&mut self, overrun_ns: u64) {
        self.reactions.hint.push(overrun_ns);
    }

    /// An escalation record; `ack`: the slot's last_ack_seq now (0 for a free slot).
    pub(crate) fn event(&mut self, ev: &abi::EscalationEvent, ack: u64) {
        let slot = ev.slot;
        if self.event_ack.get(&slot) != Some(&ack) {
            self.reactions.escalation.push(ev.overrun_ns);
        }
        self.event_ack.insert(slot, ack);
    }
}

pub(crate) fn read_record<T: Copy>(data: &[u8]) -> Option<T> {
    // SAFETY: T is a plain C record; read_unaligned copes with any alignment.
    (data.len() >= size_of::<T>()).then(|| unsafe { std::ptr::read_unaligned(data.as_ptr().cast::<T>()) })
}

/// Refuses a configuration the worker layer cannot hold (`what`: the backend, named in the message).
pub(crate) fn check_layer_config(config: &Config, what: &str) -> Result<()> {
    if config.max_workers > abi::MAX_WORKERS {
        bail!("--max-workers {}: the {what} backend tracks at most {} workers (MAX_WORKERS)", config.max_workers, abi::MAX_WORKERS);
    }
    if config.max_workers_per_uid > abi::MAX_WORKERS {
        bail!(
            "--max-workers-per-uid {}: a region map of the {what} backend holds at most {} SCBs (MAX_WORKERS)",
            config.max_workers_per_uid,
            abi::MAX_WORKERS
        );
    }
    if let Some(path) = &config.region_path {
        if path != Path::new(abi::PINNED_REGION_PATH) {
            bail!("--region {}: the {what} backend always publishes its region at {}", path.display(), abi::PINNED_REGION_PATH);
        }
    }
    Ok(())
}

/// Sets the worker layer's load-time data in either object's .rodata (their generated types differ;
/// the layer's fields are the same). The configuration the live paths decide with (S4): load-time data
/// only the agent writes. The header publishes the same values for runtimes; the BPF side never reads
/// them back from it.
macro_rules! set_layer_rodata {
    ($rodata:expr, $config:expr) => {{
        let rodata = $rodata;
        let config: &$crate::backend::Config = $config;
        rodata.check_interval_ns = $crate::kernel::check_interval_ns(config);
        rodata.nr_possible_cpus = *scx_utils::NR_CPU_IDS as u32;
        rodata.throttle_max_ns = config.throttle_max_ns;
        rodata.cfg_scheduler_mode = config.mode.raw();
        rodata.cfg_escalation_policy = config.policy.raw();
        rodata.cfg_slice_ns = config.slice_ns;
        rodata.cfg_grace_ns = config.grace_ns;
        rodata.cfg_hint_min_interval_ns = config.hint_min_interval_ns;
        rodata.cfg_scb_count = config.max_workers;
    }};
}
pub(crate) use set_layer_rodata;

/// The worker layer's variables in a loaded object's mmapped .bss (either object's: the generated types
/// differ, the layer's fields are the same): counters BPF updates atomically, the timer's flags it
/// chose at start, and the pressure level only the agent writes. Made by [`layer_bss`].
pub(crate) struct LayerBss {
    counters: NonNull<[u64]>,
    gate_verdicts: NonNull<[u64]>,
    escalations_by_policy: NonNull<[u64]>,
    lifts_by_step: NonNull<[u64]>,
    pressure_level: NonNull<u32>,
    timer_start_flags: NonNull<u64>,
}

impl LayerBss {
    /// # Safety
    /// The arguments are the worker layer's variables in a skeleton's mmapped .bss, which must outlive
    /// the returned value (the backend holds both).
    pub(crate) unsafe fn new(
        counters: &mut [u64],
        gate_verdicts: &mut [u64],
        escalations_by_policy: &mut [u64],
        lifts_by_step: &mut [u64],
        pressure_level: &mut u32,
        timer_start_flags: &mut u64,
    ) -> Self {
        LayerBss {
            counters: NonNull::from(counters),
            gate_verdicts: NonNull::from(gate_verdicts),
            escalations_by_policy: NonNull::from(escalations_by_policy),
            lifts_by_step: NonNull::from(lifts_by_step),
            pressure_level: NonNull::from(pressure_level),
            timer_start_flags: NonNull::from(timer_start_flags),
        }
    }

    /// Element `i` of one of the arrays (0 past its end).
    fn at(array: NonNull<[u64]>, i: usize) -> u64 {
        if i >= array.len() {
            return 0;
        }
        // SAFETY: in bounds of a live .bss mapping (`new`); a u64 BPF updates atomically.
        unsafe { std::ptr::read_volatile(array.cast::<u64>().as_ptr().add(i)) }
    }
}

/// The worker layer's variables of a loaded skeleton (`skel.maps.bss_data`), as a [`LayerBss`].
macro_rules! layer_bss {
    ($skel:expr) => {{
        let bss = $skel.maps.bss_data.as_mut().expect("the BPF program has .bss");
        // SAFETY: the skeleton's .bss mapping lives as long as the skeleton, which the backend holds
        // beside the value made here.
        unsafe {
            $crate::kernel::LayerBss::new(
                &mut bss.counters,
                &mut bss.gate_verdicts,
                &mut bss.escalations_by_policy,
                &mut bss.lifts_by_step,
                &mut bss.pressure_level,
                &mut bss.timer_start_flags,
            )
        }
    }};
}
pub(crate) use layer_bss;

/// The agent's side of the worker layer, the same for both of its hosts (the sched_ext program and
/// the tracing programs): the regions, the agent's ticks and waits, the records' rings, the reaction
/// times and the layer's counters. Each backend adds what its host needs (escalation records, its
/// effects).
pub(crate) struct LayerAgent {
    /// The agent's slot table (whose SCB a record's slot means).
    pub(crate) table: Arc<Workers>,
    regions: Arc<BpfRegions>,
    /// Region pins (one per trust domain), removed at shutdown.
    pinned: Arc<Mutex<Vec<PathBuf>>>,
    rings: RingBuffer<'static>,
    drained: Rc<RefCell<Drained>>,
    observer: Arc<dyn SlotObserver>,
    bss: LayerBss,
    tick_interval: Duration,
    /// The host's shortest tick while workers are registered (AGENT_TICK for sched_ext).
    min_tick: Duration,
    hint_records: u64,
    /// Overrun -> hint (first hint after a yield point), and grace expiry -> escalation.
    times: RecordTimes,
}

impl LayerAgent {
    /// Once the host's programs are attached (so a start that fails leaves the paths as they were):
    /// the rings' consumer, PIN_DIR cleared of what a killed instance left, and the regions' maker.
    /// `min_tick`: the host's shortest tick while workers are registered (`--tick-us` may ask longer).
    pub(crate) fn new(
        config: &Config,
        table: Arc<Workers>,
        maps: [&libbpf_rs::MapMut<'_>; 4],
        observer: Arc<dyn SlotObserver>,
        bss: LayerBss,
        min_tick: Duration,
    ) -> Result<Self> {
        let [hints, detections, events, regions] = maps;
        let hints = MapHandle::try_from(hints).context("hints ring handle")?;
        let detections = MapHandle::try_from(detections).context("detection ring handle")?;
        let events = MapHandle::try_from(events).context("escalation ring handle")?;
        let (rings, drained) = layer_rings(&hints, &detections, &events)?;
        prepare_pin_dir()?;
        let pinned = Arc::new(Mutex::new(Vec::new()));
        let regions = Arc::new(BpfRegions {
            outer: MapHandle::try_from(regions).context("regions map handle")?,
            pin_dir: Some(PathBuf::from(abi::PIN_DIR)),
            pinned: Arc::clone(&pinned),
        });
        Ok(LayerAgent {
            table,
            regions,
            pinned,
            rings,
            drained,
            observer,
            bss,
            tick_interval: config.tick,
            min_tick,
            hint_records: 0,
            times: RecordTimes::default(),
        })
    }

    /// What the host logs at start: the check timer's resolution and placement, and where regions go.
    pub(crate) fn describe(&self, config: &Config) -> String {
        // SAFETY: a u64 of the live .bss mapping, written once by the timer's start.
        let flags = unsafe { std::ptr::read_volatile(self.bss.timer_start_flags.as_ptr()) };
        format!(
            "overrun check at each slice end, then every {} µs, on a BPF timer {}; one region map per uid, pinned in {}",
            check_interval_ns(config) / 1000,
            if flags != 0 { "pinned to the CPU that arms it" } else { "the kernel places (no BPF_F_TIMER_CPU_PIN here)" },
            abi::PIN_DIR
        )
    }

    pub(crate) fn region_maker(&self) -> Option<Arc<dyn RegionMaker>> {
        Some(Arc::clone(&self.regions) as Arc<dyn RegionMaker>)
    }

    pub(crate) fn slot_observer(&self) -> Option<Arc<dyn SlotObserver>> {
        Some(Arc::clone(&self.observer))
    }

    pub(crate) fn tick_interval(&self) -> Duration {
        self.tick_interval.max(self.min_tick)
    }

    pub(crate) fn idle_tick_interval(&self) -> Duration {
        self.tick_interval.max(AGENT_IDLE_TICK)
    }

    /// Waits for a record that wakes the agent, or `timeout`.
    pub(crate) fn wait(&mut self, timeout: Duration) -> Result<()> {
        // epoll's resolution is a millisecond: round up, or a sub-millisecond wait would spin.
        let ms = timeout.as_micros().div_ceil(1000) as u64;
        let ret = self.rings.poll_raw(Duration::from_millis(ms));
        if ret < 0 && ret != -libc::EINTR {
            return Err(io::Error::from_raw_os_error(-ret)).context("polling the BPF ring buffers");
        }
        Ok(())
    }

    /// Stores the pressure level the BPF side copies into each SCB (it never reads the header's).
    pub(crate) fn set_pressure(&self, level: u32) {
        // SAFETY: an aligned u32 of the live .bss mapping that BPF only loads.
        unsafe { std::ptr::write_volatile(self.bss.pressure_level.as_ptr(), level) };
    }

    /// The worker layer's counter `idx`.
    pub(crate) fn counter(&self, idx: bpf_intf::morpheus_counter) -> u64 {
        LayerBss::at(self.bss.counters, idx as usize)
    }

    /// The acknowledgement count of the worker in the agent's slot `slot` (for reaction times only),
    /// read from the SCB the agent's table names; None for a free slot.
    pub(crate) fn last_ack_seq(&self, slot: u32) -> Option<u64> {
        let w = self.table.get(slot)?;
        Some(w.domain.region.scb(w.local).last_ack_seq().load(std::sync::atomic::Ordering::Acquire))
    }

    /// Consumes the rings: hint records are counted and detection records timed here; the escalation
    /// records are the host's to act on.
    pub(crate) fn drain(&mut self) -> Result<Vec<abi::EscalationEvent>> {
        self.rings.consume().context("consuming the BPF ring buffers")?;
        let drained = std::mem::take(&mut *self.drained.borrow_mut());
        self.hint_records += drained.hints.len() as u64;
        for overrun_ns in drained.detections {
            self.times.detection(overrun_ns);
        }
        Ok(drained.events)
    }

    /// Times escalation record `ev` (the first of an episode measures grace expiry -> escalation).
    pub(crate) fn time_event(&mut self, ev: &abi::EscalationEvent) {
        let ack = self.last_ack_seq(ev.slot).unwrap_or(0);
        self.times.event(ev, ack);
    }

    pub(crate) fn reactions(&self) -> Reactions {
        self.times.reactions.clone()
    }

    /// The layer's part of the stats' counters: timer runs, hints, gate verdicts, escalations by policy.
    pub(crate) fn fill_counters(&self, c: &mut Counters) {
        c.ticks = self.counter(bpf_intf::morpheus_counter_MORPHEUS_CNT_TIMER_RUNS);
        c.hints_emitted = self.counter(bpf_intf::morpheus_counter_MORPHEUS_CNT_HINTS_EMITTED) + self.counter(bpf_intf::morpheus_counter_MORPHEUS_CNT_HINTS_RING_FULL);
        c.hints_dropped = self.counter(bpf_intf::morpheus_counter_MORPHEUS_CNT_HINTS_RATE_LIMITED) + self.counter(bpf_intf::morpheus_counter_MORPHEUS_CNT_HINTS_RING_FULL);
        for (i, slot) in c.gate.iter_mut().enumerate() {
            *slot = LayerBss::at(self.bss.gate_verdicts, i);
        }
        for (i, slot) in c.escalations_by_policy.iter_mut().enumerate().take(bpf_intf::MORPHEUS_NR_POLICIES as usize) {
            *slot = LayerBss::at(self.bss.escalations_by_policy, i);
        }
    }

    /// Escalations by policy, as the BPF side counted them.
    pub(crate) fn escalations_by_policy(&self) -> Vec<u64> {
        (0..bpf_intf::MORPHEUS_NR_POLICIES as usize).map(|i| LayerBss::at(self.bss.escalations_by_policy, i)).collect()
    }

    /// The stats' `backend_counters`: the layer's counters by name, its lifts by state machine step,
    /// and the hint records drained.
    pub(crate) fn backend_counters(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = LAYER_COUNTERS.iter().map(|&(name, idx)| (name.to_owned(), self.counter(idx))).collect();
        for step in morpheus_policy_ffi::EscalationStep::ALL {
            if let Some(why) = step.lift_reason() {
                out.push((format!("lifts_{why}"), LayerBss::at(self.bss.lifts_by_step, step as usize)));
            }
        }
        out.push(("hint_records".into(), self.hint_records));
        out
    }

    /// At shutdown, once the host's programs are detached: unpins the regions (errors into `errors`) and
    /// logs the layer's counters and reaction times.
    pub(crate) fn finish(&self, errors: &mut Vec<String>) {
        unpin_all(&self.pinned, errors);
        log::info!(
            "BPF counters: {}",
            self.backend_counters().iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
        );
        log::info!("reaction overrun->hint: {}", self.times.reactions.hint.summary());
        log::info!("reaction grace expiry->escalation: {}", self.times.reactions.escalation.summary());
    }
}

/// The [`Backend`] methods both hosts of the worker layer answer alike, from their `layer`
/// ([`LayerAgent`]), expanded in each one's `impl Backend`. Both report `KERNEL` in the header: the
/// region is the same pinned BPF_F_MMAPABLE map and the hints come from the same worker layer, so a
/// runtime cannot tell them apart (the field is informative, spec/SCB.md §2).
macro_rules! layer_backend_methods {
    () => {
        fn kind(&self) -> morpheus_abi::Backend {
            morpheus_abi::Backend::Kernel
        }

        fn region_maker(&self) -> Option<std::sync::Arc<dyn $crate::domains::RegionMaker>> {
            self.layer.region_maker()
        }

        fn slot_observer(&self) -> Option<std::sync::Arc<dyn $crate::backend::SlotObserver>> {
            self.layer.slot_observer()
        }

        fn tick_interval(&self) -> std::time::Duration {
            self.layer.tick_interval()
        }

        fn idle_tick_interval(&self) -> std::time::Duration {
            self.layer.idle_tick_interval()
        }

        fn wait(&mut self, timeout: std::time::Duration) -> anyhow::Result<()> {
            self.layer.wait(timeout)
        }

        fn reactions(&self) -> $crate::stats::Reactions {
            self.layer.reactions()
        }
    };
}
pub(crate) use layer_backend_methods;

pub struct KernelBackend {
    skel: BpfSkel<'static>,
    link: Option<Link>,
    layer: LayerAgent,
    throttles: Arc<Mutex<Throttles>>,
    kick_records: u64,
    shut_down: bool,
    /// `--debug-base-trace`: the BPF program fills `base_trace`, reported in backend_counters.
    base_trace: bool,
}

impl KernelBackend {
    pub fn open(config: &Config, table: Arc<Workers>) -> Result<Self> {
        check_layer_config(config, "kernel")?;
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
        set_layer_rodata!(&mut *rodata, config);
        rodata.nr_online_cpus = online_cpus();
        // The base policy's ordering (the sched_ext ops only; the worker layer does not read it).
        rodata.base_order = match config.base_order {
            crate::backend::BaseOrder::Deadline => bpf_intf::morpheus_base_order_MORPHEUS_BASE_ORDER_DEADLINE,
            crate::backend::BaseOrder::Cputime => bpf_intf::morpheus_base_order_MORPHEUS_BASE_ORDER_CPUTIME,
            crate::backend::BaseOrder::Lag => bpf_intf::morpheus_base_order_MORPHEUS_BASE_ORDER_LAG,
            crate::backend::BaseOrder::Burst => bpf_intf::morpheus_base_order_MORPHEUS_BASE_ORDER_BURST,
            crate::backend::BaseOrder::Spare => bpf_intf::morpheus_base_order_MORPHEUS_BASE_ORDER_SPARE,
            crate::backend::BaseOrder::Recent => bpf_intf::morpheus_base_order_MORPHEUS_BASE_ORDER_RECENT,
            crate::backend::BaseOrder::Arrival => bpf_intf::morpheus_base_order_MORPHEUS_BASE_ORDER_ARRIVAL,
        };
        rodata.wake_margin_ns = config.wake_margin_ns;

        rodata.base_trace_on = config.debug_base_trace;

        let skel = scx_ops_load!(skel, morpheus_ops, uei)?;
        let mut skel: BpfSkel<'static> = skel;

        let throttles = Arc::new(Mutex::new(Throttles {
            workers: MapHandle::try_from(&skel.maps.workers).context("workers map handle")?,
            by_slot: HashMap::new(),
            cgroup2_root: cgroup::cgroup2_root(),
            caps: Caps::with_journal(config.journal.clone()),
            applied: 0,
            lifted: 0,
            fallbacks: 0,
            errors: 0,
        }));
        let observer = Arc::new(KernelSlots {
            slots: LayerSlots::new(&skel.maps.worker_slots, &skel.maps.worker_tids, &skel.maps.worker_tid_summary)?,
            throttles: Arc::clone(&throttles),
        });

        let link = scx_ops_attach!(skel, morpheus_ops)?;
        log_verifier_complexity();

        let bss = layer_bss!(skel);
        let maps = [&skel.maps.hints, &skel.maps.detections, &skel.maps.escalation_events, &skel.maps.regions];
        let layer = LayerAgent::new(config, table, maps, observer, bss, AGENT_TICK)?;
        log::info!("sched_ext scheduler attached ({})", layer.describe(config));

        Ok(KernelBackend { skel, link: Some(link), layer, throttles, kick_records: 0, shut_down: false, base_trace: config.debug_base_trace })
    }

    fn drain(&mut self) -> Result<()> {
        for ev in self.layer.drain()? {
            let slot = ev.slot;
            self.layer.time_event(&ev);
            match abi::EscalationAction::try_from(ev.action) {
                Ok(abi::EscalationAction::Kick) => {
                    self.kick_records += 1;
                    log::debug!("kick: slot {slot} (tid {}) {} µs past slice + grace", ev.tid, ev.overrun_ns / 1000);
                }
                Ok(abi::EscalationAction::Throttle) => {
                    let holder = self.layer.table.get(slot);
                    self.throttles.lock().unwrap().apply(slot, holder.as_ref());
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
    layer_backend_methods!();

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
        self.layer.set_pressure(pressure_level);
        self.drain()?;
        let capped = self.throttles.lock().unwrap().capped();
        let holders: HashMap<u32, Option<u32>> = capped.into_iter().map(|slot| (slot, self.layer.table.get(slot).map(|w| w.tid))).collect();
        self.throttles.lock().unwrap().lift_closed(&holders);
        Ok(())
    }

    fn counters(&self) -> Counters {
        let mut c = Counters::default();
        self.layer.fill_counters(&mut c);
        let t = self.throttles.lock().unwrap();
        c.actions[abi::EscalationAction::Kick.raw() as usize] = self.layer.counter(bpf_intf::morpheus_counter_MORPHEUS_CNT_KICKS);
        c.actions[abi::EscalationAction::Throttle.raw() as usize] = t.applied;
        c.actions[abi::EscalationAction::Unthrottle.raw() as usize] = t.lifted;
        c.fallbacks = t.fallbacks;
        c.effect_errors = t.errors;
        c.spared_in_critical = self.layer.counter(bpf_intf::morpheus_counter_MORPHEUS_CNT_KICKS_SPARED_CRITICAL)
            + self.layer.counter(bpf_intf::morpheus_counter_MORPHEUS_CNT_HOLDS_SPARED_CRITICAL);
        c.held_in_critical = self.layer.counter(bpf_intf::morpheus_counter_MORPHEUS_CNT_HELD_IN_CRITICAL);
        c
    }

    fn backend_counters(&self) -> Vec<(String, u64)> {
        let mut out = self.layer.backend_counters();
        out.push(("kick_records".into(), self.kick_records));
        if self.base_trace {
            let bss = self.skel.maps.bss_data.as_deref().expect("the BPF program has .bss");
            for &(name, idx) in BASE_TRACE.iter() {
                // SAFETY: a u64 of the live .bss mapping, which BPF updates atomically.
                let v = unsafe { std::ptr::read_volatile(&bss.base_trace[idx as usize]) };
                out.push((format!("base_trace_{name}"), v));
            }
            // The base order's clock (a debug figure: a plain read of a value BPF updates with WRITE_ONCE).
            // SAFETY: a u64 of the live .bss mapping.
            let vtime_now = unsafe { std::ptr::read_volatile(&bss.vtime_now) };
            out.push(("base_trace_vtime_now_us".into(), vtime_now / 1000));
        }
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
        // Detach: the kernel switches every task back to its default scheduler. (The agent retires
        // every domain's region.)
        let _ = self.link.take();
        let mut errors = Vec::new();
        self.layer.finish(&mut errors);
        let c = self.counters();
        log::info!(
            "gate verdicts: {}; escalations by policy: {:?}",
            c.gate.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(","),
            self.layer.escalations_by_policy()
        );
        log::info!("kick records: {}", self.kick_records);

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domains::Domains;
    use crate::region::RegionParams;
    use morpheus::testing::BpfMount;

    const NEEDS: &str = "needs root and bpf(2) (bpffs mount, map creation)";
    const LIMITS: crate::domains::DomainLimits = crate::domains::DomainLimits { total: 2, per_user: 2 };

    /// What a runtime that finds the pin gets: no file, or the SDK's verdict on the region.
    fn what_a_reader_finds(path: &Path) -> std::result::Result<(), String> {
        if !path.exists() {
            return Ok(());
        }
        match morpheus::Region::open(path) {
            Ok(_) => Ok(()),
            Err(e) if e.code() == abi::ErrorCode::NotReady => Ok(()),
            Err(e) => Err(format!("{:?}: {e}", e.code())),
        }
    }

    /// Wraps the real maker and, between `create` and the header's publication, looks at the pin
    /// path as a runtime discovering PINNED_REGION_PATH would (spec/SCB.md §1.3, review A7).
    struct Observed {
        inner: BpfRegions,
        pin: PathBuf,
        seen_before_publish: Mutex<Option<std::result::Result<(), String>>>,
    }

    impl RegionMaker for Observed {
        fn create(&self, uid: u32, index: u32, scb_count: u32) -> Result<NewRegion> {
            let new = self.inner.create(uid, index, scb_count)?;
            *self.seen_before_publish.lock().unwrap() = Some(what_a_reader_finds(&self.pin));
            Ok(new)
        }
        fn name(&self, uid: u32, new: &NewRegion) -> Result<Option<PathBuf>> {
            self.inner.name(uid, new)
        }
        fn release(&self, uid: u32, index: u32, pin: Option<&Path>) {
            self.inner.release(uid, index, pin)
        }
    }

    /// Whether `tid`'s bit is set in the worker_tids map `map` (read through the syscall, as a second
    /// reader beside the agent's mapping).
    fn tid_bit(map: &MapHandle, tid: u32) -> bool {
        let word = tid / 64;
        let bytes = map.lookup(&word.to_ne_bytes(), MapFlags::ANY).unwrap().expect("an array has every word");
        u64::from_ne_bytes(bytes[..8].try_into().unwrap()) & (1 << (tid % 64)) != 0
    }

    /// Whether the block of `tid` has its bit set in the worker_tid_summary map `map` (read through the
    /// syscall).
    fn block_bit(map: &MapHandle, tid: u32) -> bool {
        let block = tid >> bpf_intf::MORPHEUS_TID_SUMMARY_SHIFT;
        let bytes = map.lookup(&(block / 64).to_ne_bytes(), MapFlags::ANY).unwrap().expect("an array has every word");
        u64::from_ne_bytes(bytes[..8].try_into().unwrap()) & (1 << (block % 64)) != 0
    }

    /// An mmapable array map of `words` u64 words named `name` (as the worker layer declares its tid
    /// bitmaps).
    fn word_array(name: &str, words: u32) -> MapHandle {
        MapHandle::create(
            MapType::Array,
            Some(name),
            4,
            8,
            words,
            &libbpf_rs::libbpf_sys::bpf_map_create_opts {
                sz: size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
                map_flags: libbpf_rs::libbpf_sys::BPF_F_MMAPABLE,
                ..Default::default()
            },
        )
        .expect(NEEDS)
    }

    /// The two levels' invariant (TidLevels), checked after every step of a fixed pseudo-random walk of
    /// sets and clears over tids that share words and blocks, at both ends of the bitmap: whenever a
    /// tid's bit is set its block's bit is set (the BPF side never misses a worker), and a block's bit
    /// is clear once no tid of the block is set (the summary does not fill up with stale blocks).
    #[test]
    fn a_block_bit_is_set_exactly_while_a_tid_of_its_block_is() {
        use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
        let tids: Vec<AtomicU64> = (0..bpf_intf::MORPHEUS_TID_WORDS).map(|_| AtomicU64::new(0)).collect();
        let summary: Vec<AtomicU64> = (0..bpf_intf::MORPHEUS_TID_SUMMARY_WORDS).map(|_| AtomicU64::new(0)).collect();
        let levels = TidLevels { tids: &tids, summary: &summary };
        let block = bpf_intf::MORPHEUS_TID_SUMMARY_BLOCK;
        let last = bpf_intf::MORPHEUS_TID_LIMIT - 1;
        // Candidates: the first and last tids of a block and its neighbours, two in one word, the ends.
        let pool = [0, 1, 63, 64, block - 1, block, block + 1, 5 * block + 17, 5 * block + 18, last - block, last - 1, last];
        let bit = |words: &[AtomicU64], i: u32| words[(i / 64) as usize].load(SeqCst) & (1 << (i % 64)) != 0;
        let mut set = std::collections::BTreeSet::new();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..4000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let tid = pool[(seed % pool.len() as u64) as usize];
            if seed & (1 << 40) != 0 {
                levels.set(tid);
                set.insert(tid);
            } else {
                levels.clear(tid);
                set.remove(&tid);
            }
            for &t in &pool {
                let b = t >> bpf_intf::MORPHEUS_TID_SUMMARY_SHIFT;
                assert_eq!(bit(&tids, t), set.contains(&t), "step {step}: tid {t}'s own bit");
                let live = set.iter().any(|&u| u >> bpf_intf::MORPHEUS_TID_SUMMARY_SHIFT == b);
                assert_eq!(bit(&summary, b), live, "step {step}: block {b} of tid {t} (tids set: {set:?})");
            }
        }
        // A tid past the bitmap touches neither level.
        let snapshot = |words: &[AtomicU64]| words.iter().map(|w| w.load(SeqCst)).collect::<Vec<_>>();
        let before = (snapshot(&tids), snapshot(&summary));
        levels.set(bpf_intf::MORPHEUS_TID_LIMIT);
        assert_eq!((snapshot(&tids), snapshot(&summary)), before, "a tid past the bitmap was set in it");
        levels.clear(bpf_intf::MORPHEUS_TID_LIMIT);
        assert_eq!((snapshot(&tids), snapshot(&summary)), before, "a tid past the bitmap was cleared in it");
    }

    /// The worker layer takes a clear bit in worker_tids for "no worker" without looking in
    /// worker_slots, so a bit must be set while the tid has an entry and may be cleared only once it has
    /// none: kept across the release of a slot whose tid another registration holds now, cleared when
    /// the entry named the released slot or was removed already (the BPF side at the thread's exit).
    #[test]
    #[ignore = "needs root and bpf(2): run with --ignored (//scheduler:region_pin_test does)"]
    fn a_tid_bit_is_set_while_its_worker_slots_entry_exists() {
        let domains = crate::domains::Domains::new(RegionParams::enforced_with_defaults(4, abi::Backend::Kernel), 7, None, LIMITS);
        let domain = domains.for_uid(40003, 40003).unwrap();
        let worker_slots = MapHandle::create(
            MapType::Hash,
            Some("worker_slots"),
            4,
            size_of::<bpf_intf::morpheus_worker_slot>() as u32,
            16,
            &libbpf_rs::libbpf_sys::bpf_map_create_opts { sz: size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _, ..Default::default() },
        )
        .expect(NEEDS);
        let worker_tids = word_array("worker_tids", bpf_intf::MORPHEUS_TID_WORDS);
        let summary = word_array("worker_tid_summ", bpf_intf::MORPHEUS_TID_SUMMARY_WORDS);
        let entries = MapHandle::from_map_id(worker_slots.info().unwrap().info.id).unwrap();
        let slots = LayerSlots::over(worker_slots, &worker_tids, &summary).unwrap();
        // SAFETY: no preconditions.
        let me = unsafe { libc::gettid() } as u32;
        let pinned = Arc::new(crate::identity::Peer::this_process().expect("pin this process").thread(me).expect("this thread"));
        // Only the numbers are written to the maps: each record names another tid, pinned as this thread.
        let thread = |tid: u32| Assigned { tid, pid: tid, uid: 40003, thread: Arc::clone(&pinned), domain: Arc::clone(&domain), local: 0 };
        let (tid, neighbour) = (4242, 4243);
        let before = crate::monotonic_ns();
        slots.record(1, &thread(tid)).unwrap();
        let after = crate::monotonic_ns();
        let entry = read_record::<bpf_intf::morpheus_worker_slot>(&entries.lookup(&tid.to_ne_bytes(), MapFlags::ANY).unwrap().unwrap()).unwrap();
        assert!((before..=after).contains(&entry.registered_ns), "registered_ns {} not read at the record ({before}..={after})", entry.registered_ns);
        slots.record(2, &thread(neighbour)).unwrap();
        assert!(tid_bit(&worker_tids, tid) && tid_bit(&worker_tids, neighbour), "set with the entries");
        assert!(block_bit(&summary, tid), "the block's summary bit not set with its tids'");
        // The tid registered again elsewhere (slot 3) before slot 1's release: its entry names 3.
        slots.record(3, &thread(tid)).unwrap();
        slots.forget(1, tid);
        assert!(tid_bit(&worker_tids, tid), "cleared while the tid still has an entry (slot 3)");
        assert!(entries.lookup(&tid.to_ne_bytes(), MapFlags::ANY).unwrap().is_some());
        // The BPF side removed the entry at the thread's exit; the agent then releases slot 3.
        entries.delete(&tid.to_ne_bytes()).unwrap();
        slots.forget(3, tid);
        assert!(!tid_bit(&worker_tids, tid), "left set once the tid has no entry");
        assert!(tid_bit(&worker_tids, neighbour), "a neighbour's bit in the same word was cleared");
        assert!(block_bit(&summary, neighbour), "the block's summary bit cleared while a tid of it (the neighbour) is set");
        slots.forget(2, neighbour);
        assert!(!tid_bit(&worker_tids, neighbour));
        assert!(!block_bit(&summary, neighbour), "the block's summary bit left set once no tid of it is");
        assert!(entries.lookup(&neighbour.to_ne_bytes(), MapFlags::ANY).unwrap().is_none(), "the released slot's entry stayed");
        // A tid past the bitmap (never a real tid) is recorded; the BPF side looks it up directly.
        slots.record(4, &thread(bpf_intf::MORPHEUS_TID_LIMIT)).unwrap();
        slots.forget(4, bpf_intf::MORPHEUS_TID_LIMIT);
    }

    #[test]
    #[ignore = "needs root and bpf(2): run with --ignored (//scheduler:region_pin_test does)"]
    fn a_region_map_is_pinned_only_after_its_header_is_published() {
        let mount = BpfMount::new().expect(NEEDS);
        let template = create_region_map(0).expect(NEEDS);
        let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
            sz: size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
            inner_map_fd: template.as_fd().as_raw_fd() as u32,
            ..Default::default()
        };
        let outer = MapHandle::create(MapType::ArrayOfMaps, Some("regions"), 4, 4, 2, &opts).expect(NEEDS);
        // SAFETY: no preconditions.
        let uid = unsafe { libc::geteuid() };
        let pin = pin_path(&mount.dir, uid);
        let maker = Arc::new(Observed {
            inner: BpfRegions { outer, pin_dir: Some(mount.dir.clone()), pinned: Arc::default() },
            pin: pin.clone(),
            seen_before_publish: Mutex::new(None),
        });
        let params = RegionParams::enforced_with_defaults(4, abi::Backend::Kernel);
        let domains = Domains::new(params, 7, Some(Arc::clone(&maker) as Arc<dyn RegionMaker>), LIMITS);
        let domain = domains.for_uid(uid, uid).unwrap();

        let before = maker.seen_before_publish.lock().unwrap().take().expect("create ran");
        assert_eq!(before, Ok(()), "a reader that found the pin before the header was published was refused");
        assert_eq!(domain.pin.as_deref(), Some(pin.as_path()));
        let region = morpheus::Region::open(&pin).expect("the pinned region validates once named");
        assert_eq!(region.attached_generation(), 7);
    }

    /// A03: a domain freed with its last worker is retired (generation 0), its slot of the
    /// program's array of maps is emptied and its pin removed; the index goes to the next domain,
    /// whose map (not the freed one) the slot then holds.
    #[test]
    #[ignore = "needs root and bpf(2): run with --ignored (//scheduler:region_pin_test does)"]
    fn a_freed_region_is_retired_unpinned_and_its_index_reused() {
        let mount = BpfMount::new().expect(NEEDS);
        let template = create_region_map(0).expect(NEEDS);
        let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
            sz: size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
            inner_map_fd: template.as_fd().as_raw_fd() as u32,
            ..Default::default()
        };
        let outer = MapHandle::create(MapType::ArrayOfMaps, Some("regions"), 4, 4, 2, &opts).expect(NEEDS);
        let maker = Arc::new(BpfRegions { outer, pin_dir: Some(mount.dir.clone()), pinned: Arc::default() });
        let params = RegionParams::enforced_with_defaults(4, abi::Backend::Kernel);
        let domains = Domains::new(params, 7, Some(Arc::clone(&maker) as Arc<dyn RegionMaker>), LIMITS);
        let first = domains.for_uid(40001, 40001).unwrap();
        let first_pin = first.pin.clone().expect("pinned");
        assert_eq!(first.index, 0);
        let map_id = |index: u32| maker.outer.lookup(&index.to_ne_bytes(), MapFlags::ANY).unwrap().map(|v| u32::from_ne_bytes(v[..4].try_into().unwrap()));
        let first_id = map_id(0).expect("slot 0 holds the first domain's map");
        domains.release(40001, &first);
        assert_eq!(first.region.generation(), 0, "retired");
        assert!(!first_pin.exists(), "the freed region's pin is gone");
        assert_eq!(map_id(0), None, "slot 0 of the array of maps is empty");
        assert!(maker.pinned.lock().unwrap().is_empty());
        let second = domains.for_uid(40002, 40002).unwrap();
        assert_eq!(second.index, 0, "the freed index is reused");
        let second_id = map_id(0).expect("slot 0 holds the second domain's map");
        assert_ne!(second_id, first_id, "the slot holds the new map, not the freed one");
        assert_eq!(domains.live(), 1);
    }
}
