// SPDX-License-Identifier: GPL-2.0-only
//! Test workers for the real-kernel test (scheduler/e2e/guest.sh) and its overhead benchmark.
//!
//! Each role runs on its own thread, registers through the agent's socket exactly as an SDK does
//! (spec/SCB.md §4.1: reg_request / reg_reply, then REGISTERED -> RUNNING), spins for the given time
//! and prints one `role=... key=value` line with what its SCB shows. The protocol is written against
//! the generated `morpheus-abi` crate; the Rust SDK (sdk-rust) was not usable yet when this was
//! written, and a test of the scheduler should not depend on an SDK's bugs anyway.
//!
//! usage: morpheus-e2e-worker [--cgroup DIR] --seconds S ROLE...
//!        morpheus-e2e-worker --bench-cpu ITERATIONS --threads N
//! roles: cooperative   checkpoints constantly and yields (sched_yield) when asked, escapable
//!        spin          never checkpoints, escapable (the one enforced mode must escalate)
//!        critical      never checkpoints, escapable, but inside a critical section throughout
//!        unescapable   never checkpoints, escapable = 0

use std::ffi::CString;
use std::io::{Read, Write};
use std::mem::{offset_of, size_of};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use morpheus_abi as abi;
use morpheus_abi::{RegReply, RegRequest, RegionHeader, Scb};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Cooperative,
    Spin,
    Critical,
    Unescapable,
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
        }
    }
}

fn gettid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

fn socket_path() -> PathBuf {
    std::env::var_os(abi::ENV_SOCKET).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(abi::DEFAULT_SOCKET_PATH))
}

fn as_bytes<T>(v: &T) -> &[u8] {
    // SAFETY: plain C records without padding holes (the ABI makes every gap an explicit field).
    unsafe { std::slice::from_raw_parts((v as *const T).cast(), size_of::<T>()) }
}

fn request(conn: &mut UnixStream, op: abi::RegOp, tid: u32, slot: u32) -> Result<RegReply, String> {
    // SAFETY: all-zero is a valid reg_request (reserved bytes must be zero).
    let mut req: RegRequest = unsafe { std::mem::zeroed() };
    req.magic = abi::REG_MAGIC;
    req.abi_major = abi::ABI_MAJOR;
    req.abi_minor = abi::ABI_MINOR;
    req.op = op.raw();
    req.tid = tid;
    req.slot = slot;
    req.runtime_kind = abi::RuntimeKind::Rust.raw();
    conn.write_all(as_bytes(&req)).map_err(|e| format!("send reg_request: {e}"))?;
    let mut buf = [0u8; size_of::<RegReply>()];
    conn.read_exact(&mut buf).map_err(|e| format!("read reg_reply: {e}"))?;
    // SAFETY: exactly size_of::<RegReply>() bytes of a plain record.
    let reply: RegReply = unsafe { std::ptr::read_unaligned(buf.as_ptr().cast()) };
    if reply.magic != abi::REG_MAGIC {
        return Err(format!("reg_reply has magic {:#x}, expected {:#x}", reply.magic, abi::REG_MAGIC));
    }
    if reply.status != abi::RegStatus::Ok.raw() {
        let name = abi::RegStatus::try_from(reply.status).map(|s| s.name()).unwrap_or("?");
        return Err(format!("{op:?} refused: {name} ({})", reply.status));
    }
    Ok(reply)
}

/// A mapping of the region named in a registration reply.
struct Mapping {
    base: *mut u8,
    len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the range mapped in `map_region`.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

fn bpf_obj_get(path: &CString) -> Result<i32, String> {
    // union bpf_attr for BPF_OBJ_GET: pathname (u64), bpf_fd (u32), file_flags (u32), path_fd (s32).
    let mut attr = [0u64; 4];
    attr[0] = path.as_ptr() as u64;
    const BPF_OBJ_GET: libc::c_long = 7;
    // SAFETY: attr is a valid, zero-padded bpf_attr of the size passed.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_OBJ_GET, attr.as_mut_ptr(), size_of::<[u64; 4]>()) };
    if fd < 0 {
        return Err(format!("BPF_OBJ_GET {path:?}: {}", std::io::Error::last_os_error()));
    }
    Ok(fd as i32)
}

fn mmap_fd(fd: i32, len: usize) -> Result<*mut u8, String> {
    // SAFETY: mapping an fd we own; MAP_FAILED is checked.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0) };
    if p == libc::MAP_FAILED {
        return Err(format!("mmap of {len} bytes: {}", std::io::Error::last_os_error()));
    }
    Ok(p.cast())
}

fn map_region(path: &str) -> Result<Mapping, String> {
    let cpath = CString::new(path).map_err(|_| format!("region path {path:?} has a NUL byte"))?;
    let fd = if path.starts_with("/sys/fs/bpf/") {
        bpf_obj_get(&cpath)?
    } else {
        // SAFETY: valid C string.
        let fd = unsafe { libc::open(cpath.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(format!("open {path}: {}", std::io::Error::last_os_error()));
        }
        fd
    };
    // The header says how much to map.
    let page = 4096usize;
    let head = mmap_fd(fd, page)?;
    // SAFETY: the first page holds the 128-byte header.
    let (magic, header_size, stride, count) = unsafe {
        let h = &*(head as *const RegionHeader);
        (h.magic, h.header_size as usize, h.scb_stride as usize, h.scb_count as usize)
    };
    // SAFETY: unmapping what we just mapped.
    unsafe { libc::munmap(head.cast(), page) };
    if magic != abi::REGION_MAGIC {
        return Err(format!("{path} is not a Morpheus region (magic {magic:#x})"));
    }
    let len = (header_size + count * stride).div_ceil(page) * page;
    let base = mmap_fd(fd, len)?;
    // SAFETY: the mapping keeps the object alive.
    unsafe { libc::close(fd) };
    Ok(Mapping { base, len })
}

/// One registered worker: its SCB in the mapped region.
struct Worker {
    _map: Mapping,
    scb: *mut Scb,
    slot: u32,
    conn: UnixStream,
}

macro_rules! field {
    ($w:expr, $name:ident, $t:ty) => {
        // SAFETY: an aligned field of the SCB inside the live mapping.
        unsafe { &*($w.scb.cast::<u8>().add(offset_of!(Scb, $name)).cast::<$t>()) }
    };
}

impl Worker {
    fn register(escapable: bool, in_critical: bool) -> Result<Worker, String> {
        let path = socket_path();
        let mut conn =
            UnixStream::connect(&path).map_err(|e| format!("connect to the agent at {}: {e}", path.display()))?;
        let reply = request(&mut conn, abi::RegOp::Register, gettid(), 0)?;
        let end = reply.region_path.iter().position(|&b| b == 0).unwrap_or(reply.region_path.len());
        let region_path = String::from_utf8_lossy(&reply.region_path[..end]).into_owned();
        let map = map_region(&region_path)?;
        // SAFETY: the header is at the start of the mapping.
        let (header_size, stride) = unsafe {
            let h = &*(map.base as *const RegionHeader);
            (h.header_size as usize, h.scb_stride as usize)
        };
        // SAFETY: slot < scb_count (the agent assigned it), so the SCB lies inside the mapping.
        let scb = unsafe { map.base.add(header_size + reply.slot as usize * stride) }.cast::<Scb>();
        let w = Worker { _map: map, scb, slot: reply.slot, conn };
        // REGISTERED -> RUNNING (spec/SCB.md §4): the runtime's fields first, the state last.
        field!(w, runtime_kind, AtomicU32).store(abi::RuntimeKind::Rust.raw(), Ordering::Relaxed);
        field!(w, escapable, AtomicU32).store(escapable as u32, Ordering::Release);
        field!(w, priority, std::sync::atomic::AtomicI32).store(0, Ordering::Relaxed);
        field!(w, runtime_mode, AtomicU32).store(abi::RuntimeMode::Deterministic.raw(), Ordering::Relaxed);
        field!(w, in_critical, AtomicU32).store(0, Ordering::Release);
        if in_critical {
            field!(w, in_critical, AtomicU32).store(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
        }
        field!(w, worker_state, AtomicU32).store(abi::WorkerState::Running.raw(), Ordering::Release);
        Ok(w)
    }

    fn unregister(mut self) -> Result<(), String> {
        field!(self, in_critical, AtomicU32).store(0, Ordering::Release);
        field!(self, worker_state, AtomicU32).store(abi::WorkerState::Quiescing.raw(), Ordering::Release);
        field!(self, worker_state, AtomicU32).store(abi::WorkerState::Dead.raw(), Ordering::Release);
        let slot = self.slot;
        request(&mut self.conn, abi::RegOp::Unregister, 0, slot).map(|_| ())
    }
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

fn run_role(role: Role, seconds: f64) -> Result<String, String> {
    let escapable = role != Role::Unescapable;
    let w = Worker::register(escapable, role == Role::Critical)?;
    let seq0 = field!(w, preempt_seq, AtomicU64).load(Ordering::Acquire);
    let mut cached_ack = field!(w, last_ack_seq, AtomicU64).load(Ordering::Acquire);
    let mut yields = 0u64;
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < deadline {
        burn(20_000);
        if role != Role::Cooperative {
            continue;
        }
        // Checkpoint (spec/SCB.md §5.1), synchronous flavour: ack, then yield.
        let seq = field!(w, preempt_seq, AtomicU64).load(Ordering::Acquire);
        if seq == cached_ack {
            continue;
        }
        field!(w, last_yield_reason, AtomicU32).store(abi::YieldReason::PreemptRequest.raw(), Ordering::Relaxed);
        field!(w, yield_count, AtomicU64).fetch_add(1, Ordering::Relaxed);
        let ack = field!(w, last_ack_seq, AtomicU64);
        let mut cur = ack.load(Ordering::Acquire);
        while cur < seq {
            match ack.compare_exchange(cur, seq, Ordering::Release, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        cached_ack = seq;
        yields += 1;
        // SAFETY: no preconditions.
        unsafe { libc::sched_yield() };
    }
    let line = format!(
        "role={} slot={} tid={} cpu_ms={:.0} preempt_seq_start={} preempt_seq={} last_ack_seq={} yields={} escalations={} escalated={} hints_dropped={} budget_remaining_ns={}",
        role.name(),
        w.slot,
        gettid(),
        thread_cpu_ms(),
        seq0,
        field!(w, preempt_seq, AtomicU64).load(Ordering::Acquire),
        field!(w, last_ack_seq, AtomicU64).load(Ordering::Acquire),
        yields,
        field!(w, escalations, AtomicU32).load(Ordering::Relaxed),
        field!(w, escalated, AtomicU32).load(Ordering::Relaxed),
        field!(w, hints_dropped, AtomicU32).load(Ordering::Relaxed),
        field!(w, budget_remaining_ns, AtomicU64).load(Ordering::Relaxed),
    );
    w.unregister()?;
    Ok(line)
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

fn usage() -> ExitCode {
    eprintln!("usage: morpheus-e2e-worker [--cgroup DIR] --seconds S ROLE... | --bench-cpu ITERATIONS --threads N");
    eprintln!("roles: cooperative spin critical unescapable");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |i: usize, what: &str| -> Result<String, String> {
        args.get(i + 1).cloned().ok_or_else(|| format!("{what} needs a value"))
    };
    let mut seconds = None;
    let mut bench = None;
    let mut threads = 2usize;
    let mut roles = Vec::new();
    let mut cgroup = None;
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
    let Some(seconds) = seconds else {
        eprintln!("morpheus-e2e-worker: --seconds is required with roles");
        return usage();
    };
    if roles.is_empty() {
        eprintln!("morpheus-e2e-worker: no role given");
        return usage();
    }
    if let Some(dir) = &cgroup {
        if let Err(e) = join_cgroup(dir) {
            eprintln!("morpheus-e2e-worker: {e}");
            return ExitCode::FAILURE;
        }
    }
    let handles: Vec<_> = roles.into_iter().map(|r| std::thread::spawn(move || (r, run_role(r, seconds)))).collect();
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
