// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A scheduler restarted inside its own process (spec/SCB.md §6.1), in a test binary of its own: the
//! watcher's directory watches live as long as the process, so a test beside the others in
//! tests/lifeline.rs would pass on a watch an earlier test left behind.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use morpheus::{
    testing::{unique_path, AgentBehaviour, FakeAgent},
    Config,
};

/// Liveness bound for what the watcher thread does on its own (never a verdict on speed).
const PATIENCE: Duration = Duration::from_secs(30);

/// An agent that restarts inside its own process (scx's restart, when the BPF side asks for one) keeps
/// its pid, so its process handle never reports an exit: the socket it replaces is what tells. The
/// agent must be another process (as in production), so this test runs one: itself, re-executed to
/// run only [`child_agent_restarting_in_process`]. A worker that only checkpoints must reach the new
/// instance.
#[test]
fn an_agent_restarted_inside_its_process_is_noticed_by_a_worker_that_only_checkpoints() {
    let socket = unique_path("inproc.sock");
    let (first, second, go) = (unique_path("inproc-first"), unique_path("inproc-second"), unique_path("inproc.go"));
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_agent_restarting_in_process", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{}\n{}\n{}\n{}", socket.display(), first.display(), second.display(), go.display()))
        .spawn()
        .expect("starting the agent process");
    let deadline = Instant::now() + PATIENCE;
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "the agent process never listened on {}", socket.display());
        std::thread::sleep(Duration::from_millis(5));
    }
    let worker = Config::default().agent_socket(&socket).register().unwrap();
    assert!(worker.is_attached());
    assert_eq!(worker.region().unwrap().path(), first.as_path());

    std::fs::write(&go, b"").unwrap(); // the agent process restarts its instance
    while worker.reattachments() == 0 && Instant::now() < deadline {
        worker.checkpoint_sync();
        std::thread::sleep(Duration::from_millis(1));
    }
    let reattachments = worker.reattachments();
    let (attached, region) = (worker.is_attached(), worker.region().map(|r| r.path().to_path_buf()));
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(reattachments, 1, "checkpoints alone did not reach the restarted instance within {PATIENCE:?}");
    assert!(attached);
    assert_eq!(region.as_deref(), Some(second.as_path()), "registered with the new instance's region");
}

const CHILD_ENV: &str = "MORPHEUS_TEST_CHILD_AGENT";

/// The agent process of the test above; does nothing unless that test started it.
#[test]
fn child_agent_restarting_in_process() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let [socket, first, second, go]: [&str; 4] = spec.split('\n').collect::<Vec<_>>().try_into().unwrap();
    let region = |generation: u64, path: &str| {
        let builder = morpheus::testing::SimRegionBuilder { generation, scb_count: 2, ..Default::default() };
        Arc::new(builder.create(path).unwrap())
    };
    let agent = FakeAgent::start_at(socket.into(), region(1, first), AgentBehaviour::Normal);
    let deadline = Instant::now() + PATIENCE;
    while !std::path::Path::new(go).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(agent); // its socket goes away; this process lives on, as scx_morpheus does across a restart
    let _agent = FakeAgent::start_at(socket.into(), region(2, second), AgentBehaviour::Normal);
    std::thread::sleep(PATIENCE); // until the test kills it
}
