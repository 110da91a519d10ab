// SPDX-License-Identifier: GPL-2.0-only
//! `morpheus top` in a real terminal: tmux runs it against a running scx_morpheus (simulation
//! backend, enforced, policy kick) with three workers of this process registered through the agent's
//! socket by the morpheus SDK: one ignoring its hints (escalated), one spinning in a critical section,
//! one registered with escapable=0. The test types into the terminal (tmux send-keys) and reads the
//! screen (tmux capture-pane). `morpheus top --json` is checked against the same workers.
//!
//! tmux comes from tools/setup.sh. Every wait polls the screen with a generous deadline; no verdict
//! depends on how fast anything happens.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use scx_morpheus::snapshot::Metrics;

const TOP: &str = env!("CARGO_BIN_EXE_morpheus");
mod common;
use common::{SimAgent, PATIENCE};

fn wait_for<T>(what: &str, mut probe: impl FnMut() -> Option<T>, context: impl Fn() -> String) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {PATIENCE:?} waiting for {what}; {}", context());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The agent the view watches: enforced, policy kick, short slices so the spinner is escalated soon.
fn start_agent() -> SimAgent {
    SimAgent::start(
        &["--max-workers", "8", "--mode", "enforced", "--policy", "kick", "--slice-us", "2000", "--grace-us", "2000", "--throttle-max-ms", "60000"],
        Stdio::null(),
    )
}

/// A registered worker thread named `name` that spins without a checkpoint until told to stop.
struct Spinner {
    tid: u32,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Spinner {
    fn start(socket: &Path, name: &str, escapable: bool, critical: bool) -> Spinner {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let socket = socket.to_owned();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let worker = match morpheus::Worker::builder().agent_socket(socket).escapable(escapable).register() {
                    Ok(w) => w,
                    Err(e) => return tx.send(Err(e.to_string())).unwrap(),
                };
                let _section = critical.then(|| worker.critical_section());
                // SAFETY: gettid has no preconditions.
                tx.send(Ok(unsafe { libc::syscall(libc::SYS_gettid) } as u32)).unwrap();
                let mut x = 0u64;
                while !flag.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
                }
            })
            .unwrap();
        let tid = rx.recv_timeout(PATIENCE).expect("no registration report").unwrap_or_else(|e| panic!("{name}: {e}"));
        Spinner { tid, stop, thread }
    }
    fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
    }
}

/// A tmux server of its own (-L), so the test touches no other session.
struct Tmux {
    server: String,
}

impl Tmux {
    fn new() -> Tmux {
        let version = Command::new("tmux").arg("-V").output();
        assert!(
            version.as_ref().is_ok_and(|o| o.status.success()),
            "tmux is missing: tools/setup.sh installs it (the test drives `morpheus top` in a real terminal)"
        );
        Tmux { server: format!("morpheus-top-test-{}", std::process::id()) }
    }
    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux").arg("-L").arg(&self.server).args(args).output().expect("run tmux")
    }
    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }
    fn alive(&self) -> bool {
        self.run(&["has-session", "-t", "top"]).status.success()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// The cells of the worker row of `tid` on the screen, by column name.
fn row(screen: &str, tid: u32) -> Option<std::collections::HashMap<&'static str, String>> {
    let cells = |line: &str| -> Vec<String> {
        line.trim_matches(|c: char| c == '│' || c.is_whitespace()).split_whitespace().map(str::to_owned).collect()
    };
    let line = screen.lines().find(|l| cells(l).get(1).is_some_and(|c| c == &tid.to_string()))?;
    let values = cells(line);
    (values.len() == scx_morpheus::top::COLUMNS.len()).then(|| scx_morpheus::top::COLUMNS.iter().copied().zip(values).collect())
}

#[test]
fn top_shows_the_workers_the_agent_watches_and_quits_on_q() {
    let agent = start_agent();
    let spinner = Spinner::start(&agent.socket(), "top-spinner", true, false);
    let critical = Spinner::start(&agent.socket(), "top-critical", true, true);
    let opted_out = Spinner::start(&agent.socket(), "top-optout", false, false);

    let tmux = Tmux::new();
    let command = format!("{TOP} top --socket {} --interval 0.2", agent.socket().display());
    let out = tmux.run(&["new-session", "-d", "-s", "top", "-x", "220", "-y", "40", &command]);
    assert!(out.status.success(), "tmux new-session: {}", String::from_utf8_lossy(&out.stderr));

    // The escalated worker: the agent's view of it on screen, once the escalation shows.
    let screen = wait_for(
        "the spinning worker to show as escalated",
        || {
            let s = tmux.screen();
            let r = row(&s, spinner.tid)?;
            (r["ESCALATED"] == "1" && row(&s, critical.tid).is_some() && row(&s, opted_out.tid).is_some()).then_some(s)
        },
        || format!("screen:\n{}", tmux.screen()),
    );
    assert!(screen.contains("SIM ENFORCED THREAD_KICK"), "{screen}");
    assert!(screen.contains("workers 3"), "{screen}");
    let pid = std::process::id().to_string();
    let s = row(&screen, spinner.tid).unwrap();
    assert_eq!((s["PID"].as_str(), s["COMM"].as_str(), s["KIND"].as_str(), s["STATE"].as_str()), (pid.as_str(), "top-spinner", "RUST", "RUNNING"), "{screen}");
    assert_eq!((s["ESCAPABLE"].as_str(), s["IN_CRIT"].as_str()), ("1", "0"), "{screen}");
    assert!(s["ESCALATIONS"].parse::<u64>().unwrap() >= 1 && s["PENDING"].parse::<u64>().unwrap() >= 1, "{screen}");
    let c = row(&screen, critical.tid).unwrap();
    assert_eq!((c["COMM"].as_str(), c["IN_CRIT"].as_str(), c["ESCALATED"].as_str(), c["ESCALATIONS"].as_str()), ("top-critical", "1", "0", "0"), "{screen}");
    let o = row(&screen, opted_out.tid).unwrap();
    assert_eq!((o["COMM"].as_str(), o["ESCAPABLE"].as_str(), o["ESCALATED"].as_str(), o["ESCALATIONS"].as_str()), ("top-optout", "0", "0", "0"), "{screen}");

    // The same workers in one JSON snapshot.
    let out = Command::new(TOP).args(["top", "--json", "--socket"]).arg(agent.socket()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m: Metrics = serde_json::from_slice(&out.stdout).expect("top --json prints the stats schema");
    for (tid, name) in [(spinner.tid, "top-spinner"), (critical.tid, "top-critical"), (opted_out.tid, "top-optout")] {
        let w = m.workers.iter().find(|w| w.tid == u64::from(tid)).unwrap_or_else(|| panic!("{tid} not in {:?}", m.workers));
        assert_eq!(w.comm, name);
    }

    // Single fields for scripts (`morpheus stats --get`), and a clear refusal of a field that is not there.
    let get = || -> Vec<String> {
        let out = Command::new(TOP)
            .args(["stats", "--get", "/mode", "--get", "/nr_workers", "--get", "/gate_verdicts/critical", "--socket"])
            .arg(agent.socket())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect()
    };
    let values = wait_for("the gate to block the critical worker", || Some(get()).filter(|v| v.len() == 3 && v[2] != "0"), || format!("{:?}", get()));
    assert_eq!((values[0].as_str(), values[1].as_str()), ("ENFORCED", "3"), "{values:?}");
    let out = Command::new(TOP).args(["stats", "--get", "/mode", "--get", "/no_such_field", "--socket"]).arg(agent.socket()).output().unwrap();
    assert!(!out.status.success() && out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--get /no_such_field: no such field"));

    // A worker that unregisters leaves the screen.
    let gone = opted_out.tid;
    opted_out.finish();
    wait_for("the unregistered worker to leave the screen", || row(&tmux.screen(), gone).is_none().then_some(()), || tmux.screen());

    // q quits: the pane's program ends, and with it the session.
    let out = tmux.run(&["send-keys", "-t", "top", "q"]);
    assert!(out.status.success());
    wait_for("morpheus top to exit on q", || (!tmux.alive()).then_some(()), || tmux.screen());
    spinner.finish();
    critical.finish();
}

#[test]
fn top_names_the_socket_it_cannot_reach() {
    let dir = tempfile::tempdir().unwrap();
    for extra in [&["--json"][..], &[][..]] {
        let out = Command::new(TOP).args(["top", "--socket"]).arg(dir.path().join("sock")).args(extra).output().unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("sock.stats") && stderr.contains("is scx_morpheus running"), "{stderr}");
    }
    let out = Command::new(TOP).args(["top", "--interval", "0"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--interval 0"));
}
