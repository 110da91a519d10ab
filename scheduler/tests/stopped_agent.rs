// SPDX-License-Identifier: GPL-2.0-only
//! S12 (security review): with the agent stopped (SIGSTOP, a debugger), registration fails at once
//! with an error that says so, instead of "Resource temporarily unavailable" after 5 s.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_scx_morpheus");

#[test]
fn a_stopped_agent_is_reported_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("sock");
    let mut agent = Command::new(BIN)
        .args(["--backend", "sim", "--socket"])
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "the agent did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(agent.id() as libc::pid_t, libc::SIGSTOP) };
    let started = Instant::now();
    let err = morpheus::Config::default().agent_socket(&socket).register().expect_err("a stopped agent cannot answer");
    let took = started.elapsed();
    // SAFETY: as above.
    unsafe { libc::kill(agent.id() as libc::pid_t, libc::SIGCONT) };
    unsafe { libc::kill(agent.id() as libc::pid_t, libc::SIGTERM) };
    agent.wait().unwrap();
    let message = err.to_string();
    assert!(message.contains("is stopped"), "the error does not say the agent is stopped: {message}");
    assert!(message.contains(&format!("pid {}", agent.id())), "the error does not name the agent: {message}");
    // Well under the 5 s a silent agent gets (the stop is seen at the first 100 ms check).
    assert!(took < Duration::from_secs(4), "took {took:?}");
}
