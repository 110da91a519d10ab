// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Against the real scheduler's simulation backend (`scx_morpheus --backend sim`): registration
//! through its agent socket, a yield request it makes on its own when the worker overruns its slice,
//! and the detach when it exits. Needs the binary: `MORPHEUS_SCX_BIN=path cargo test --test
//! sim_scheduler -- --ignored`; `bazel test //sdk-rust:sim_scheduler_test` builds and passes it.

use std::{
    path::Path,
    process::{Child, Command},
    sync::Arc,
    time::{Duration, Instant},
};

use morpheus::{testing::unique_path, Backing, Config, ErrorCode, YieldReason};
use morpheus_abi::WorkerState;

struct Scheduler(Child);

impl Drop for Scheduler {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A private runtime directory for the agent (it refuses one others can write) and its socket path.
fn runtime_dir() -> (std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::DirBuilderExt;
    let dir = unique_path("scx-dir");
    std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    let socket = dir.join("agent.sock");
    (dir, socket)
}

fn start_scheduler(socket: &Path) -> Scheduler {
    let bin = std::env::var("MORPHEUS_SCX_BIN").expect("MORPHEUS_SCX_BIN names the scx_morpheus binary");
    let scheduler = Scheduler(
        Command::new(&bin)
            .args(["--backend", "sim", "--slice-us", "2000", "-w", "8"])
            .arg("--socket")
            .arg(socket)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {bin}: {e}")),
    );
    wait_for("the scheduler's socket", Duration::from_secs(20), || std::os::unix::net::UnixStream::connect(socket).is_ok());
    scheduler
}

#[test]
#[ignore = "needs scx_morpheus: set MORPHEUS_SCX_BIN and pass --ignored (//sdk-rust:sim_scheduler_test does)"]
fn a_long_lived_worker_still_releases_its_slot_after_the_agent_dropped_the_idle_connection() {
    let (dir, socket) = runtime_dir();
    let _scheduler = start_scheduler(&socket);
    // Discovery through the agent: the reply carries this user's region (a sealed memfd).
    let worker = Config::default().agent_socket(&socket).register().unwrap();
    assert_eq!(worker.region().unwrap().backing(), Backing::AgentFd);
    let slot = worker.slot().expect("attached");
    let region = worker.region().unwrap().clone();
    // Longer than scx_morpheus keeps an idle registration connection open (5 s).
    std::thread::sleep(Duration::from_secs(7));
    worker.shutdown().expect("UNREGISTER after the agent closed the idle connection");
    let scb = region.scb_ptr(slot).unwrap();
    // SAFETY: the slot's state word in the mapped region, read atomically.
    let state = unsafe { std::sync::atomic::AtomicU32::from_ptr(std::ptr::addr_of_mut!((*scb).worker_state)) };
    assert_eq!(state.load(std::sync::atomic::Ordering::Acquire), WorkerState::Init.raw(), "slot released by the agent");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs scx_morpheus: set MORPHEUS_SCX_BIN and pass --ignored (//sdk-rust:sim_scheduler_test does)"]
fn a_worker_under_the_sim_scheduler_is_asked_to_yield_and_detaches_when_it_exits() {
    let (dir, socket) = runtime_dir();
    let mut scheduler = start_scheduler(&socket);

    let worker = Config::default().agent_socket(&socket).register().unwrap();
    let slot = worker.slot().expect("attached");
    let region = worker.region().unwrap().clone();
    let scb = region.scb_ptr(slot).unwrap();
    // SAFETY: our slot in the mapped region; read with atomics.
    let load = move |off: fn(*const morpheus_abi::Scb) -> *const u64| unsafe {
        std::sync::atomic::AtomicU64::from_ptr(off(scb) as *mut u64).load(std::sync::atomic::Ordering::Acquire)
    };
    let state = unsafe { std::sync::atomic::AtomicU32::from_ptr(std::ptr::addr_of_mut!((*scb).worker_state)) };
    assert_eq!(state.load(std::sync::atomic::Ordering::Acquire), WorkerState::Running.raw());

    // Burn CPU with checkpoints until the scheduler, seeing the slice overrun, asks for a yield.
    let start = Instant::now();
    let mut x = 1u64;
    while worker.yield_counts().get(YieldReason::PreemptRequest) == 0 {
        assert!(start.elapsed() < Duration::from_secs(20), "the sim scheduler never asked for a yield");
        for _ in 0..10_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        if worker.checkpoint_sync() {
            std::thread::yield_now();
        }
    }
    std::hint::black_box(x);
    let acked = load(|s| unsafe { std::ptr::addr_of!((*s).last_ack_seq) });
    let seq = load(|s| unsafe { std::ptr::addr_of!((*s).preempt_seq) });
    assert!(acked >= 1 && acked <= seq, "last_ack_seq {acked} must be in 1..=preempt_seq {seq}");
    assert_eq!(worker.acknowledged_seq(), acked);

    // A clean exit retires the region (generation 0): the worker detaches and writes nothing more.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(scheduler.0.id() as i32, libc::SIGTERM) };
    let status = scheduler.0.wait().unwrap();
    assert!(status.success(), "scx_morpheus exited with {status}");
    assert_eq!(region.current_generation(), 0);
    assert_eq!(worker.try_checkpoint().unwrap_err().code(), ErrorCode::GenerationChanged);
    assert!(!worker.is_attached());
    drop(worker);
    // The scheduler leaves its lock and journal in its runtime directory.
    let _ = std::fs::remove_dir_all(&dir);
}

/// Burn CPU with checkpoints until `done` (bounded by `what`'s liveness timeout).
fn busy_until(worker: &morpheus::Worker, what: &str, mut done: impl FnMut(&morpheus::Worker) -> bool) {
    let start = Instant::now();
    let mut x = 1u64;
    while !done(worker) {
        assert!(start.elapsed() < Duration::from_secs(30), "timed out waiting for {what}");
        for _ in 0..10_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        if worker.checkpoint_sync() {
            std::thread::yield_now();
        }
    }
    std::hint::black_box(x);
}

#[test]
#[ignore = "needs scx_morpheus: set MORPHEUS_SCX_BIN and pass --ignored (//sdk-rust:sim_scheduler_test does)"]
fn a_worker_registers_again_on_its_own_after_the_agent_is_killed_and_restarted() {
    let (dir, socket) = runtime_dir();
    let mut scheduler = start_scheduler(&socket);
    let worker = Config::default().agent_socket(&socket).register().unwrap();
    let first_region = worker.region().unwrap().clone();
    busy_until(&worker, "a first yield request", |w| w.yield_counts().get(YieldReason::PreemptRequest) > 0);

    // SIGKILL: nothing is retired by the agent; the socket file stays behind.
    scheduler.0.kill().unwrap();
    scheduler.0.wait().unwrap();
    // Only checkpoints: the watcher retires this process's view, so the worker is lost at one of them.
    busy_until(&worker, "the worker to notice the kill", |w| w.is_waiting_for_scheduler());
    assert!(!worker.is_attached());
    assert_eq!(worker.status().unwrap_err().code(), ErrorCode::GenerationChanged);
    assert_eq!(first_region.current_generation(), 0, "this process's view of the dead region is retired");
    assert_eq!(worker.reattachments(), 0);

    let _restarted = start_scheduler(&socket);
    let yields_before = worker.yield_counts().get(YieldReason::PreemptRequest);
    busy_until(&worker, "the new instance's first yield request", |w| {
        w.yield_counts().get(YieldReason::PreemptRequest) > yields_before
    });
    assert_eq!(worker.reattachments(), 1, "registered again exactly once");
    assert!(worker.is_attached());
    worker.status().unwrap();
    assert!(!Arc::ptr_eq(worker.region().unwrap(), &first_region), "attached to the new instance's region");
    drop(worker);
    let _ = std::fs::remove_dir_all(&dir);
}
