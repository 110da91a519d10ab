// SPDX-License-Identifier: GPL-2.0-only
//! Escalation end to end in the simulation backend: the real scx_morpheus with a temporary region and
//! socket, worker threads of this process registered through its socket with the `morpheus` SDK (as an
//! application would), and the SCB, the threads' scheduling policy and the agent's `--stats` and
//! `totals:` output as the judges.
//!
//! Nothing here asserts how fast anything happens: every wait polls a condition with a generous
//! deadline, so a loaded 2-CPU machine only makes the tests slower.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::ptr::addr_of_mut;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use morpheus_abi as abi;

const BIN: &str = env!("CARGO_BIN_EXE_scx_morpheus");
const SLICE_US: u64 = 2_000;
const GRACE_US: u64 = 2_000;
/// How long any awaited condition may take before the test fails. Generous: other builds share the
/// two CPUs, and a demoted (SCHED_IDLE) thread runs only when nothing else wants its CPU.
const PATIENCE: Duration = Duration::from_secs(120);

/// Counters the agent printed: `--stats` lines summed (`blocked.<verdict>`, `actions.<ACTION>`), its
/// escalation_event lines, and the `totals:` line it prints at exit.
#[derive(Default)]
struct Printed {
    lines: u64,
    sums: HashMap<String, u64>,
    /// `event:` lines as key -> value maps.
    events: Vec<HashMap<String, String>>,
    totals: Option<String>,
}

impl Printed {
    fn sum(&self, key: &str) -> u64 {
        self.sums.get(key).copied().unwrap_or(0)
    }

    /// `blocked[critical=3 ...] actions[DEMOTE=1 ...]` groups of one stats line.
    fn absorb(&mut self, line: &str) {
        if let Some(totals) = line.strip_prefix("totals: ") {
            self.totals = Some(totals.to_owned());
            return;
        }
        if let Some(event) = line.strip_prefix("event: ") {
            let fields = event.split_whitespace().map(|kv| kv.split_once('=').expect("key=value in an event line"));
            self.events.push(fields.map(|(k, v)| (k.to_owned(), v.to_owned())).collect());
            return;
        }
        let mut found = false;
        for group in ["blocked", "actions"] {
            let Some(start) = line.find(&format!("{group}[")) else { continue };
            let rest = &line[start + group.len() + 1..];
            let Some(end) = rest.find(']') else { continue };
            for pair in rest[..end].split_whitespace() {
                let (key, value) = pair.split_once('=').expect("key=value in a stats group");
                let value: u64 = value.parse().expect("a counter in a stats group");
                *self.sums.entry(format!("{group}.{key}")).or_default() += value;
            }
            found = true;
        }
        if found {
            self.lines += 1;
        }
    }

    /// escalation_event lines with `action` for thread `tid`.
    fn events(&self, action: &str, tid: u32) -> Vec<&HashMap<String, String>> {
        let tid = tid.to_string();
        self.events.iter().filter(|e| e["action"] == action && e["tid"] == tid).collect()
    }

    /// A field of the totals line.
    fn total(&self, key: &str) -> u64 {
        let totals = self.totals.as_deref().expect("scx_morpheus printed no totals line");
        totals
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
            .unwrap_or_else(|| panic!("no {key} in the totals line {totals:?}"))
            .parse()
            .unwrap()
    }
}

struct Agent {
    child: RefCell<Child>,
    dir: tempfile::TempDir,
    printed: Arc<Mutex<Printed>>,
    reader: Option<JoinHandle<()>>,
    /// This process's region, as the first worker received it from the agent.
    region: RefCell<Option<Arc<morpheus::Region>>>,
}

impl Agent {
    /// scx_morpheus --backend sim with a short slice and grace, stats every 0.2 s, and `extra`.
    fn start(extra: &[&str]) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let stderr = std::fs::File::create(dir.path().join("stderr")).unwrap();
        let mut child = Command::new(BIN)
            .args(["--backend", "sim", "--max-workers", "8", "--stats", "0.2"])
            .args(["--slice-us", &SLICE_US.to_string(), "--grace-us", &GRACE_US.to_string()])
            .arg("--socket")
            .arg(dir.path().join("sock"))
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let printed = Arc::new(Mutex::new(Printed::default()));
        let stdout = child.stdout.take().unwrap();
        let sink = Arc::clone(&printed);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                sink.lock().unwrap().absorb(&line);
            }
        });
        let agent = Agent { child: RefCell::new(child), dir, printed, reader: Some(reader), region: RefCell::new(None) };
        agent.wait("the agent's socket", || std::os::unix::net::UnixStream::connect(agent.socket()).ok().map(|_| ()));
        agent
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("sock")
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    fn printed<T>(&self, f: impl FnOnce(&Printed) -> T) -> T {
        f(&self.printed.lock().unwrap())
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
                escalations: u32_at(addr_of_mut!((*scb).escalations)),
                escalated: u32_at(addr_of_mut!((*scb).escalated)),
                escapable: u32_at(addr_of_mut!((*scb).escapable)),
                in_critical: u32_at(addr_of_mut!((*scb).in_critical)),
                worker_state: u32_at(addr_of_mut!((*scb).worker_state)),
                tid: u32_at(addr_of_mut!((*scb).tid)),
            }
        }
    }

    /// SIGTERM and wait; the agent must exit cleanly and print its totals line.
    fn stop(mut self) -> Printed {
        self.region.get_mut().take();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.get_mut().id() as libc::pid_t, libc::SIGTERM) };
        let status = self.child.get_mut().wait().unwrap();
        assert!(status.success(), "scx_morpheus exited with {status}; stderr:\n{}", self.stderr());
        self.reader.take().unwrap().join().unwrap();
        std::mem::take(&mut *self.printed.lock().unwrap())
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
    // A bound far beyond the test: only an acknowledgement can lift the escalation here.
    let agent = Agent::start(&["--mode", "enforced", "--policy", "kick", "--throttle-max-ms", "60000"]);
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
        let (c, n) = agent.printed(|p| (p.sum("blocked.critical"), p.sum("blocked.not_escapable")));
        (long_enough && c > 0 && n > 0).then_some((c, n))
    });
    agent.wait("blocked_critical and blocked_not_escapable to keep increasing", || {
        let (c, n) = agent.printed(|p| (p.sum("blocked.critical"), p.sum("blocked.not_escapable")));
        (c > critical_at && n > opted_out_at).then_some(())
    });
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
    // (THREAD_KICK repeats once per grace period until the acknowledgement, so `escalations` may
    // have grown while the demoted thread made its way to the checkpoint; after it, never.)
    agent.wait("the restore to show in the stats", || (agent.printed(|p| p.sum("actions.RESTORE")) >= 1).then_some(()));
    let lines = agent.printed(|p| p.lines);
    agent.wait("three more stats intervals", || (agent.printed(|p| p.lines) >= lines + 3).then_some(()));
    let later = agent.scb(escapable.slot);
    assert_eq!((later.escalations, later.escalated), (after.escalations, 0), "escalated again while blocked: {later:?}");
    escapable.exit();

    let printed = agent.stop();
    assert!(printed.total("escalations") >= 1, "{:?}", printed.totals);
    assert!(printed.total("demote") >= 1, "{:?}", printed.totals);
    assert_eq!(printed.total("restore"), printed.total("demote"), "every demotion is undone: {:?}", printed.totals);
    assert!(printed.total("blocked_critical") >= critical_at, "{:?}", printed.totals);
    assert!(printed.total("blocked_not_escapable") >= opted_out_at, "{:?}", printed.totals);
    assert_eq!(printed.total("effect_errors"), 0, "{:?}", printed.totals);
    // One escalation_event per action: the demotion (for a pending request) and its undoing.
    let demotions = printed.events("DEMOTE", escapable_tid);
    assert_eq!(demotions.len() as u64, printed.total("demote"), "{:?}", printed.events);
    assert!(demotions.iter().all(|e| e["policy"] == "THREAD_KICK" && e["preempt_seq"] != "0"), "{demotions:?}");
    assert_eq!(printed.events("RESTORE", escapable_tid).len() as u64, printed.total("restore"), "{:?}", printed.events);
    for tid in spared_tids {
        assert!(printed.events.iter().all(|e| e["tid"] != tid.to_string()), "event for a spared worker: {:?}", printed.events);
    }
}

#[test]
fn enforced_escalation_is_lifted_after_the_throttle_bound_without_an_acknowledgement() {
    let agent = Agent::start(&["--mode", "enforced", "--policy", "kick", "--throttle-max-ms", "300"]);
    let worker = Spinner::start(&agent, Kind::Escapable);
    let original_policy = worker.original_policy;

    // Still ignoring its hints when the bound lapses: restored, and at once escalated again.
    agent.wait("a second escalation after the first one's bound lapsed", || {
        let scb = agent.scb(worker.slot);
        (scb.escalations >= 2 && agent.printed(|p| p.sum("actions.RESTORE")) >= 1).then_some(())
    });

    // It stops spinning without ever acknowledging: only the bound can lift the escalation now.
    assert_eq!(worker.leave(STOP), None);
    let lifted = agent.wait("the escalation to be lifted by the throttle bound", || {
        let scb = agent.scb(worker.slot);
        (scb.escalated == 0 && worker.policy() == original_policy).then_some(scb)
    });
    assert!(lifted.preempt_seq > lifted.last_ack_seq, "it never acknowledged: {lifted:?}");
    assert_eq!(lifted.yield_count, 0, "{lifted:?}");
    // And it stays lifted (the worker sleeps: a yield point for the scheduler), for a few more ticks.
    let lines = agent.printed(|p| p.lines);
    agent.wait("three more stats intervals", || (agent.printed(|p| p.lines) >= lines + 3).then_some(()));
    let later = agent.scb(worker.slot);
    assert_eq!((later.escalated, later.escalations), (0, lifted.escalations), "{lifted:?} -> {later:?}");
    assert_eq!(worker.policy(), original_policy);
    let tid = worker.tid;
    worker.exit();

    let printed = agent.stop();
    assert!(printed.total("escalations") >= 2, "{:?}", printed.totals);
    assert_eq!(printed.total("restore"), printed.total("demote"), "{:?}", printed.totals);
    assert_eq!(printed.total("effect_errors"), 0, "{:?}", printed.totals);
    assert!(printed.events("DEMOTE", tid).len() >= 2, "{:?}", printed.events);
    assert_eq!(printed.events("RESTORE", tid).len(), printed.events("DEMOTE", tid).len(), "{:?}", printed.events);
}

#[test]
fn observer_mode_hints_a_spinning_worker_but_never_escalates_it() {
    let agent = Agent::start(&["--mode", "observer", "--policy", "kick"]);
    let worker = Spinner::start(&agent, Kind::Escapable);
    let original_policy = worker.original_policy;
    let first = agent.scb(worker.slot);

    let hinted = agent.wait("hints to the spinning worker well past slice + grace, blocked by observer mode", || {
        let scb = agent.scb(worker.slot);
        assert_eq!(scb.escalations, 0, "observer mode escalated: {scb:?}");
        let blocked = agent.printed(|p| p.sum("blocked.mode"));
        (scb.preempt_seq >= first.preempt_seq + 5 && worker.cpu_ns() > WELL_PAST_GRACE_NS && blocked > 0).then_some(scb)
    });
    assert_eq!((hinted.escalations, hinted.escalated), (0, 0), "observer mode escalated: {hinted:?}");
    assert_eq!((hinted.escapable, hinted.in_critical), (1, 0), "{hinted:?}");
    assert!(hinted.last_ack_seq < hinted.preempt_seq, "{hinted:?}");
    assert_eq!(hinted.worker_state, abi::WorkerState::Running.raw());
    assert_eq!(worker.policy(), original_policy, "observer mode demoted the worker");
    worker.exit();

    let printed = agent.stop();
    assert!(printed.total("hints") >= 5, "{:?}", printed.totals);
    assert_eq!(printed.total("escalations"), 0, "{:?}", printed.totals);
    assert_eq!(printed.total("demote"), 0, "{:?}", printed.totals);
    assert!(printed.total("blocked_mode") > 0, "{:?}", printed.totals);
    assert!(printed.events.is_empty(), "escalation events in observer mode: {:?}", printed.events);
}

#[test]
fn entering_a_critical_section_lifts_an_escalation_and_none_is_applied_inside_it() {
    // A bound far beyond the test: only the critical section can lift the escalation here.
    let agent = Agent::start(&["--mode", "enforced", "--policy", "kick", "--throttle-max-ms", "60000"]);
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
    let blocked = agent.printed(|p| p.sum("blocked.critical"));
    agent.wait("the gate to block the worker in its section, tick after tick", || {
        let scb = agent.scb(worker.slot);
        assert_eq!((scb.escalated, scb.escalations), (0, lifted.escalations), "escalated inside the section: {scb:?}");
        assert_eq!(worker.policy(), original_policy, "demoted inside the section");
        (agent.printed(|p| p.sum("blocked.critical")) >= blocked + 3).then_some(())
    });
    assert_eq!(worker.leave(STOP), None);
    let tid = worker.tid;
    worker.exit();

    let printed = agent.stop();
    assert_eq!(printed.total("restore"), printed.total("demote"), "every demotion is undone: {:?}", printed.totals);
    assert_eq!(printed.events("RESTORE", tid).len(), printed.events("DEMOTE", tid).len(), "{:?}", printed.events);
    assert_eq!(printed.total("effect_errors"), 0, "{:?}", printed.totals);
}
