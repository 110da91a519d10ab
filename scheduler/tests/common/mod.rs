// SPDX-License-Identifier: GPL-2.0-only
//! The real scx_morpheus (simulation backend) as the integration tests start it: a private socket in
//! a temporary directory, waited for with a generous deadline, killed when dropped.

#![allow(dead_code)] // each test crate uses its own part of this module

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_scx_morpheus");
/// How long any wait may take on a loaded machine: a deadline for hangs, never a verdict.
pub const PATIENCE: Duration = Duration::from_secs(120);

pub struct SimAgent {
    pub child: Child,
    pub dir: tempfile::TempDir,
}

impl SimAgent {
    /// Start `scx_morpheus --backend sim --socket DIR/sock EXTRA...` and wait until it accepts.
    /// `stdout` is piped for tests that read what the agent prints; stderr is discarded.
    pub fn start(extra: &[&str], stdout: Stdio) -> SimAgent {
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new(BIN)
            .args(["--backend", "sim", "--socket"])
            .arg(dir.path().join("sock"))
            .args(extra)
            .stdout(stdout)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let agent = SimAgent { child, dir };
        let deadline = Instant::now() + PATIENCE;
        while UnixStream::connect(agent.socket()).is_err() {
            assert!(Instant::now() < deadline, "scx_morpheus did not start within {PATIENCE:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
        agent
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("sock")
    }

    /// SIGTERM; the agent must exit 0 (its directory stays for checks until the agent is dropped).
    pub fn stop(&mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        assert!(status.success(), "scx_morpheus exited with {status}");
    }
}

impl Drop for SimAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
