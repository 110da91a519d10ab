// SPDX-License-Identifier: GPL-2.0-only
//! The stats socket: scx_stats' server in the agent, its client in `--stats`, `--monitor` and
//! `morpheus top`.
//!
//! Protocol (scx_stats): one JSON request per line, `{"req":"stats","args":{}}`, answered by one JSON
//! line `{"errno":0,"args":{"resp":<Metrics>}}`; `{"req":"stats_meta"}` describes the schema. The
//! server thread asks the agent's main loop for a snapshot over a channel and the main loop answers
//! at its next tick, so every figure comes from the one thread that owns the backend.
//!
//! Where: `<registration socket>.stats` in the agent's runtime directory (default
//! /run/morpheus/agent.sock.stats), mode 0600: the snapshot names every registered worker of every
//! user (pid, tid, comm), so only the agent's own user (root in production) may read it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use crossbeam::channel::{Receiver, Sender};
use scx_stats::prelude::*;

use crate::rundir::RuntimeDir;
use crate::snapshot::{self, Metrics};

/// The stats socket of the agent whose registration socket is `socket`: the one rule the agent,
/// its clients and the benchmarks (scheduler/starvation, scheduler/compare) follow.
pub fn path_for(socket: &Path) -> PathBuf {
    let mut name = socket.file_name().unwrap_or_default().to_owned();
    name.push(".stats");
    socket.with_file_name(name)
}

/// The name of every thread scx_stats' server runs: its listener, its proxy and one per stats
/// connection. scx_stats spawns them unnamed, and an unnamed thread takes its creator's name, so
/// they are created under this name (see `under_thread_name`) and not under the main thread's.
pub const SERVER_THREAD_NAME: &str = "stats-server";

/// Runs `f` with the calling thread named `name` (at most 15 bytes, the kernel's limit), then
/// gives the thread its name back. Threads `f` spawns without a name of their own, and the threads
/// those spawn, carry `name`.
fn under_thread_name<T>(name: &str, f: impl FnOnce() -> T) -> T {
    let mut old = [0u8; 16];
    // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL included, into `old`; PR_SET_NAME reads a
    // NUL-terminated string of which the kernel keeps 15 bytes.
    let got = unsafe { libc::prctl(libc::PR_GET_NAME, old.as_mut_ptr()) } == 0;
    let new = std::ffi::CString::new(name).expect("a thread name has no NUL");
    unsafe { libc::prctl(libc::PR_SET_NAME, new.as_ptr()) };
    let out = f();
    if got {
        unsafe { libc::prctl(libc::PR_SET_NAME, old.as_ptr()) };
    }
    out
}

/// The agent's side: the scx_stats server and the channel pair to the main loop.
pub struct StatsPublisher {
    /// Dropped before the socket file is removed (its drop wakes the listener through the path).
    server: Option<StatsServer<(), Metrics>>,
    path: PathBuf,
    requests: Receiver<()>,
    replies: Sender<Metrics>,
}

impl StatsPublisher {
    /// Serves the stats socket of the registration socket `socket_name` in `dir` (the runtime
    /// directory the instance lock guards).
    pub fn launch(dir: &RuntimeDir, socket_name: &str) -> Result<StatsPublisher> {
        let path = path_for(&dir.join(socket_name));
        let mut data = StatsServerData::<(), Metrics>::new();
        for meta in snapshot::server_meta() {
            data = data.add_meta(meta);
        }
        let data = data.add_stats(
            "top",
            Box::new(|_args, (request, reply)| {
                request.send(())?;
                reply.recv()?.to_json()
            }),
        );
        // Bound with mode 0600 from the start (umask), then chmod'ed explicitly: no window in which
        // another user could connect.
        let server = under_thread_name(SERVER_THREAD_NAME, || {
            crate::rundir::under_strict_umask(|| StatsServer::new(data).set_path(&path).launch())
        });
        let server = server.with_context(|| format!("cannot serve the stats socket {}", path.display()))?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .with_context(|| format!("cannot chmod the stats socket {}", path.display()))?;
        }
        let (replies, requests) = server.channels();
        Ok(StatsPublisher { server: Some(server), path, requests, replies })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Answers every request waiting, each with a fresh snapshot from `build`.
    pub fn serve_pending(&self, mut build: impl FnMut() -> Metrics) {
        while self.requests.try_recv().is_ok() {
            if self.replies.send(build()).is_err() {
                break;
            }
        }
    }
}

impl Drop for StatsPublisher {
    fn drop(&mut self) {
        drop(self.server.take());
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A client connected to an agent's stats socket.
pub struct Reader {
    client: StatsClient,
}

impl Reader {
    /// Connects to `path`, with a per-request timeout (10 s) so a stuck agent is reported, not waited on.
    pub fn connect(path: &Path) -> Result<Reader> {
        Reader::connect_with_timeout(path, Duration::from_secs(10))
    }

    /// Connects to `path`; a request that takes longer than `timeout` fails.
    pub fn connect_with_timeout(path: &Path, timeout: Duration) -> Result<Reader> {
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX).max(1);
        let client = StatsClient::new().set_path(path).connect(Some(timeout_ms)).with_context(|| {
            format!("cannot connect to the stats socket {} (is scx_morpheus running, and are you its user?)", path.display())
        })?;
        Ok(Reader { client })
    }

    /// Connects, retrying while the socket does not exist yet or refuses (the agent starting up).
    pub fn connect_within(path: &Path, patience: Duration) -> Result<Reader> {
        let deadline = Instant::now() + patience;
        loop {
            match Reader::connect(path) {
                Ok(r) => return Ok(r),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// One snapshot.
    pub fn fetch(&mut self) -> Result<Metrics> {
        self.client.request::<Metrics>("stats", vec![]).context("stats request failed")
    }
}

/// `--stats` / `--monitor`: prints a report every `interval` until `stop()` says so. Reconnects if
/// the agent goes away (a restart) or is not running yet.
pub fn monitor(path: &Path, interval: Duration, stop: impl Fn() -> bool) -> Result<()> {
    let mut earlier: Option<Metrics> = None;
    let mut failures = 0u32;
    while !stop() {
        let mut reader = match Reader::connect(path) {
            Ok(r) => r,
            Err(e) => {
                // Not allowed to read it: waiting will not change that.
                if e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied)) {
                    return Err(e);
                }
                // Said once, and not for the first miss (an agent that is still starting up).
                failures += 1;
                if failures == 2 {
                    log::info!("{e:#}; retrying");
                }
                std::thread::sleep(interval.min(Duration::from_secs(1)));
                continue;
            }
        };
        failures = 0;
        while !stop() {
            let now = match reader.fetch() {
                Ok(m) => m,
                Err(e) => {
                    log::info!("stats connection lost: {e:#}");
                    earlier = None;
                    break;
                }
            };
            // A new generation is a new agent: its counters start again.
            let base = earlier.as_ref().filter(|e| e.generation == now.generation && e.uptime_ms <= now.uptime_ms);
            let mut out = std::io::stdout().lock();
            now.format(base, &mut out)?;
            drop(out);
            earlier = Some(now);
            sleep_unless(interval, &stop);
        }
    }
    Ok(())
}

/// Sleeps `total`, waking early when `stop()` turns true (checked every 50 ms).
fn sleep_unless(total: Duration, stop: &impl Fn() -> bool) {
    let deadline = Instant::now() + total;
    while !stop() {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
    }
}

/// Checks an interval given on the command line (`--stats`, `--monitor`, `morpheus top --interval`).
pub fn check_interval(flag: &str, seconds: f64) -> Result<Duration> {
    if !(seconds.is_finite() && (0.01..=3600.0).contains(&seconds)) {
        bail!("{flag} {seconds}: the interval must be between 0.01 and 3600 seconds");
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comm(task: &str) -> String {
        std::fs::read_to_string(format!("/proc/self/task/{task}/comm")).unwrap_or_default().trim().to_owned()
    }

    fn server_threads() -> usize {
        std::fs::read_dir("/proc/self/task").unwrap().filter_map(|t| t.ok()).filter(|t| comm(&t.file_name().to_string_lossy()) == SERVER_THREAD_NAME).count()
    }

    /// The server's listener and proxy carry SERVER_THREAD_NAME, and the thread that launched it
    /// keeps its own name: the agent's threads tell the stats server apart from the main loop.
    #[test]
    fn the_server_threads_are_named_and_the_caller_keeps_its_name() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = RuntimeDir::open(tmp.path()).unwrap();
        let me = unsafe { libc::gettid() }.to_string();
        let before = comm(&me);
        assert_ne!(before, SERVER_THREAD_NAME);
        let publisher = StatsPublisher::launch(&dir, "agent.sock").unwrap();
        assert_eq!(comm(&me), before, "the caller got its name back");
        // The listener is spawned by launch(); the proxy by the listener once it runs.
        let deadline = Instant::now() + Duration::from_secs(60);
        while server_threads() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(server_threads() >= 2, "{} thread(s) named {SERVER_THREAD_NAME}", server_threads());
        drop(publisher);
    }
}
