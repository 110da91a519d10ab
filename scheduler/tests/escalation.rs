// SPDX-License-Identifier: GPL-2.0-only
//! Escalation end to end in the simulation backend and in the tracing backend: the real scx_morpheus
//! with a temporary socket, worker threads of this process registered through its socket with the
//! `morpheus` SDK (as an application would), and the SCB, the threads' scheduling policy and the
//! agent's stats (read as structured data through its stats socket) as the judges.
//!
//! The tracing backend's variants (`trace_*`) load the real BPF programs into the running kernel, so
//! they need root and a kernel with BPF and BTF: they are ignored by a plain `cargo test` and run by
//! //scheduler:trace_live_test. Each agent runs in a mount namespace of its own with a private bpffs
//! on /sys/fs/bpf, so its region pins never meet another test's or a running scheduler's.
//!
//! Nothing here asserts how fast anything happens: every wait polls a condition with a generous
//! deadline, so a loaded 2-CPU machine only makes the tests slower.

use std::cell::RefCell;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::ptr::addr_of_mut;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use morpheus_abi as abi;
use scx_morpheus::snapshot::{EventStats, Metrics};
use scx_morpheus::stats_socket::{self, Reader};

const BIN: &str = env!("CARGO_BIN_EXE_scx_morpheus");
const SLICE_US: u64 = 2_000;
const GRACE_US: u64 = 2_000;
/// How long any awaited condition may take before the test fails. Generous: other builds share the
/// two CPUs, and a demoted (SCHED_IDLE) thread runs only when nothing else wants its CPU.
const PATIENCE: Duration = Duration::from_secs(120);

/// The escalation events of one snapshot with `action` for thread `tid`.
fn events<'a>(m: &'a Metrics, action: &str, tid: u32) -> Vec<&'a EventStats> {
    m.recent_events.iter().filter(|e| e.action == action && e.tid == u64::from(tid)).collect()
}

fn count(map: &std::collections::BTreeMap<String, u64>, key: &str) -> u64 {
    *map.get(key).unwrap_or_else(|| panic!("no {key} in {map:?}"))
}

/// Every event of the run is still in the snapshot's window (the checks below count them).
fn all_events(m: &Metrics) -> &[EventStats] {
    assert_eq!(m.events_total, m.recent_events.len() as u64, "events fell out of the stats window");
    &m.recent_events
}

struct Agent {
    child: RefCell<Child>,
    dir: tempfile::TempDir,
    /// The agent's stats socket, connected on first use.
    stats: RefCell<Option<Reader>>,
    /// This process's region, as the first worker received it from the agent.
    region: RefCell<Option<Arc<morpheus::Region>>>,
}

/// The backend a test runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Sim,
    /// The tracing backend, in a private mount namespace with its own bpffs on /sys/fs/bpf.
    Trace,
}

impl Backend {
    /// The header's `backend` as the stats name it.
    fn header_name(self) -> &'static str {
        match self {
            Backend::Sim => "SIM",
            // The tracing backend publishes the kernel backend's kind of region (src/trace.rs).
            Backend::Trace => "KERNEL",
        }
    }

    /// The command that runs scx_morpheus with this backend.
    fn command(self) -> Command {
        match self {
            Backend::Sim => {
                let mut c = Command::new(BIN);
                c.args(["--backend", "sim"]);
                c
            }
            Backend::Trace => {
                let mut c = Command::new("unshare");
                c.args(["--mount", "--propagation", "private", "sh", "-c", "mount -t bpf bpf /sys/fs/bpf && exec \"$0\" \"$@\"", BIN]);
                // Debug lines (each effect and its failure) in the stderr a failed test prints.
                c.args(["--backend", "trace", "-v"]);
                c
            }
        }
    }
}

impl Agent {
    /// scx_morpheus on `backend` with a short slice and grace, and `extra`.
    fn start_on(backend: Backend, extra: &[&str]) -> Agent {
        Agent::start_with_grace(backend, GRACE_US, extra)
    }

    /// scx_morpheus on `backend` with a short slice, a grace of `grace_us`, and `extra`.
    fn start_with_grace(backend: Backend, grace_us: u64, extra: &[&str]) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let stderr = std::fs::File::create(dir.path().join("stderr")).unwrap();
        let child = backend
            .command()
            .args(["--max-workers", "8"])
            .args(["--slice-us", &SLICE_US.to_string(), "--grace-us", &grace_us.to_string()])
            .arg("--socket")
            .arg(dir.path().join("sock"))
            .args(extra)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let agent = Agent { child: RefCell::new(child), dir, stats: RefCell::new(None), region: RefCell::new(None) };
        agent.wait("the agent's socket", || std::os::unix::net::UnixStream::connect(agent.socket()).ok().map(|_| ()));
        agent
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("sock")
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    /// A snapshot of the agent's stats, read through its stats socket (scx_stats JSON).
    fn stats(&self) -> Metrics {
        let mut reader = self.stats.borrow_mut();
        if reader.is_none() {
            let path = stats_socket::path_for(&self.socket());
            *reader = Some(Reader::connect_within(&path, PATIENCE).unwrap_or_else(|e| panic!("{e:#}; stderr:\n{}", self.stderr())));
        }
        reader.as_mut().unwrap().fetch().unwrap_or_else(|e| panic!("{e:#}; stderr:\n{}", self.stderr()))
    }

    /// Waits until the agent has run `n` more ticks (each one evaluates every worker once).
    fn ticks(&self, n: u64) {
        let start = self.stats().ticks;
        self.wait(&format!("{n} more ticks"), || (self.stats().ticks >= start + n).then_some(()));
    }

    /// Polls `probe` until it yields a value; fails after PATIENCE or if the agent exits.
    fn wait<T>(&self, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(value) = probe() {
                return value;
            }
            if let Some(status) = self.child.borrow_mut().try_wait().unwrap() {
                panic!("scx_morpheus exited ({status}) while waiting for {what}; stderr:\n{}", self.stderr());
            }
            assert!(Instant::now() < deadline, "timed out after {PATIENCE:?} waiting for {what}; stderr:\n{}", self.stderr());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The SCB of `slot`, field by field with atomic loads (the agent writes it concurrently).
    fn scb(&self, slot: u32) -> ScbView {
        let region = self.region.borrow().clone().expect("a worker registered");
        let scb = region.scb_ptr(slot).unwrap();
        // SAFETY: scb points into the live mapping held by self.region; every field read is naturally
        // aligned and only ever accessed atomically by the agent and the SDK.
        unsafe {
            let u64_at = |p: *mut u64| AtomicU64::from_ptr(p).load(Ordering::Acquire);
            let u32_at = |p: *mut u32| AtomicU32::from_ptr(p).load(Ordering::Acquire);
            ScbView {
                preempt_seq: u64_at(addr_of_mut!((*scb).preempt_seq)),
                last_ack_seq: u64_at(addr_of_mut!((*scb).last_ack_seq)),
                yield_count: u64_at(addr_of_mut!((*scb).yield_count)),
                hints_dropped: u32_at(addr_of_mut!((*scb).hints_dropped)),
                escalations: u32_at(addr_of_mut!((*scb).escalations)),
                escalated: u32_at(addr_of_mut!((*scb).escalated)),
                escapable: u32_at(addr_of_mut!((*scb).escapable)),
                in_critical: u32_at(addr_of_mut!((*scb).in_critical)),
                worker_state: u32_at(addr_of_mut!((*scb).worker_state)),
                tid: u32_at(addr_of_mut!((*scb).tid)),
            }
        }
    }

    /// SIGTERM and wait; the agent must exit cleanly.
    fn stop(mut self) {
        self.region.get_mut().take();
        self.stats.get_mut().take();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.get_mut().id() as libc::pid_t, libc::SIGTERM) };
        let status = self.child.get_mut().wait().unwrap();
        assert!(status.success(), "scx_morpheus exited with {status}; stderr:\n{}", self.stderr());
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        // A failed test must not leave the agent running.
        let _ = self.child.get_mut().kill();
        let _ = self.child.get_mut().wait();
    }
}

#[derive(Clone, Copy, Debug)]
#[allow(dead_code)] // every field is printed by Debug in failure messages
struct ScbView {
    preempt_seq: u64,
    last_ack_seq: u64,
    yield_count: u64,
    hints_dropped: u32,
    escalations: u32,
    escalated: u32,
    escapable: u32,
    in_critical: u32,
    worker_state: u32,
    tid: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// The SDK's Rust default (escapable), outside any critical section.
    Escapable,
    /// Escapable, but spinning inside a critical section.
    InCritical,
    /// Opted out of escalation.
    NotEscapable,
    /// Escapable, and between every few microseconds of work it counts a yield in `yield_count`
    /// without acknowledging anything and without sleeping, as a budget yield in the PRESSURED or
    /// DEFENSIVE mode does (sched_yield keeps the thread runnable).
    YieldsWithoutAck,
}

// Commands to a spinning worker.
const SPIN: u32 = 0;
/// Leave the spin loop, call one checkpoint (reporting whether it yielded), then block.
const CHECKPOINT: u32 = 1;
/// Leave the spin loop without a checkpoint, then block.
const STOP: u32 = 2;
/// Unregister and end the thread.
const EXIT: u32 = 3;
/// Enter a critical section and go on spinning inside it.
const SPIN_IN_CRITICAL: u32 = 4;

/// A thread of this process registered through the agent's socket with the morpheus SDK that spins
/// without ever reaching a checkpoint until told otherwise.
struct Spinner {
    tid: u32,
    /// The thread's scheduling policy before it registered (before anything could demote it).
    original_policy: libc::c_int,
    slot: u32,
    command: Arc<AtomicU32>,
    /// What the worker did on leaving the spin loop: Some(yielded) after CHECKPOINT, None after STOP.
    left: mpsc::Receiver<Option<bool>>,
    thread: JoinHandle<()>,
}

impl Spinner {
    fn start(agent: &Agent, kind: Kind) -> Spinner {
        let socket = agent.socket();
        let command = Arc::new(AtomicU32::new(SPIN));
        let (registered_tx, registered) = mpsc::channel();
        let (left_tx, left) = mpsc::channel();
        let cmd = Arc::clone(&command);
        let thread = std::thread::Builder::new()
            .name(format!("{kind:?}"))
            .spawn(move || {
                // SAFETY: 0 is the calling thread.
                let original_policy = unsafe { libc::sched_getscheduler(0) };
                // Discovery through the agent: its reply carries this user's region.
                let mut config = morpheus::Worker::builder().agent_socket(socket);
                if kind == Kind::NotEscapable {
                    config = config.escapable(false);
                }
                let worker = match config.register() {
                    Ok(worker) => worker,
                    Err(e) => return registered_tx.send(Err(e.to_string())).unwrap(),
                };
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
                let region = worker.region().expect("attached").clone();
                let scb = region.scb_ptr(worker.slot().unwrap()).unwrap();
                // SAFETY: a field address inside the SCB scb_ptr returned, in the mapping `region` holds.
                let yield_count = unsafe { addr_of_mut!((*scb).yield_count) };
                registered_tx.send(Ok((tid, worker.slot().expect("registered through the agent"), original_policy, region))).unwrap();
                let mut guard = (kind == Kind::InCritical).then(|| worker.critical_section());
                let mut x = 0u64;
                loop {
                    match cmd.load(Ordering::Relaxed) {
                        SPIN => {}
                        SPIN_IN_CRITICAL if guard.is_none() => guard = Some(worker.critical_section()),
                        SPIN_IN_CRITICAL => {}
                        _ => break,
                    }
                    for _ in 0..1000 {
                        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
                    }
                    if kind == Kind::YieldsWithoutAck {
                        // SAFETY: the field of this worker's own SCB in the mapping `region` holds; the
                        // runtime is its writer (spec/SCB.md §3).
                        unsafe { AtomicU64::from_ptr(yield_count).fetch_add(1, Ordering::Relaxed) };
                    }
                }
                let outcome = (cmd.load(Ordering::Relaxed) == CHECKPOINT).then(|| worker.checkpoint_sync());
                left_tx.send(outcome).unwrap();
                // Block (a voluntary sleep: the scheduler sees a yield point) until told to exit.
                while cmd.load(Ordering::Relaxed) != EXIT {
                    std::thread::park_timeout(Duration::from_millis(50));
                }
                drop(guard);
                drop(worker);
            })
            .unwrap();
        let (tid, slot, original_policy, region) = registered
            .recv_timeout(PATIENCE)
            .expect("the worker thread did not report its registration")
            .unwrap_or_else(|e| panic!("{kind:?} worker: registration through the agent failed: {e}"));
        agent.region.borrow_mut().get_or_insert(region);
        Spinner { tid, slot, original_policy, command, left, thread }
    }

    /// Leave the spin loop (CHECKPOINT or STOP) and wait until the thread did.
    fn leave(&self, how: u32) -> Option<bool> {
        self.command.store(how, Ordering::Relaxed);
        self.thread.thread().unpark();
        self.left.recv_timeout(PATIENCE).expect("the worker did not leave its spin loop")
    }

    fn exit(self) {
        self.command.store(EXIT, Ordering::Relaxed);
        self.thread.thread().unpark();
        self.thread.join().expect("worker thread panicked");
    }

    /// The thread's scheduling policy (SCHED_OTHER, SCHED_IDLE, ...).
    fn policy(&self) -> libc::c_int {
        // SAFETY: plain syscall on a thread id of this process.
        let policy = unsafe { libc::sched_getscheduler(self.tid as libc::pid_t) };
        assert!(policy >= 0, "sched_getscheduler({}): {}", self.tid, std::io::Error::last_os_error());
        policy
    }

    /// Whether the thread is blocked (state S in /proc: it parked after leaving its spin loop).
    fn sleeping(&self) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{}/stat", self.tid)).unwrap();
        // The state follows the parenthesised name, which may itself contain spaces or parentheses.
        stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('S'))
    }

    /// CPU time the thread has consumed (the kernel's sum_exec_runtime).
    fn cpu_ns(&self) -> u64 {
        let text = std::fs::read_to_string(format!("/proc/self/task/{}/schedstat", self.tid)).unwrap();
        text.split_whitespace().next().unwrap().parse().unwrap()
    }
}

/// Enough CPU time that a worker spinning since registration is far past slice + grace, whichever
/// kernel-tick granularity the scheduler sees it at.
const WELL_PAST_GRACE_NS: u64 = 25 * (SLICE_US + GRACE_US) * 1000;

#[test]
fn enforced_escalates_only_the_escapable_worker_outside_critical_sections_and_restores_on_ack() {
    escalates_only_the_escapable_worker(Backend::Sim);
}

#[test]
#[ignore = "needs root and a kernel with BPF and BTF: run by //scheduler:trace_live_test"]
fn trace_enforced_escalates_only_the_escapable_worker_outside_critical_sections_and_restores_on_ack() {
    escalates_only_the_escapable_worker(Backend::Trace);
}

fn escalates_only_the_escapable_worker(backend: Backend) {
    // A bound far beyond the test: only an acknowledgement can lift the escalation here.
    let agent = Agent::start_on(backend, &["--mode", "enforced", "--policy", "kick", "--throttle-max-ms", "60000"]);
    let escapable = Spinner::start(&agent, Kind::Escapable);
    let critical = Spinner::start(&agent, Kind::InCritical);
    let opted_out = Spinner::start(&agent, Kind::NotEscapable);
    let original_policy = escapable.original_policy;
    assert_ne!(original_policy, libc::SCHED_IDLE);
    assert_eq!(agent.scb(escapable.slot).escapable, 1, "the Rust SDK's default is escapable");
    assert_eq!(agent.scb(opted_out.slot).escapable, 0);
    for w in [&escapable, &critical, &opted_out] {
        assert_eq!(agent.scb(w.slot).tid, w.tid);
    }
    let (escapable_tid, spared_tids) = (escapable.tid, [critical.tid, opted_out.tid]);

    // The escapable worker ignores its hints: demoted to SCHED_IDLE, escalated = 1.
    agent.wait("the escapable worker to be escalated and demoted to SCHED_IDLE", || {
        let scb = agent.scb(escapable.slot);
        (scb.escalated == 1 && scb.escalations >= 1 && escapable.policy() == libc::SCHED_IDLE).then_some(())
    });
    let scb = agent.scb(escapable.slot);
    assert!(scb.preempt_seq > scb.last_ack_seq, "escalated without a pending request: {scb:?}");

    // The other two spin just as long past slice + grace with hints pending, and the gate keeps
    // blocking them for the right reason.
    let (critical_at, opted_out_at) = agent.wait("the critical and opted-out workers to run well past slice + grace, blocked by the gate", || {
        for w in [&critical, &opted_out] {
            let scb = agent.scb(w.slot);
            assert_eq!(scb.escalations, 0, "{:?} worker was escalated: {scb:?}", w.thread.thread().name());
        }
        let long_enough = critical.cpu_ns() > WELL_PAST_GRACE_NS && opted_out.cpu_ns() > WELL_PAST_GRACE_NS;
        let m = agent.stats();
        let (c, n) = (count(&m.gate_verdicts, "critical"), count(&m.gate_verdicts, "not_escapable"));
        (long_enough && c > 0 && n > 0).then_some((c, n))
    });
    agent.wait("blocked_critical and blocked_not_escapable to keep increasing", || {
        let m = agent.stats();
        let (c, n) = (count(&m.gate_verdicts, "critical"), count(&m.gate_verdicts, "not_escapable"));
        (c > critical_at && n > opted_out_at).then_some(())
    });
    // The stats' worker view agrees with the SCBs: who is escalated, who is in a section, who opted out.
    let m = agent.stats();
    let view = |tid: u32| m.workers.iter().find(|w| w.tid == u64::from(tid)).unwrap_or_else(|| panic!("tid {tid} not in {:?}", m.workers));
    let (e, c, o) = (view(escapable.tid), view(critical.tid), view(opted_out.tid));
    assert_eq!((e.escalated, e.escapable, e.in_critical, e.state.as_str()), (1, 1, 0, "RUNNING"), "{e:?}");
    assert!(e.escalations >= 1 && e.pending_requests >= 1, "{e:?}");
    assert_eq!((c.escalated, c.escalations, c.in_critical), (0, 0, 1), "{c:?}");
    assert_eq!((o.escalated, o.escalations, o.escapable), (0, 0, 0), "{o:?}");
    assert!(m.workers.iter().all(|w| w.pid == u64::from(std::process::id()) && w.runtime_kind == "RUST"), "{:?}", m.workers);
    assert_eq!(m.nr_workers, 3);
    for (name, w, in_critical, escapable_flag) in [("critical", &critical, 1, 1), ("opted-out", &opted_out, 0, 0)] {
        let scb = agent.scb(w.slot);
        assert_eq!((scb.escalations, scb.escalated), (0, 0), "{name} worker was escalated: {scb:?}");
        assert_eq!((scb.in_critical, scb.escapable), (in_critical, escapable_flag), "{name}: {scb:?}");
        assert!(scb.preempt_seq > scb.last_ack_seq, "{name} worker has no pending request, the gate test proves nothing: {scb:?}");
        assert_ne!(w.policy(), libc::SCHED_IDLE, "{name} worker was demoted");
    }
    critical.exit();
    opted_out.exit();

    // The escalated worker acknowledges: the demotion is lifted and it is not escalated again.
    let before = agent.scb(escapable.slot);
    assert_eq!(before.escalated, 1, "lifted before any acknowledgement: {before:?}");
    assert_eq!(escapable.leave(CHECKPOINT), Some(true), "a checkpoint with a pending request must yield");
    let after = agent.wait("the escalation to be lifted after the acknowledgement", || {
        let scb = agent.scb(escapable.slot);
        (scb.escalated == 0 && escapable.policy() == original_policy).then_some(scb)
    });
    assert!(after.last_ack_seq >= before.preempt_seq, "{before:?} -> {after:?}");
    assert_eq!(after.yield_count, before.yield_count + 1);
    // One episode, one action: the state machine decides a repeated kick once per grace period, but
    // both backends' kick is a demotion that stands until the lift, so a repeat is no action
    // (morpheus_step_takes_effect) and `escalations` counts the one demotion.
    assert_eq!(after.escalations, 1, "{before:?} -> {after:?}");
    agent.wait("the restore to show in the stats", || (count(&agent.stats().actions, "RESTORE") >= 1).then_some(()));
    agent.ticks(300);
    let later = agent.scb(escapable.slot);
    assert_eq!((later.escalations, later.escalated), (after.escalations, 0), "escalated again while blocked: {later:?}");
    escapable.exit();

    let m = agent.wait("every demotion to be undone", || {
        let m = agent.stats();
        (m.nr_workers == 0 && count(&m.actions, "RESTORE") == count(&m.actions, "DEMOTE")).then_some(m)
    });
    // Applied escalations: all under THREAD_KICK, all to the one escapable worker (its SCB's count),
    // each one a gate verdict ESCALATE (the gate may say so again while the step waits).
    assert_eq!(m.escalations, u64::from(later.escalations), "{m:?}");
    assert_eq!(count(&m.escalations_by_policy, "THREAD_KICK"), m.escalations, "{m:?}");
    assert!(count(&m.gate_verdicts, "escalate") >= m.escalations, "{m:?}");
    assert_eq!(count(&m.actions, "DEMOTE"), 1, "{m:?}");
    assert!(count(&m.gate_verdicts, "critical") >= critical_at, "{m:?}");
    assert!(count(&m.gate_verdicts, "not_escapable") >= opted_out_at, "{m:?}");
    assert_eq!(m.effect_errors, 0, "{m:?}; stderr:\n{}", agent.stderr());
    assert!(m.reactions["escalation"].count >= 1 && m.reactions["hint"].count >= 1, "{:?}", m.reactions);
    // One escalation_event per action: the demotion (for a pending request) and its undoing.
    let all = all_events(&m);
    let demotions = events(&m, "DEMOTE", escapable_tid);
    assert_eq!(demotions.len() as u64, count(&m.actions, "DEMOTE"), "{all:?}");
    assert!(demotions.iter().all(|e| e.policy == "THREAD_KICK" && e.preempt_seq != 0), "{demotions:?}");
    assert_eq!(events(&m, "RESTORE", escapable_tid).len() as u64, count(&m.actions, "RESTORE"), "{all:?}");
    for tid in spared_tids {
        assert!(all.iter().all(|e| e.tid != u64::from(tid)), "event for a spared worker: {all:?}");
    }
    agent.stop();
}

#[test]
fn enforced_escalation_is_lifted_after_the_throttle_bound_without_an_acknowledgement() {
    lifted_after_the_bound(Backend::Sim);
}

#[test]
#[ignore = "needs root and a kernel with BPF and BTF: run by //scheduler:trace_live_test"]
fn trace_enforced_escalation_is_lifted_after_the_throttle_bound_without_an_acknowledgement() {
    lifted_after_the_bound(Backend::Trace);
}

fn lifted_after_the_bound(backend: Backend) {
    let agent = Agent::start_on(backend, &["--mode", "enforced", "--policy", "kick", "--throttle-max-ms", "300"]);
    let worker = Spinner::start(&agent, Kind::Escapable);
    let original_policy = worker.original_policy;

    // Still ignoring its hints when the bound lapses: restored, and escalated again. A second episode
    // is a second demotion; an episode's repeated kicks find its demotion in force and are no action,
    // so `escalations` counts the demotions, one per episode.
    let tid = worker.tid;
    agent.wait("a second demotion after the first one's bound lapsed", || {
        let m = agent.stats();
        (count(&m.actions, "RESTORE") >= 1 && events(&m, "DEMOTE", tid).len() >= 2).then_some(())
    });

    // It stops spinning without ever acknowledging: only the bound can lift the escalation now. Until
    // the (demoted) thread actually blocks, it is still running past its slice and may rightly be
    // escalated again after a lapse; so the claim is checked once the agent has seen it asleep.
    assert_eq!(worker.leave(STOP), None);
    agent.wait("the worker thread to block", || worker.sleeping().then_some(()));
    agent.ticks(50);
    let lifted = agent.wait("the escalation to be lifted by the throttle bound", || {
        let scb = agent.scb(worker.slot);
        (scb.escalated == 0 && worker.policy() == original_policy).then_some(scb)
    });
    assert!(lifted.preempt_seq > lifted.last_ack_seq, "it never acknowledged: {lifted:?}");
    assert_eq!(lifted.yield_count, 0, "{lifted:?}");
    // And it stays lifted (the worker sleeps: a yield point for the scheduler), for a few more ticks.
    agent.ticks(300);
    let later = agent.scb(worker.slot);
    assert_eq!((later.escalated, later.escalations), (0, lifted.escalations), "{lifted:?} -> {later:?}");
    assert_eq!(worker.policy(), original_policy);
    worker.exit();

    let m = agent.wait("every demotion to be undone", || {
        let m = agent.stats();
        (m.nr_workers == 0 && count(&m.actions, "RESTORE") == count(&m.actions, "DEMOTE")).then_some(m)
    });
    assert!(m.escalations >= 2, "{m:?}");
    assert_eq!(m.escalations, count(&m.actions, "DEMOTE"), "one action per episode: {m:?}");
    assert_eq!(u64::from(later.escalations), m.escalations, "{later:?}; {m:?}");
    assert_eq!(m.effect_errors, 0, "{m:?}; stderr:\n{}", agent.stderr());
    let all = all_events(&m);
    assert!(events(&m, "DEMOTE", tid).len() >= 2, "{all:?}");
    assert_eq!(events(&m, "RESTORE", tid).len(), events(&m, "DEMOTE", tid).len(), "{all:?}");
    agent.stop();
}

#[test]
fn observer_mode_hints_a_spinning_worker_but_never_escalates_it() {
    observer_never_escalates(Backend::Sim);
}

#[test]
#[ignore = "needs root and a kernel with BPF and BTF: run by //scheduler:trace_live_test"]
fn trace_observer_mode_hints_a_spinning_worker_but_never_escalates_it() {
    observer_never_escalates(Backend::Trace);
}

fn observer_never_escalates(backend: Backend) {
    let agent = Agent::start_on(backend, &["--mode", "observer", "--policy", "kick"]);
    let worker = Spinner::start(&agent, Kind::Escapable);
    let original_policy = worker.original_policy;
    let first = agent.scb(worker.slot);

    let hinted = agent.wait("hints to the spinning worker well past slice + grace, blocked by observer mode", || {
        let scb = agent.scb(worker.slot);
        assert_eq!(scb.escalations, 0, "observer mode escalated: {scb:?}");
        let blocked = count(&agent.stats().gate_verdicts, "mode");
        (scb.preempt_seq >= first.preempt_seq + 5 && worker.cpu_ns() > WELL_PAST_GRACE_NS && blocked > 0).then_some(scb)
    });
    assert_eq!((hinted.escalations, hinted.escalated), (0, 0), "observer mode escalated: {hinted:?}");
    assert_eq!((hinted.escapable, hinted.in_critical), (1, 0), "{hinted:?}");
    assert!(hinted.last_ack_seq < hinted.preempt_seq, "{hinted:?}");
    assert_eq!(hinted.worker_state, abi::WorkerState::Running.raw());
    assert_eq!(worker.policy(), original_policy, "observer mode demoted the worker");
    worker.exit();

    let m = agent.wait("the worker to be gone", || Some(agent.stats()).filter(|m| m.nr_workers == 0));
    assert_eq!((m.mode.as_str(), m.backend.as_str()), ("OBSERVER", backend.header_name()));
    assert!(m.hints_emitted >= 5, "{m:?}");
    assert_eq!(m.escalations, 0, "{m:?}");
    assert_eq!(count(&m.actions, "DEMOTE"), 0, "{m:?}");
    assert!(count(&m.gate_verdicts, "mode") > 0, "{m:?}");
    assert!(m.recent_events.is_empty() && m.events_total == 0, "escalation events in observer mode: {:?}", m.recent_events);
    agent.stop();
}

/// The yield-point rule is the policy header's (`morpheus_yield_point`, spec/SCB.md §5.2): a yield that
/// acknowledges nothing and does not sleep (only `yield_count` moves) leaves the slice running, so a
/// worker that only does such yields runs past slice + grace and is escalated, as under the kernel
/// backend. The grace (20 ms) is longer than the CPU time a thread's schedstat can lag behind (one
/// kernel tick, at most 10 ms): a backend that started a new slice at every such yield would never see
/// this worker past slice + grace.
#[test]
fn a_yield_that_acknowledges_nothing_does_not_start_a_new_slice() {
    yield_without_ack_is_no_yield_point(Backend::Sim);
}

#[test]
#[ignore = "needs root and a kernel with BPF and BTF: run by //scheduler:trace_live_test"]
fn trace_a_yield_that_acknowledges_nothing_does_not_start_a_new_slice() {
    yield_without_ack_is_no_yield_point(Backend::Trace);
}

fn yield_without_ack_is_no_yield_point(backend: Backend) {
    let agent = Agent::start_with_grace(backend, 20_000, &["--mode", "enforced", "--policy", "kick"]);
    let worker = Spinner::start(&agent, Kind::YieldsWithoutAck);
    let first = agent.wait("the worker's first yields", || Some(agent.scb(worker.slot)).filter(|scb| scb.yield_count > 0));
    let escalated = agent.wait("the escalation of the worker that yields without acknowledging", || {
        let scb = agent.scb(worker.slot);
        (scb.escalations > 0).then_some(scb)
    });
    assert!(escalated.yield_count > first.yield_count, "{escalated:?}");
    assert_eq!(escalated.last_ack_seq, first.last_ack_seq, "the worker acknowledged: {escalated:?}");
    worker.exit();
    agent.stop();
}

/// Gate verdicts are counted by the policy header's rule (`morpheus_verdict_count`), as the kernel
/// backend counts them: once per pending request and verdict, never once per tick. Observer mode gives
/// every request the verdict "mode", and the longest hint interval keeps the requests few, while the
/// backend looks at the worker far more often (sim ticks, BPF timer runs): the count can never exceed the requests made.
#[test]
fn a_gate_verdict_is_counted_once_per_request_not_per_tick() {
    verdict_counted_once_per_request(Backend::Sim);
}

#[test]
#[ignore = "needs root and a kernel with BPF and BTF: run by //scheduler:trace_live_test"]
fn trace_a_gate_verdict_is_counted_once_per_request_not_per_tick() {
    verdict_counted_once_per_request(Backend::Trace);
}

fn verdict_counted_once_per_request(backend: Backend) {
    let agent = Agent::start_on(backend, &["--mode", "observer", "--policy", "kick", "--hint-interval-us", "10000000"]);
    let worker = Spinner::start(&agent, Kind::Escapable);
    agent.wait("a verdict counted for the spinning worker", || (count(&agent.stats().gate_verdicts, "mode") > 0).then_some(()));
    agent.ticks(20);
    let counted = count(&agent.stats().gate_verdicts, "mode");
    // Read after the count: every request counted so far is in it.
    let requests = agent.scb(worker.slot).preempt_seq;
    assert!(counted <= requests, "{counted} verdicts \"mode\" counted for {requests} requests");
    worker.exit();
    agent.stop();
}

/// A rate-limited decision while the worker's request is pending loses no hint (spec/SCB.md §5.2, 1.5;
/// `morpheus_hint_decide`): a worker spinning past its slice with its one request unacknowledged is
/// decided for again at every tick (sim) or check (trace) within the longest hint interval, and
/// `hints_dropped` stays 0, so its SDK never goes DEFENSIVE. Under 1.4 every such decision counted a
/// dropped hint. The verdict depends on no timing: with nothing ever acknowledged, no decision after
/// the first hint has "nothing pending", however many there are.
#[test]
fn a_worker_with_its_request_pending_loses_no_hint() {
    pending_request_drops_no_hint(Backend::Sim);
}

#[test]
#[ignore = "needs root and a kernel with BPF and BTF: run by //scheduler:trace_live_test"]
fn trace_a_worker_with_its_request_pending_loses_no_hint() {
    pending_request_drops_no_hint(Backend::Trace);
}

fn pending_request_drops_no_hint(backend: Backend) {
    let agent = Agent::start_on(backend, &["--mode", "observer", "--policy", "kick", "--hint-interval-us", "10000000"]);
    let worker = Spinner::start(&agent, Kind::Escapable);
    agent.wait("the first hint to the spinning worker", || (agent.scb(worker.slot).preempt_seq > 0).then_some(()));
    // Decisions past the slice, within the interval, the request pending: the spinner never acknowledges.
    agent.ticks(20);
    agent.wait("the worker well past its slice", || (worker.cpu_ns() > WELL_PAST_GRACE_NS).then_some(()));
    agent.ticks(5);
    let scb = agent.scb(worker.slot);
    assert!(scb.preempt_seq > scb.last_ack_seq, "the request is not pending: {scb:?}");
    assert_eq!(scb.hints_dropped, 0, "hints counted as dropped while the request was pending: {scb:?}");
    assert_eq!(agent.stats().hints_dropped, 0, "the agent counted dropped hints: {scb:?}");
    worker.exit();
    agent.stop();
}

#[test]
fn entering_a_critical_section_lifts_an_escalation_and_none_is_applied_inside_it() {
    critical_section_lifts(Backend::Sim);
}

#[test]
#[ignore = "needs root and a kernel with BPF and BTF: run by //scheduler:trace_live_test"]
fn trace_entering_a_critical_section_lifts_an_escalation_and_none_is_applied_inside_it() {
    critical_section_lifts(Backend::Trace);
}

fn critical_section_lifts(backend: Backend) {
    // A bound far beyond the test: only the critical section can lift the escalation here.
    let agent = Agent::start_on(backend, &["--mode", "enforced", "--policy", "kick", "--throttle-max-ms", "60000"]);
    let worker = Spinner::start(&agent, Kind::Escapable);
    let original_policy = worker.original_policy;
    agent.wait("the spinning worker to be escalated and demoted", || {
        let scb = agent.scb(worker.slot);
        (scb.escalated == 1 && worker.policy() == libc::SCHED_IDLE).then_some(())
    });

    // Still spinning, never acknowledging, but now inside a critical section: the episode is lifted
    // (the demotion undone) and no new one opens while the section lasts.
    worker.command.store(SPIN_IN_CRITICAL, Ordering::Relaxed);
    let lifted = agent.wait("the escalation to be lifted by the critical section", || {
        let scb = agent.scb(worker.slot);
        (scb.in_critical == 1 && scb.escalated == 0 && worker.policy() == original_policy).then_some(scb)
    });
    assert!(lifted.preempt_seq > lifted.last_ack_seq, "it never acknowledged: {lifted:?}");
    let blocked = count(&agent.stats().gate_verdicts, "critical");
    agent.wait("the gate to block the worker in its section, tick after tick", || {
        let scb = agent.scb(worker.slot);
        assert_eq!((scb.escalated, scb.escalations), (0, lifted.escalations), "escalated inside the section: {scb:?}");
        assert_eq!(worker.policy(), original_policy, "demoted inside the section");
        (count(&agent.stats().gate_verdicts, "critical") >= blocked + 3).then_some(())
    });
    assert_eq!(worker.leave(STOP), None);
    let tid = worker.tid;
    worker.exit();

    let m = agent.wait("every demotion to be undone", || {
        let m = agent.stats();
        (m.nr_workers == 0 && count(&m.actions, "RESTORE") == count(&m.actions, "DEMOTE")).then_some(m)
    });
    let all = all_events(&m);
    assert_eq!(events(&m, "RESTORE", tid).len(), events(&m, "DEMOTE", tid).len(), "{all:?}");
    assert_eq!(m.effect_errors, 0, "{m:?}; stderr:\n{}", agent.stderr());
    agent.stop();
}
