// SPDX-License-Identifier: GPL-2.0-only
//! Starts the real scx_morpheus (simulation backend) with a temporary runtime directory and feeds it
//! bad input: options, paths, a second instance, malformed and refused registrations, a flood, and a
//! worker thread that dies without unregistering. The region comes with the REGISTER reply (SCM_RIGHTS)
//! and is read through that descriptor.

use std::fs::File;
use std::io::{Read, Write};
use std::mem::size_of;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use morpheus_abi as abi;
use morpheus_abi::{RegReply, RegRequest, RegStatus};

const BIN: &str = env!("CARGO_BIN_EXE_scx_morpheus");

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run scx_morpheus")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

struct Agent {
    child: Child,
    dir: tempfile::TempDir,
}

impl Agent {
    fn start(extra: &[&str]) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let child = spawn(dir.path(), extra);
        let agent = Agent { child, dir };
        agent.wait_ready();
        agent
    }
    fn socket(&self) -> PathBuf {
        self.dir.path().join("sock")
    }
    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while UnixStream::connect(self.socket()).is_err() {
            assert!(Instant::now() < deadline, "scx_morpheus did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    /// SIGTERM, wait; the directory lives on in the returned TempDir for checks after exit.
    fn stop(self) -> (Output, tempfile::TempDir) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        (self.child.wait_with_output().unwrap(), self.dir)
    }
}

fn spawn(dir: &Path, extra: &[&str]) -> Child {
    Command::new(BIN)
        .args(["--backend", "sim", "--socket"])
        .arg(dir.join("sock"))
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn request(op: abi::RegOp, tid: u32, slot: u32) -> RegRequest {
    RegRequest {
        magic: abi::REG_MAGIC,
        abi_major: abi::ABI_MAJOR,
        abi_minor: abi::ABI_MINOR,
        op: op.raw(),
        tid,
        slot,
        runtime_kind: abi::RuntimeKind::Rust.raw(),
        ..Default::default()
    }
}

fn send_raw(stream: &mut UnixStream, bytes: &[u8]) -> RegReply {
    stream.write_all(bytes).unwrap();
    let mut buf = [0u8; size_of::<RegReply>()];
    stream.read_exact(&mut buf).unwrap();
    let reply: RegReply = unsafe { std::ptr::read_unaligned(buf.as_ptr().cast()) };
    assert_eq!(reply.magic, abi::REG_MAGIC);
    reply
}

/// A 1.2 request (size 0): the 32-byte prefix.
fn v12_bytes(req: &RegRequest) -> &[u8] {
    let bytes = unsafe { std::slice::from_raw_parts((req as *const RegRequest).cast::<u8>(), size_of::<RegRequest>()) };
    &bytes[..std::mem::offset_of!(RegRequest, escapable)]
}

fn send(stream: &mut UnixStream, req: &RegRequest) -> RegReply {
    send_raw(stream, v12_bytes(req))
}

/// Sends `bytes` and reads one reply with the SDK's receive step, keeping the region descriptor
/// sent with it.
fn send_for_fd(stream: &mut UnixStream, bytes: &[u8]) -> (RegReply, Option<File>) {
    stream.write_all(bytes).unwrap();
    let mut buf = [0u8; size_of::<RegReply>()];
    let (n, fd) = morpheus::agent::receive_with_fd(stream, &mut buf).unwrap();
    assert_eq!(n, buf.len(), "one whole reply");
    let reply: RegReply = unsafe { std::ptr::read_unaligned(buf.as_ptr().cast()) };
    assert_eq!(reply.magic, abi::REG_MAGIC);
    (reply, fd.map(File::from))
}

fn header_of(region: &File) -> abi::RegionHeader {
    let mut buf = [0u8; size_of::<abi::RegionHeader>()];
    region.read_exact_at(&mut buf, 0).unwrap();
    unsafe { std::ptr::read_unaligned(buf.as_ptr().cast()) }
}

fn scb_of(region: &File, slot: u32) -> abi::Scb {
    let mut buf = [0u8; size_of::<abi::Scb>()];
    region.read_exact_at(&mut buf, (size_of::<abi::RegionHeader>() + slot as usize * size_of::<abi::Scb>()) as u64).unwrap();
    unsafe { std::ptr::read_unaligned(buf.as_ptr().cast()) }
}

/// Registers the calling thread and returns its slot and the region (read through the descriptor).
fn register_for_region(socket: &Path) -> (u32, File, UnixStream) {
    let mut s = UnixStream::connect(socket).unwrap();
    let (reply, fd) = send_for_fd(&mut s, v12_bytes(&request(abi::RegOp::Register, gettid(), 0)));
    assert_eq!(status(&reply), RegStatus::Ok);
    (reply.slot, fd.expect("an OK REGISTER reply carries the region descriptor"), s)
}

fn gettid() -> u32 {
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

fn status(reply: &RegReply) -> RegStatus {
    RegStatus::try_from(reply.status).unwrap()
}

#[test]
fn rejects_bad_options() {
    for (args, needle) in [
        (vec!["--slice-us", "0"], "--slice-us 0"),
        (vec!["--slice-us", "99999999999"], "too large"),
        (vec!["--grace-us", "0"], "--grace-us 0"),
        (vec!["--grace-us", "100000000000"], "too large"),
        (vec!["--max-workers", "0"], "--max-workers 0"),
        (vec!["--mode", "chaos"], "invalid value 'chaos'"),
        (vec!["--policy", "nuke"], "invalid value 'nuke'"),
        (vec!["--base-order", "fifo"], "invalid value 'fifo' for '--base-order <BASE_ORDER>'"),
        (vec!["--base-order", "fifo"], "[possible values: deadline, cputime, lag, burst, spare, recent, arrival]"),
        (vec!["--wake-margin-us", "0"], "--wake-margin-us 0: must be at least 1 µs"),
        (vec!["--wake-margin-us", "10000001"], "--wake-margin-us 10000001: too large"),
        (vec!["--wake-margin-us", "soon"], "invalid value 'soon' for '--wake-margin-us <MICROSECONDS>'"),
        (vec!["--frobnicate"], "unexpected argument '--frobnicate'"),
        (vec!["--socket", &"x".repeat(200)], "must be shorter than 108"),
        (vec!["--stats", "0"], "--stats 0"),
        (vec!["--monitor", "0"], "--monitor 0"),
        (vec!["--monitor", "nan"], "--monitor NaN"),
        (vec!["--stats", "1", "--monitor", "1"], "cannot be used with"),
    ] {
        let out = run(&args);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr(&out).contains(needle), "{args:?}: stderr {:?} lacks {needle:?}", stderr(&out));
    }
}

/// `--replay-gate` refuses a cases file it cannot read, naming the file and the line, before it
/// touches BPF (the answers themselves come from the BPF program: the VM test checks those).
#[test]
fn replay_gate_refuses_bad_case_files() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.jsonl");
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "\n").unwrap();
    let malformed = dir.path().join("malformed.jsonl");
    std::fs::write(
        &malformed,
        "{\"case\": \"a#1\", \"slot\": 0, \"runtime_ns\": 1, \"region_hex\": \"00\"}\n{\"case\": \"a#2\", \"slot\": 0}\n",
    )
    .unwrap();
    for (path, needles) in [
        (&missing, vec!["missing.jsonl", "cannot read"]),
        (&empty, vec!["no cases", "export-gate-cases"]),
        (&malformed, vec!["malformed.jsonl: line 2", "no \"runtime_ns\""]),
    ] {
        let out = run(&["--replay-gate", path.to_str().unwrap()]);
        assert!(!out.status.success(), "{} was accepted", path.display());
        assert!(out.stdout.is_empty(), "answers printed for a bad file: {:?}", String::from_utf8_lossy(&out.stdout));
        for needle in needles {
            assert!(stderr(&out).contains(needle), "{}: stderr {:?} lacks {needle:?}", path.display(), stderr(&out));
        }
    }
}

/// `--replay-gate --backend sim` is refused with a clear error and no answer: only the kernel and trace
/// backends have a BPF program to answer with (the trace backend's answers: //scheduler:trace_host_test).
#[test]
fn replay_gate_refuses_the_sim_backend() {
    let dir = tempfile::tempdir().unwrap();
    let cases = dir.path().join("cases.jsonl");
    std::fs::write(&cases, "{\"case\": \"a#1\", \"slot\": 0, \"runtime_ns\": 1, \"region_hex\": \"00\"}\n").unwrap();
    let out = run(&["--backend", "sim", "--replay-gate", cases.to_str().unwrap()]);
    assert!(!out.status.success(), "--backend sim --replay-gate was accepted");
    assert!(out.stdout.is_empty(), "answers printed: {:?}", String::from_utf8_lossy(&out.stdout));
    assert!(stderr(&out).contains("the sim backend has no BPF program"), "stderr {:?}", stderr(&out));
}

/// `--backend auto` (the default) takes the simulation backend on a kernel without sched_ext and says
/// so. (On a sched_ext kernel it would attach a real scheduler: the VM test covers that case.)
/// A path that is no file: the test-only stand-in for a kernel without BTF (MORPHEUS_TEST_BTF_PATH).
const NO_BTF: &str = "/nonexistent/morpheus-test/btf/vmlinux";

#[test]
fn backend_auto_uses_sim_without_sched_ext_or_btf() {
    if Path::new("/sys/kernel/sched_ext").exists() {
        eprintln!("skipped: this kernel has sched_ext, so auto means the kernel backend (scheduler/e2e covers it)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(BIN)
        .args(["--backend", "auto", "--socket"])
        .arg(dir.path().join("sock"))
        .env("MORPHEUS_TEST_BTF_PATH", NO_BTF)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let agent = Agent { child, dir };
    agent.wait_ready();
    let (_, region, _conn) = register_for_region(&agent.socket());
    let header = header_of(&region);
    assert_eq!(header.backend, abi::Backend::Sim.raw(), "auto chose backend {}", header.backend);
    let (out, _dir) = agent.stop();
    assert!(out.status.success(), "{}", stderr(&out));
    let expected = format!(
        "--backend auto: this kernel has no sched_ext (/sys/kernel/sched_ext is missing) and the tracing backend cannot run: \
         the kernel publishes no BTF ({NO_BTF} is missing"
    );
    assert!(stderr(&out).contains(&expected), "no log line saying why auto chose sim: {}", stderr(&out));
    assert!(stderr(&out).contains("using the simulation backend"), "{}", stderr(&out));
}

#[test]
fn trace_backend_names_the_missing_btf() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["--backend", "trace", "--socket"])
        .arg(dir.path().join("sock"))
        .env("MORPHEUS_TEST_BTF_PATH", NO_BTF)
        .output()
        .unwrap();
    assert!(!out.status.success(), "started without BTF: {}", stderr(&out));
    let expected = format!("--backend trace: the kernel publishes no BTF ({NO_BTF} is missing");
    assert!(stderr(&out).contains(&expected), "{}", stderr(&out));
    assert!(!dir.path().join("sock").exists(), "a socket was left behind");
}

/// Without bpffs where the regions are pinned (a tmpfs over /sys/fs/bpf in a mount namespace of the
/// agent's own), `--backend trace` fails naming bpffs, and auto falls back to sim saying why.
#[test]
#[ignore = "needs root and a kernel with BPF and BTF: run by //scheduler:trace_live_test"]
fn trace_backend_names_a_missing_bpffs_and_auto_falls_back_to_sim() {
    let dir = tempfile::tempdir().unwrap();
    let no_bpffs = |backend: &str| {
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", "mount -t tmpfs tmpfs /sys/fs/bpf && exec \"$0\" \"$@\"", BIN])
            .args(["--backend", backend, "--socket"])
            .arg(dir.path().join("sock"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let out = no_bpffs("trace").wait_with_output().unwrap();
    assert!(!out.status.success(), "started without bpffs: {}", stderr(&out));
    assert!(stderr(&out).contains("--backend trace: bpffs is not mounted on /sys/fs/bpf"), "{}", stderr(&out));
    if Path::new("/sys/kernel/sched_ext").exists() {
        eprintln!("skipped the auto half: this kernel has sched_ext, so auto means the kernel backend");
        return;
    }
    let agent = Agent { child: no_bpffs("auto"), dir };
    agent.wait_ready();
    let (_, region, _conn) = register_for_region(&agent.socket());
    assert_eq!(header_of(&region).backend, abi::Backend::Sim.raw());
    let (out, _dir) = agent.stop();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the tracing backend cannot run: bpffs is not mounted on /sys/fs/bpf") && stderr(&out).contains("using the simulation backend"),
        "{}",
        stderr(&out)
    );
}

/// On a kernel with BPF and BTF but no sched_ext (run as root), auto picks the tracing backend and
/// says why; its region is a BPF map (the header's backend is KERNEL). Private bpffs, as in
/// tests/escalation.rs.
#[test]
#[ignore = "needs root and a kernel with BPF and BTF: run by //scheduler:trace_live_test"]
fn trace_backend_auto_picks_the_tracing_backend_with_bpf_and_btf() {
    if Path::new("/sys/kernel/sched_ext").exists() {
        eprintln!("skipped: this kernel has sched_ext, so auto means the kernel backend");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", "mount -t bpf bpf /sys/fs/bpf && exec \"$0\" \"$@\"", BIN])
        .args(["--backend", "auto", "--socket"])
        .arg(dir.path().join("sock"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let agent = Agent { child, dir };
    agent.wait_ready();
    let (_, region, _conn) = register_for_region(&agent.socket());
    // A BPF map is read by mapping it, as every SDK does (a memfd could also be pread).
    // SAFETY: a shared read-only mapping of the region's first page, checked for MAP_FAILED, read once
    // and unmapped.
    let header: abi::RegionHeader = unsafe {
        let page = libc::sysconf(libc::_SC_PAGESIZE) as usize;
        let p = libc::mmap(std::ptr::null_mut(), page, libc::PROT_READ, libc::MAP_SHARED, region.as_raw_fd(), 0);
        assert_ne!(p, libc::MAP_FAILED, "cannot map the region: {}", std::io::Error::last_os_error());
        let header = std::ptr::read_unaligned(p.cast());
        libc::munmap(p, page);
        header
    };
    assert_eq!(header.backend, abi::Backend::Kernel.raw(), "auto chose backend {}", header.backend);
    drop(region);
    let (out, _dir) = agent.stop();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--backend auto: this kernel has no sched_ext (/sys/kernel/sched_ext is missing) but BPF with BTF: using the tracing backend"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("tracing backend attached"), "{}", stderr(&out));
}

#[test]
fn sim_refuses_a_region_path() {
    let dir = tempfile::tempdir().unwrap();
    let region = dir.path().join("region");
    std::fs::write(&region, b"precious data, not a region").unwrap();
    let out = Command::new(BIN)
        .args(["--backend", "sim", "--region"])
        .arg(&region)
        .arg("--socket")
        .arg(dir.path().join("sock"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("the sim backend has no region file"), "{}", stderr(&out));
    assert_eq!(std::fs::read(&region).unwrap(), b"precious data, not a region", "file was touched");
}

#[test]
fn publishes_region_and_retires_it_on_clean_exit() {
    let agent = Agent::start(&["--max-workers", "8", "--max-workers-per-uid", "4"]);
    let (_, region, conn) = register_for_region(&agent.socket());
    let header = header_of(&region);
    assert_eq!(header.magic, abi::REGION_MAGIC);
    assert_eq!(header.scb_count, 4, "a uid's region holds its quota");
    assert_ne!(header.generation, 0);
    assert_eq!(header.backend, abi::Backend::Sim.raw());
    // Sealed: nobody handed the descriptor can shrink or grow it (S2).
    let seals = unsafe { libc::fcntl(region.as_raw_fd(), libc::F_GET_SEALS) };
    assert_eq!(seals & (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL), libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL);
    assert!(region.set_len(0).is_err(), "truncate of the region must fail");
    let first_generation = header.generation;
    drop(conn);
    let (out, tmp) = agent.stop();
    let dir = tmp.path().to_owned();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(header_of(&region).generation, 0, "clean exit must retire the region");
    assert!(!dir.join("sock").exists(), "socket left behind");
    // The next start publishes new memory with a new nonzero generation.
    let again = Agent { child: spawn(&dir, &["--max-workers", "8"]), dir: tmp };
    again.wait_ready();
    let (_, region2, _conn) = register_for_region(&again.socket());
    let header = header_of(&region2);
    assert!(header.generation != 0 && header.generation != first_generation);
    assert_eq!(header_of(&region).generation, 0, "the old memory stays retired");
    let (out, _tmp) = again.stop();
    assert!(out.status.success());
}

#[test]
fn second_instance_is_refused_and_a_killed_one_leaves_nothing_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = spawn(dir.path(), &[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while UnixStream::connect(dir.path().join("sock")).is_err() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    let second = spawn(dir.path(), &[]).wait_with_output().unwrap();
    assert!(!second.status.success());
    assert!(stderr(&second).contains("already running"), "{}", stderr(&second));
    // Kill -9: socket file, lock files and region stay behind; the next start must not trip on them.
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(dir.path().join("sock").exists());
    let mut third = spawn(dir.path(), &[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if UnixStream::connect(dir.path().join("sock")).is_ok() {
            break;
        }
        if let Some(status) = third.try_wait().unwrap() {
            let mut err = String::new();
            third.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            panic!("restart after kill failed ({status}): {err}");
        }
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    unsafe { libc::kill(third.id() as i32, libc::SIGTERM) };
    assert!(third.wait().unwrap().success());
}

#[test]
fn registration_refusals_and_release() {
    let agent = Agent::start(&["--max-workers", "4", "--max-workers-per-process", "2"]);
    let mut s = UnixStream::connect(agent.socket()).unwrap();
    let tid = gettid();

    let mut bad = request(abi::RegOp::Register, tid, 0);
    bad.magic = 0xdead_beef;
    assert_eq!(status(&send(&mut s, &bad)), RegStatus::Malformed);
    let mut bad = request(abi::RegOp::Register, tid, 0);
    bad.op = 77;
    assert_eq!(status(&send(&mut s, &bad)), RegStatus::Malformed);
    let mut bad = request(abi::RegOp::Register, tid, 0);
    bad.abi_major = abi::ABI_MAJOR + 1;
    let reply = send(&mut s, &bad);
    assert_eq!(status(&reply), RegStatus::AbiMajorMismatch);
    assert_eq!(reply.abi_major, abi::ABI_MAJOR);
    // tid 1 (init) is not ours.
    assert_eq!(status(&send(&mut s, &request(abi::RegOp::Register, 1, 0))), RegStatus::NotCallerTid);
    assert_eq!(status(&send(&mut s, &request(abi::RegOp::Register, 0, 0))), RegStatus::NotCallerTid);

    let (ok, region) = send_for_fd(&mut s, v12_bytes(&request(abi::RegOp::Register, tid, 0)));
    let region = region.expect("region descriptor");
    assert_eq!(status(&ok), RegStatus::Ok);
    assert_eq!(ok.slot_generation, 1);
    assert_eq!(ok.region_path[0], 0, "a memfd region has no path");
    assert_eq!(status(&send(&mut s, &request(abi::RegOp::Register, tid, 0))), RegStatus::AlreadyRegistered);

    // The SCB says who holds the slot.
    let scb = scb_of(&region, ok.slot);
    assert_eq!(scb.tid, tid);
    assert_eq!(scb.pid, std::process::id());
    assert_eq!(scb.worker_state, abi::WorkerState::Registered.raw());

    // Unregister: someone else's slot / out of range -> NOT_OWNER; ours -> OK and the slot is INIT.
    assert_eq!(status(&send(&mut s, &request(abi::RegOp::Unregister, 0, 3))), RegStatus::NotOwner);
    assert_eq!(status(&send(&mut s, &request(abi::RegOp::Unregister, 0, 9999))), RegStatus::NotOwner);
    assert_eq!(status(&send(&mut s, &request(abi::RegOp::Unregister, 0, ok.slot))), RegStatus::Ok);
    let scb = scb_of(&region, ok.slot);
    assert_eq!((scb.tid, scb.pid, scb.worker_state), (0, 0, abi::WorkerState::Init.raw()));
    // That was the uid's last worker: its domain is freed and its region retired (generation 0, so a
    // runtime still mapping it detaches); the next registration gets a region of its own.
    let mut generation = [0u8; 8];
    region.read_exact_at(&mut generation, std::mem::offset_of!(abi::RegionHeader, generation) as u64).unwrap();
    assert_eq!(u64::from_le_bytes(generation), 0, "the freed domain's region is retired");

    // A 1.3 request (40 bytes) with escapable NO and priority 5: written before REGISTERED; a reply
    // of the full size, which says so. Out-of-range values are INVALID_ARGUMENT, unknown tail MALFORMED.
    let v13 = RegRequest { message_size: size_of::<RegRequest>() as u32, escapable: abi::RegEscapable::No.raw(), priority: 5, ..request(abi::RegOp::Register, tid, 0) };
    let v13_bytes = |r: &RegRequest| unsafe { std::slice::from_raw_parts((r as *const RegRequest).cast::<u8>(), size_of::<RegRequest>()) }.to_vec();
    let (reply, region) = send_for_fd(&mut s, &v13_bytes(&v13));
    let region = region.expect("region descriptor");
    assert_eq!(status(&reply), RegStatus::Ok);
    assert_eq!(reply.message_size as usize, size_of::<RegReply>());
    let scb = scb_of(&region, reply.slot);
    assert_eq!((scb.escapable, scb.priority, scb.worker_state), (0, 5, abi::WorkerState::Registered.raw()));
    assert_eq!(status(&send(&mut s, &request(abi::RegOp::Unregister, 0, reply.slot))), RegStatus::Ok);
    assert_eq!(status(&send_raw(&mut s, &v13_bytes(&RegRequest { priority: 20, ..v13 }))), RegStatus::InvalidArgument);
    assert_eq!(status(&send_raw(&mut s, &v13_bytes(&RegRequest { escapable: 7, ..v13 }))), RegStatus::InvalidArgument);
    let mut tail = v13_bytes(&RegRequest { message_size: 48, ..v13 });
    tail.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0]);
    assert_eq!(status(&send_raw(&mut s, &tail)), RegStatus::Malformed);

    // A short message gets MALFORMED and the agent stays up.
    let mut short = UnixStream::connect(agent.socket()).unwrap();
    short.write_all(&[1, 2, 3]).unwrap();
    short.shutdown(std::net::Shutdown::Write).unwrap();
    let mut buf = [0u8; size_of::<RegReply>()];
    short.read_exact(&mut buf).unwrap();
    let reply: RegReply = unsafe { std::ptr::read_unaligned(buf.as_ptr().cast()) };
    assert_eq!(status(&reply), RegStatus::Malformed);
    let (out, _tmp) = agent.stop();
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn flood_from_one_process_is_capped_and_dead_threads_are_reclaimed() {
    let agent = Agent::start(&["--max-workers", "4", "--max-workers-per-process", "2"]);
    let socket = agent.socket();
    // Threads that register and then exit without unregistering.
    let mut slots = Vec::new();
    for _ in 0..3 {
        let socket = socket.clone();
        let reply = std::thread::spawn(move || {
            let mut s = UnixStream::connect(&socket).unwrap();
            send(&mut s, &request(abi::RegOp::Register, gettid(), 0))
        })
        .join()
        .unwrap();
        slots.push(status(&reply));
    }
    // The first two fit the per-process cap; the third fits only if the exited threads were
    // already reclaimed. Either way nothing leaks: below, every slot comes back.
    assert_eq!(slots[0], RegStatus::Ok);
    assert_eq!(slots[1], RegStatus::Ok);
    assert!(matches!(slots[2], RegStatus::Ok | RegStatus::ProcessLimit), "{slots:?}");
    // A live flood: many threads alive at once.
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(6));
    let handles: Vec<_> = (0..5)
        .map(|_| {
            let (socket, barrier) = (socket.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut s = UnixStream::connect(&socket).unwrap();
                let r = status(&send(&mut s, &request(abi::RegOp::Register, gettid(), 0)));
                barrier.wait(); // stay alive until all have asked
                r
            })
        })
        .collect();
    barrier.wait();
    let results: Vec<RegStatus> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let granted = results.iter().filter(|r| **r == RegStatus::Ok).count();
    assert!(granted <= 2, "per-process cap exceeded: {results:?}");
    assert!(results.iter().all(|r| *r == RegStatus::Ok || *r == RegStatus::ProcessLimit), "{results:?}");
    assert!(results.contains(&RegStatus::ProcessLimit), "the flood was never refused: {results:?}");
    // All those threads are gone now: their slots come back.
    // All those threads are gone now: their slots come back (a registration fits again, and then
    // only our own slot is taken in the region).
    let deadline = Instant::now() + Duration::from_secs(10);
    let (slot, region) = loop {
        let mut s = UnixStream::connect(&socket).unwrap();
        let (reply, fd) = send_for_fd(&mut s, v12_bytes(&request(abi::RegOp::Register, gettid(), 0)));
        if status(&reply) == RegStatus::Ok {
            break (reply.slot, fd.unwrap());
        }
        assert_eq!(status(&reply), RegStatus::ProcessLimit);
        assert!(Instant::now() < deadline, "slots of dead threads were not reclaimed");
        std::thread::sleep(Duration::from_millis(50));
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let held = (0..2).filter(|&i| i != slot && scb_of(&region, i).worker_state != abi::WorkerState::Init.raw()).count();
        if held == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{held} slots of dead threads were not reclaimed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (out, _tmp) = agent.stop();
    assert!(out.status.success(), "{}", stderr(&out));
}
