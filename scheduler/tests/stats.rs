// SPDX-License-Identifier: GPL-2.0-only
//! The stats socket of the real scx_morpheus (simulation backend): the snapshot read as structured
//! data (scx_stats JSON), who may read it, `--monitor` and `--stats` printing from it, the schema
//! (`--help-stats`) and the version with its build id.
//!
//! Every wait polls a condition with a generous deadline; nothing asserts how fast anything happens.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use scx_morpheus::snapshot::Metrics;
use scx_morpheus::stats_socket::{self, Reader};

mod common;
use common::{SimAgent as Agent, BIN, PATIENCE};

/// The stats socket of `agent` (next to its registration socket).
fn stats_path(agent: &Agent) -> PathBuf {
    stats_socket::path_for(&agent.socket())
}

/// `child`'s stdout, line by line, through a channel (reads never block the test past PATIENCE).
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// The next line that satisfies `want`, within PATIENCE.
fn next_matching(lines: &mpsc::Receiver<String>, want: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines.recv_timeout(left).expect("no matching line on stdout");
        if want(&line) {
            return line;
        }
    }
}

#[test]
fn the_stats_socket_answers_structured_snapshots_to_the_agents_user_only() {
    let mut agent = Agent::start(&["--mode", "enforced", "--policy", "hybrid", "--slice-us", "3000", "--grace-us", "1000"], Stdio::null());
    let path = stats_path(&agent);
    assert_eq!(path.file_name().unwrap(), "sock.stats");
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "the snapshot names every user's workers");

    let mut reader = Reader::connect_within(&path, PATIENCE).unwrap();
    let first = reader.fetch().unwrap();
    assert_eq!((first.backend.as_str(), first.mode.as_str(), first.policy.as_str()), ("SIM", "ENFORCED", "HYBRID"));
    assert_eq!((first.slice_us, first.grace_us), (3000, 1000));
    assert!(first.version.starts_with(env!("CARGO_PKG_VERSION")), "{}", first.version);
    assert_eq!(first.nr_workers, 0);
    assert!(first.workers.is_empty());
    for key in ["escalate", "mode", "policy_none", "state", "not_escapable", "critical", "acknowledged", "within_grace"] {
        assert!(first.gate_verdicts.contains_key(key), "{key} missing from {:?}", first.gate_verdicts);
    }
    for key in ["KICK", "THROTTLE", "UNTHROTTLE", "DEMOTE", "RESTORE"] {
        assert!(first.actions.contains_key(key), "{key} missing from {:?}", first.actions);
    }
    for key in ["hint", "escalation", "acknowledgement"] {
        assert!(first.reactions.contains_key(key), "{key} missing from {:?}", first.reactions);
    }
    assert!(["NONE", "LOW", "MEDIUM", "HIGH"].contains(&first.pressure.level.as_str()), "{:?}", first.pressure);

    // Cumulative: a later snapshot of the same agent never has fewer ticks, and the same generation.
    let later = Reader::connect(&path).unwrap().fetch().unwrap();
    assert_eq!(later.generation, first.generation);
    assert!(later.ticks >= first.ticks && later.uptime_ms >= first.uptime_ms);

    // The raw protocol, as any scx_stats client speaks it: one JSON line each way; an unknown
    // request gets an errno, not a dropped connection.
    let mut raw = UnixStream::connect(&path).unwrap();
    let mut lines = BufReader::new(raw.try_clone().unwrap());
    raw.write_all(b"{\"req\":\"stats\",\"args\":{}}\n").unwrap();
    let mut line = String::new();
    lines.read_line(&mut line).unwrap();
    let reply: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(reply["errno"], 0, "{reply}");
    let _: Metrics = serde_json::from_value(reply["args"]["resp"].clone()).unwrap();
    raw.write_all(b"{\"req\":\"frobnicate\",\"args\":{}}\n").unwrap();
    line.clear();
    lines.read_line(&mut line).unwrap();
    let reply: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(reply["errno"], libc::EINVAL, "{reply}");

    agent.stop();
    assert!(!path.exists(), "the stats socket outlived the agent");
}

#[test]
fn monitor_and_stats_print_reports_read_from_the_socket() {
    let mut agent = Agent::start(&["--stats", "0.1"], Stdio::piped());
    // --stats: the agent's own reporter thread.
    let agent_lines = lines_of(&mut agent.child);
    let line = next_matching(&agent_lines, |l| l.starts_with("[scx_morpheus] SIM OBSERVER THREAD_KICK"));
    assert!(line.contains("workers"), "{line}");

    // --monitor: a separate client of the running agent, until SIGINT; exits 0.
    let mut monitor = Command::new(BIN)
        .args(["--monitor", "0.1", "--socket"])
        .arg(agent.socket())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let monitor_lines = lines_of(&mut monitor);
    next_matching(&monitor_lines, |l| l.starts_with("[scx_morpheus] SIM OBSERVER"));
    let gate = next_matching(&monitor_lines, |l| l.trim_start().starts_with("gate ["));
    assert!(gate.contains("critical="), "{gate}");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(monitor.id() as i32, libc::SIGINT) };
    let status = monitor.wait().unwrap();
    assert!(status.success(), "--monitor exited with {status}");
    agent.stop();
}

#[test]
fn help_stats_describes_the_schema_and_version_carries_a_build_id() {
    let out = Command::new(BIN).arg("--help-stats").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for field in ["gate_verdicts", "pending_requests", "yields_by_reason", "hints_dropped", "p99_us", "in_critical"] {
        assert!(text.contains(field), "--help-stats lacks {field}: {text}");
    }
    let out = Command::new(BIN).arg("--version").output().unwrap();
    assert!(out.status.success());
    let version = String::from_utf8_lossy(&out.stdout);
    assert!(version.starts_with(&format!("scx_morpheus {}", env!("CARGO_PKG_VERSION"))), "{version}");
    assert!(version.contains("linux"), "no target triple in {version}");
    assert!(version.contains("(ABI "), "no ABI in {version}");
    // Built from a git checkout here: the commit is part of the id.
    if Path::new(env!("CARGO_MANIFEST_DIR")).join("../.git").exists() {
        assert!(version.contains("-g"), "no commit in {version}");
    }
}

/// Another user cannot read the stats (the socket is 0600), and `--monitor` / `morpheus top` say so
/// and stop instead of waiting. Needs root (to run the clients as another user); skipped otherwise.
#[test]
fn another_user_is_refused_the_stats() {
    use std::os::unix::process::CommandExt;
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: running the clients as another user needs root");
        return;
    }
    let mut agent = Agent::start(&[], Stdio::null());
    // The directory itself is open to everyone (as /run/morpheus is): only the socket's mode refuses.
    std::fs::set_permissions(agent.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    Reader::connect_within(&stats_path(&agent), PATIENCE).unwrap();
    let nobody = 65534;
    let top = Path::new(env!("CARGO_BIN_EXE_morpheus"));
    for (program, args) in [(Path::new(BIN), vec!["--monitor", "0.1"]), (top, vec!["stats"]), (top, vec!["top", "--json"])] {
        let out = Command::new(program).args(&args).arg("--socket").arg(agent.socket()).uid(nobody).gid(nobody).output().unwrap();
        assert!(!out.status.success(), "{args:?} as uid {nobody} read the stats");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("Permission denied") && stderr.contains("sock.stats"), "{args:?}: {stderr}");
    }
    agent.stop();
}
