// SPDX-License-Identifier: GPL-2.0-only
//! Test workers for the real-kernel test (scheduler/e2e/guest.sh) and its overhead benchmark.
//!
//! Each role runs on its own thread as an application's worker would: a `morpheus::Worker` (the Rust
//! SDK, sdk-rust) registered through the agent's socket, spinning for the given time, and prints one
//! `role=... key=value` line with what its Shared Control Block shows (read through the SDK's region
//! mapping; the scheduler-written counters are what the test checks).
//!
//! usage: morpheus-e2e-worker [--cgroup DIR] [--forge-header] [--ready FILE] [--attack TARGET] --seconds S ROLE...
//!        morpheus-e2e-worker [--ready FILE] --until FILE ROLE...
//!        morpheus-e2e-worker [--cgroup DIR] --stress SECTIONS
//!        morpheus-e2e-worker --bench-cpu ITERATIONS --threads N
//!        morpheus-e2e-worker --scb-of PID SLOT
//!        morpheus-e2e-worker --tid-reuse MS
//! roles: cooperative   checkpoint_sync between pieces of work, sched_yield when it says so; escapable
//!        spin          never checkpoints, escapable (the one enforced mode must escalate)
//!        critical      never checkpoints, escapable, but inside a critical section throughout
//!        unescapable   never checkpoints, registered with escapable = 0 (Config::escapable(false), so
//!                      the SCB says so before the worker is RUNNING: from its first instruction)
//! --forge-header: each role, once registered, writes scheduler_mode = ENFORCED, escalation_policy =
//!        THREAD_KICK and grace_ns = 0 into the region header it maps, as a hostile runtime would (S4,
//!        spec/SCB.md §10: the scheduler must decide with its own configuration, not the header's);
//!        `header_mode` in the report is the mode the header shows afterwards.
//! --ready FILE: each role, once registered, writes `pid=P tid=T` (its process and thread) to FILE.
//! --until FILE: the roles run until FILE exists instead of for a time (the test decides when).
//! --attack VICTIM_PID:VICTIM_TID:ROOT_PID:AGENT_PID: each role, once registered, attacks another
//!        user's worker as e2e/domains_attack.rs says, and reports what it found and forged.
//! --stress: a `racer` (escapable, never checkpoints) enters and leaves a critical section SECTIONS
//!        times, racing the scheduler's escalations of it, while `spin` and `unescapable` run beside it
//!        until it is done. The end is a count, not a time, so the run does not depend on speed.
//! --scb-of: the SCB of slot SLOT as process PID maps it (its own mapping of its region, read through
//!        /proc/PID/maps and /proc/PID/mem; the slot's `pid` must be PID), one `key=value` line: the
//!        report of the workers of SDKs whose API does not expose the SCB (Node, Java), which run this
//!        while their worker is still registered (and, for `critical`, still in its section).
//! --tid-reuse (root): a registered worker thread exits without unregistering (a raw exit(2): no
//!        destructor runs, as when a thread dies with its process), and as soon as its tid is free a
//!        child process is made with that tid (clone3 with set_tid), which burns MS ms of CPU (many
//!        slices) without registering. One `role=tid_reuse` line: the exited worker's preempt_seq
//!        before the child ran and after. The scheduler must never take the child for that worker.

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::mem::{offset_of, size_of};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use morpheus::{Worker, YieldReason};
use morpheus_abi::{RegionHeader, Scb};

mod domains_attack;

/// `--forge-header`: set once by main before any role starts.
static FORGE_HEADER: AtomicBool = AtomicBool::new(false);
/// `--ready` and `--attack`: set once by main before any role starts.
static READY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
static ATTACK: std::sync::OnceLock<domains_attack::Target> = std::sync::OnceLock::new();

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Cooperative,
    Spin,
    Critical,
    Unescapable,
    Racer,
}

impl Role {
    fn parse(s: &str) -> Result<Role, String> {
        Ok(match s {
            "cooperative" => Role::Cooperative,
            "spin" => Role::Spin,
            "critical" => Role::Critical,
            "unescapable" => Role::Unescapable,
            other => return Err(format!("unknown role '{other}' (cooperative, spin, critical, unescapable)")),
        })
    }

    fn name(self) -> &'static str {
        match self {
            Role::Cooperative => "cooperative",
            Role::Spin => "spin",
            Role::Critical => "critical",
            Role::Unescapable => "unescapable",
            Role::Racer => "racer",
        }
    }
}

fn gettid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// Read-only view of a registered worker's SCB, for the report (the SDK writes; we only look).
struct ScbView(*const Scb);

macro_rules! load {
    ($view:expr, $name:ident, $t:ty, $order:expr) => {
        // SAFETY: an aligned field of the worker's SCB inside the region the Worker keeps mapped.
        unsafe { (*($view.0.cast::<u8>().add(offset_of!(Scb, $name)).cast::<$t>())).load($order) }
    };
}

impl ScbView {
    fn of(worker: &Worker) -> Result<ScbView, String> {
        let slot = worker.slot().ok_or("the worker has no slot")?;
        let region = worker.region().ok_or("the worker is not attached to a region")?;
        let scb = region.scb_ptr(slot).map_err(|e| format!("SCB of slot {slot}: {e}"))?;
        Ok(ScbView(scb))
    }
}

/// Writes an enforcing configuration into the header of the worker's region (a runtime can: it maps
/// the region read-write). The header lies right before SCB 0 (header_size = size of RegionHeader, as
/// the agent publishes it); its magic is checked so a wrong guess fails loudly instead of scribbling.
fn forge_header(worker: &Worker) -> Result<(), String> {
    let region = worker.region().ok_or("the worker is not attached to a region")?;
    let scb0 = region.scb_ptr(0).map_err(|e| format!("SCB 0: {e}"))?;
    // SAFETY: SCB 0 starts header_size bytes into the mapping; the header is the mapping's start.
    let hdr = unsafe { scb0.cast::<u8>().sub(size_of::<RegionHeader>()) };
    macro_rules! field {
        ($name:ident, $t:ty) => {
            // SAFETY: an aligned field of the mapped header.
            unsafe { &*(hdr.add(offset_of!(RegionHeader, $name)).cast::<$t>()) }
        };
    }
    if field!(magic, AtomicU64).load(Ordering::Relaxed) != morpheus_abi::REGION_MAGIC {
        return Err("--forge-header: no region header before SCB 0".into());
    }
    field!(scheduler_mode, AtomicU32).store(morpheus_abi::SchedulerMode::Enforced.raw(), Ordering::Relaxed);
    field!(escalation_policy, AtomicU32).store(morpheus_abi::EscalationPolicy::ThreadKick.raw(), Ordering::Relaxed);
    field!(grace_ns, AtomicU64).store(0, Ordering::Relaxed);
    Ok(())
}

fn register(role: Role) -> Result<Worker, String> {
    // The Rust SDK's default is escapable; this role opts out in its registration, so the SCB says
    // escapable = 0 before the worker is RUNNING and no gate can ever see it escapable.
    let worker = Worker::builder()
        .escapable(role != Role::Unescapable)
        .register()
        .map_err(|e| format!("registration through the agent: {e}"))?;
    if !worker.is_attached() {
        return Err(format!("registered but detached ({:?}): is the agent running?", worker.detach_reason()));
    }
    Ok(worker)
}

/// Work the optimiser cannot remove.
#[inline(never)]
fn burn(iterations: u64) -> u64 {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..iterations {
        x = x.rotate_left(7) ^ i.wrapping_mul(0x2545_f491_4f6c_dd1d);
    }
    std::hint::black_box(x)
}

/// How long a role runs: for a time, or (stress) until a racer has done its sections.
#[derive(Clone)]
enum Until {
    Seconds(f64),
    /// Sections for the racer; the others run until `done` is set.
    Sections(u64, Arc<AtomicBool>),
    /// Until the file exists.
    File(String),
}

fn run_role(role: Role, until: Until) -> Result<String, String> {
    // The critical role opens its section before it registers: the depth is the thread's, so the SCB
    // says in_critical from the instant the worker is RUNNING (SCB.md §4, §5.3) and the verdict cannot
    // depend on how long the registration takes. Opened after, a slow registration under TCG left a
    // window in which the worker was RUNNING, past slice + grace and not yet in its section.
    let critical = (role == Role::Critical).then(morpheus::critical_section);
    let worker = register(role)?;
    let scb = ScbView::of(&worker)?;
    if FORGE_HEADER.load(Ordering::Relaxed) {
        forge_header(&worker)?;
    }
    if let Some(path) = READY.get() {
        let tmp = format!("{path}.tmp");
        std::fs::write(&tmp, format!("pid={} tid={}\n", std::process::id(), gettid()))
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| format!("--ready {path}: {e}"))?;
    }
    let attack = match ATTACK.get() {
        Some(target) => {
            let found = domains_attack::probe(&worker, target)?;
            let (forged, saved) = domains_attack::forge(&worker, target)?;
            Some((format!("{found} forged_slots={forged}"), saved))
        }
        None => None,
    };
    let seq0 = load!(scb, preempt_seq, AtomicU64, Ordering::Acquire);
    let mut sections = 0u64;
    let work_piece = || {
        burn(20_000);
        // checkpoint_sync acknowledges as it returns true; returning true is the yield point.
        if role == Role::Cooperative && worker.checkpoint_sync() {
            // SAFETY: no preconditions.
            unsafe { libc::sched_yield() };
        }
    };
    match &until {
        Until::Seconds(seconds) => {
            let deadline = Instant::now() + Duration::from_secs_f64(*seconds);
            while Instant::now() < deadline {
                work_piece();
            }
        }
        Until::Sections(count, _) if role == Role::Racer => {
            // In and out of a section, never a checkpoint: escalations of it race its section entries.
            while sections < *count {
                {
                    let _section = worker.critical_section();
                    burn(1_000);
                }
                sections += 1;
                burn(1_000);
            }
        }
        Until::Sections(_, done) => {
            while !done.load(Ordering::Acquire) {
                burn(20_000);
            }
        }
        Until::File(path) => {
            // The run ends when FILE exists, or when the directory it would be made in is gone (the
            // test that owned it has ended without making it): a worker never outlives its test.
            let path = std::path::Path::new(path);
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
            let mut pieces = 0u32;
            while !path.exists() {
                work_piece();
                pieces = pieces.wrapping_add(1);
                if pieces % 1024 == 0 && !dir.exists() {
                    break;
                }
            }
        }
    }
    if let Some((_, saved)) = &attack {
        domains_attack::restore(&worker, saved)?;
    }
    // Read while still inside the critical section: once it ends, this worker (escapable, far past
    // slice + grace, never acknowledging) may rightly be escalated before it shuts down.
    // A scheduler restart moves the worker to the new instance's region (SCB.md §6.1): read that one.
    let scb = if worker.reattachments() > 0 { ScbView::of(&worker)? } else { scb };
    let mut line = format!(
        "role={} slot={} tid={} cpu_ms={:.0} sections={sections} preempt_seq_start={} preempt_seq={} last_ack_seq={} yields={} escalations={} escalated={} hints_dropped={} budget_remaining_ns={} header_mode={} reattachments={}",
        role.name(),
        worker.slot().unwrap_or(u32::MAX),
        gettid(),
        thread_cpu_ms(),
        seq0,
        load!(scb, preempt_seq, AtomicU64, Ordering::Acquire),
        load!(scb, last_ack_seq, AtomicU64, Ordering::Acquire),
        worker.yield_counts().get(YieldReason::PreemptRequest),
        load!(scb, escalations, AtomicU32, Ordering::Relaxed),
        load!(scb, escalated, AtomicU32, Ordering::Relaxed),
        load!(scb, hints_dropped, AtomicU32, Ordering::Relaxed),
        load!(scb, budget_remaining_ns, AtomicU64, Ordering::Relaxed),
        worker.region().map_or(u32::MAX, |r| r.scheduler_mode().map_or_else(|raw| raw, |m| m.raw())),
        worker.reattachments(),
    );
    if let Some((report, _)) = &attack {
        line = format!("{line} {report}");
    }
    drop(critical);
    worker.shutdown().map_err(|e| format!("shutdown: {e}"))?;
    Ok(line)
}

/// `--tid-reuse MS`: see the module comment. The verdict does not depend on timing: the tid is taken
/// exactly (set_tid), the child's work is counted in its own CPU time, and the line is written only
/// once the child has exited.
fn tid_reuse(burn_ms: f64) -> Result<String, String> {
    let (tx, rx) = std::sync::mpsc::channel::<Result<(u32, u32, usize), String>>();
    let handle = std::thread::spawn(move || {
        match register(Role::Spin).and_then(|worker| ScbView::of(&worker).map(|scb| (worker, scb))) {
            Ok((worker, scb)) => {
                let _ = tx.send(Ok((gettid(), worker.slot().unwrap_or(u32::MAX), scb.0 as usize)));
                // Nothing unregisters it: the registration and the region mapping outlive the thread.
                std::mem::forget(worker);
                // SAFETY: ends this thread only, holding no lock; its stack is never used again.
                unsafe { libc::syscall(libc::SYS_exit, 0) };
            }
            Err(e) => {
                let _ = tx.send(Err(e));
            }
        }
    });
    // Never joined: the thread did not return through the runtime.
    std::mem::forget(handle);
    let (tid, slot, scb) = rx.recv().map_err(|e| format!("the worker thread ended without a word: {e}"))??;
    let scb = ScbView(scb as *const Scb);
    let deadline = Instant::now() + Duration::from_secs(60);
    // The tid is free once the thread has left the process's task list.
    let task = format!("/proc/self/task/{tid}");
    while std::path::Path::new(&task).exists() {
        if Instant::now() > deadline {
            return Err(format!("thread {tid} did not exit within 60 s"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let seq0 = load!(scb, preempt_seq, AtomicU64, Ordering::Acquire);
    let set_tid = [tid as libc::pid_t];
    // SAFETY: clone_args is plain data; all-zero is its documented default.
    let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
    args.exit_signal = libc::SIGCHLD as u64;
    args.set_tid = set_tid.as_ptr() as u64;
    args.set_tid_size = 1;
    let child = loop {
        // SAFETY: a fork-like clone3 (no shared memory or stack); the child only computes and exits.
        let r = unsafe { libc::syscall(libc::SYS_clone3, &args as *const libc::clone_args, size_of::<libc::clone_args>()) };
        if r == 0 {
            while thread_cpu_ms() < burn_ms {
                burn(20_000);
            }
            // SAFETY: leaves the child without running the parent's handlers.
            unsafe { libc::_exit(0) };
        }
        if r > 0 {
            break r as libc::pid_t;
        }
        let err = std::io::Error::last_os_error();
        // EEXIST: the tid is not released yet (the thread's exit is still being completed).
        if err.raw_os_error() != Some(libc::EEXIST) || Instant::now() > deadline {
            return Err(format!("clone3 with set_tid {tid}: {err}"));
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let mut status = 0;
    // SAFETY: rusage is plain data, filled in by wait4.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child.
    if unsafe { libc::wait4(child, &mut status, 0, &mut usage) } != child {
        return Err(format!("wait4 of child {child}: {}", std::io::Error::last_os_error()));
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(format!("child {child} with tid {tid} failed (status {status:#x})"));
    }
    let child_cpu_ms = (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) as f64 * 1e3
        + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) as f64 / 1e3;
    Ok(format!(
        "role=tid_reuse slot={slot} tid={tid} child={child} child_cpu_ms={child_cpu_ms:.0} preempt_seq_start={seq0} preempt_seq={}",
        load!(scb, preempt_seq, AtomicU64, Ordering::Acquire),
    ))
}

/// CPU time this thread has consumed, in milliseconds.
fn thread_cpu_ms() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}

/// Moves this process into the cgroup v2 directory `dir` (before any worker thread starts).
fn join_cgroup(dir: &str) -> Result<(), String> {
    let procs = format!("{dir}/cgroup.procs");
    std::fs::write(&procs, std::process::id().to_string()).map_err(|e| format!("cannot join cgroup via {procs}: {e}"))
}

/// Fixed CPU-bound work on `threads` threads; prints the wall time (overhead benchmark).
fn bench_cpu(iterations: u64, threads: usize) {
    let start = Instant::now();
    let handles: Vec<_> = (0..threads).map(|_| std::thread::spawn(move || burn(iterations))).collect();
    for h in handles {
        h.join().expect("bench thread panicked");
    }
    println!("bench_cpu threads={threads} iterations={iterations} elapsed_ms={:.1}", start.elapsed().as_secs_f64() * 1e3);
}
/// `--scb-of PID SLOT`: the scheduler-written counters and the worker's state of slot `slot`, read from
/// the first mapping of process `pid` that starts with a region header holding that slot for `pid`.
fn scb_of(pid: u32, slot: u32) -> Result<String, String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|e| format!("/proc/{pid}/maps: {e}"))?;
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).map_err(|e| format!("/proc/{pid}/mem: {e}"))?;
    let read = |addr: u64, len: usize| -> Option<Vec<u8>> {
        let mut buf = vec![0u8; len];
        mem.read_exact_at(&mut buf, addr).ok().map(|()| buf)
    };
    let u32_at = |b: &[u8], off: usize| u32::from_ne_bytes(b[off..off + 4].try_into().expect("4 bytes"));
    let u64_at = |b: &[u8], off: usize| u64::from_ne_bytes(b[off..off + 8].try_into().expect("8 bytes"));
    for line in maps.lines() {
        // "lo-hi perms offset dev inode [name]": readable mappings at offset 0, not [heap], [stack]...
        let parts: Vec<&str> = line.split_whitespace().collect();
        if parts.len() < 5 || !parts[1].starts_with('r') || !parts[2].trim_start_matches('0').is_empty() {
            continue;
        }
        if parts.get(5).is_some_and(|name| name.starts_with('[')) {
            continue;
        }
        let Some((lo, hi)) = parts[0].split_once('-') else { continue };
        let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) else { continue };
        let Some(header) = read(lo, size_of::<RegionHeader>().min((hi - lo) as usize)) else { continue };
        if header.len() < size_of::<RegionHeader>() || u64_at(&header, offset_of!(RegionHeader, magic)) != morpheus_abi::REGION_MAGIC {
            continue;
        }
        let header_size = u64::from(u32_at(&header, offset_of!(RegionHeader, header_size)));
        let stride = u64::from(u32_at(&header, offset_of!(RegionHeader, scb_stride)));
        if slot >= u32_at(&header, offset_of!(RegionHeader, scb_count)) {
            continue;
        }
        let base = lo + header_size + u64::from(slot) * stride;
        if base + size_of::<Scb>() as u64 > hi {
            continue;
        }
        let Some(scb) = read(base, size_of::<Scb>()) else { continue };
        if u32_at(&scb, offset_of!(Scb, pid)) != pid {
            continue;
        }
        return Ok(format!(
            "preempt_seq={} last_ack_seq={} escalations={} escalated={} worker_state={} in_critical={} escapable={} tid={}",
            u64_at(&scb, offset_of!(Scb, preempt_seq)),
            u64_at(&scb, offset_of!(Scb, last_ack_seq)),
            u32_at(&scb, offset_of!(Scb, escalations)),
            u32_at(&scb, offset_of!(Scb, escalated)),
            u32_at(&scb, offset_of!(Scb, worker_state)),
            u32_at(&scb, offset_of!(Scb, in_critical)),
            u32_at(&scb, offset_of!(Scb, escapable)),
            u32_at(&scb, offset_of!(Scb, tid)),
        ));
    }
    Err(format!("no mapping of process {pid} holds a region whose slot {slot} belongs to it"))
}

fn usage() -> ExitCode {
    eprintln!("usage: morpheus-e2e-worker [--cgroup DIR] [--forge-header] [--ready FILE] [--attack TARGET] (--seconds S | --until FILE) ROLE... | [--cgroup DIR] --stress SECTIONS | --bench-cpu ITERATIONS --threads N | --scb-of PID SLOT | --tid-reuse MS");
    eprintln!("roles: cooperative spin critical unescapable");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--scb-of") {
        let parsed = match &args[1..] {
            [pid, slot] => pid.parse::<u32>().ok().zip(slot.parse::<u32>().ok()),
            _ => None,
        };
        let Some((pid, slot)) = parsed else {
            eprintln!("morpheus-e2e-worker: --scb-of needs a PID and a SLOT (numbers)");
            return usage();
        };
        return match scb_of(pid, slot) {
            Ok(line) => {
                println!("{line}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("morpheus-e2e-worker: --scb-of: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if args.first().map(String::as_str) == Some("--tid-reuse") {
        let Some(ms) = args.get(1).and_then(|v| v.parse::<f64>().ok()).filter(|&ms| ms > 0.0 && ms <= 60_000.0) else {
            eprintln!("morpheus-e2e-worker: --tid-reuse needs a CPU time in ms, in (0, 60000]");
            return usage();
        };
        return match tid_reuse(ms) {
            Ok(line) => {
                println!("{line}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("morpheus-e2e-worker: --tid-reuse: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let value = |i: usize, what: &str| -> Result<String, String> {
        args.get(i + 1).cloned().ok_or_else(|| format!("{what} needs a value"))
    };
    let mut seconds = None;
    let mut stress = None;
    let mut bench = None;
    let mut threads = 2usize;
    let mut roles = Vec::new();
    let mut cgroup = None;
    let mut until_file = None;
    let mut i = 0;
    while i < args.len() {
        let parsed: Result<(), String> = match args[i].as_str() {
            "--seconds" => value(i, "--seconds").and_then(|v| {
                let s: f64 = v.parse().map_err(|_| format!("--seconds: '{v}' is not a number"))?;
                if !(s > 0.0 && s <= 3600.0) {
                    return Err(format!("--seconds {s}: must be in (0, 3600]"));
                }
                seconds = Some(s);
                i += 1;
                Ok(())
            }),
            "--stress" => value(i, "--stress").and_then(|v| {
                stress = Some(v.parse::<u64>().ok().filter(|&n| n > 0).ok_or(format!("--stress: '{v}' must be a positive count"))?);
                i += 1;
                Ok(())
            }),
            "--bench-cpu" => value(i, "--bench-cpu").and_then(|v| {
                bench = Some(v.parse::<u64>().map_err(|_| format!("--bench-cpu: '{v}' is not a count"))?);
                i += 1;
                Ok(())
            }),
            "--threads" => value(i, "--threads").and_then(|v| {
                threads = v.parse::<usize>().ok().filter(|&n| (1..=256).contains(&n)).ok_or(format!("--threads: '{v}' must be 1..256"))?;
                i += 1;
                Ok(())
            }),
            "--cgroup" => value(i, "--cgroup").map(|v| {
                cgroup = Some(v);
                i += 1;
            }),
            "--forge-header" => {
                FORGE_HEADER.store(true, Ordering::Relaxed);
                Ok(())
            }
            "--ready" => value(i, "--ready").map(|v| {
                let _ = READY.set(v);
                i += 1;
            }),
            "--until" => value(i, "--until").map(|v| {
                until_file = Some(v);
                i += 1;
            }),
            "--attack" => value(i, "--attack").and_then(|v| {
                let _ = ATTACK.set(domains_attack::Target::parse(&v)?);
                i += 1;
                Ok(())
            }),
            "-h" | "--help" => return usage(),
            role => Role::parse(role).map(|r| roles.push(r)),
        };
        if let Err(e) = parsed {
            eprintln!("morpheus-e2e-worker: {e}");
            return usage();
        }
        i += 1;
    }
    if let Some(iterations) = bench {
        bench_cpu(iterations, threads);
        return ExitCode::SUCCESS;
    }
    let until = match (seconds, stress, until_file) {
        (Some(s), None, None) if !roles.is_empty() => Until::Seconds(s),
        (None, None, Some(path)) if !roles.is_empty() => {
            // A worker that runs until told must not outlive the test that started it: the kernel
            // sends SIGKILL when the parent dies; a parent already gone (reparented) ends it now.
            let parent = unsafe { libc::getppid() };
            // SAFETY: PR_SET_PDEATHSIG takes a signal number and has no other preconditions.
            if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) } != 0 || unsafe { libc::getppid() } != parent {
                eprintln!("morpheus-e2e-worker: --until: the parent is gone (or PR_SET_PDEATHSIG failed); not starting");
                return ExitCode::FAILURE;
            }
            Until::File(path)
        }
        (None, Some(n), None) if roles.is_empty() => {
            roles = vec![Role::Racer, Role::Spin, Role::Unescapable];
            Until::Sections(n, Arc::new(AtomicBool::new(false)))
        }
        _ => {
            eprintln!("morpheus-e2e-worker: give --seconds or --until with roles, or --stress alone");
            return usage();
        }
    };
    if let Some(dir) = &cgroup {
        if let Err(e) = join_cgroup(dir) {
            eprintln!("morpheus-e2e-worker: {e}");
            return ExitCode::FAILURE;
        }
    }
    let handles: Vec<_> = roles
        .into_iter()
        .map(|r| {
            let until = until.clone();
            std::thread::spawn(move || {
                let result = run_role(r, until.clone());
                // However the racer ended (a failed registration too), the others stop with it.
                if let (Role::Racer, Until::Sections(_, done)) = (r, &until) {
                    done.store(true, Ordering::Release);
                }
                (r, result)
            })
        })
        .collect();
    let mut ok = true;
    for h in handles {
        let (role, result) = h.join().expect("worker thread panicked");
        match result {
            Ok(line) => println!("{line}"),
            Err(e) => {
                eprintln!("morpheus-e2e-worker: role {}: {e}", role.name());
                ok = false;
            }
        }
    }
    std::io::stdout().flush().ok();
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
