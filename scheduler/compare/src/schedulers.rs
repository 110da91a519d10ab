// SPDX-License-Identifier: GPL-2.0-only
//! The schedulers compared: the kernel's default (EEVDF, no sched_ext scheduler loaded), the peers
//! scx_bpfland, scx_lavd, scx_flash, scx_cosmos and scx_pandemonium with their default options, and
//! scx_morpheus's sched_ext backend in observer and enforced mode on its default base order; on request
//! also enforced mode on the base policy's former default (`--base-order cputime`), on its slice-lag variant (`--base-order
//! lag`), on that with the CPU used since the last sleep added (`--base-order burst`) and on that
//! with only that CPU beyond twice the task's usual burst added (`--base-order spare`) or with that
//! CPU added only for a task that has not slept recently (`--base-order recent`), or on the default
//! order with a 500 µs wake-up preemption margin (`--wake-margin-us 500`), for a
//! before/after in the same run. Each is
//! started before a round's cells and stopped after them.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Where the running kernel reports whether a sched_ext scheduler is loaded.
const SCHED_EXT_STATE: &str = "/sys/kernel/sched_ext/state";
/// How long any scheduler under comparison (a peer or scx_morpheus) may take to load its BPF program:
/// under TCG on a loaded host the verifier alone can take minutes.
const LOAD_SECONDS: u64 = 240;
/// Name of the loaded sched_ext scheduler.
const SCHED_EXT_OPS: &str = "/sys/kernel/sched_ext/root/ops";

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Sched {
    Eevdf,
    Bpfland,
    Lavd,
    Flash,
    Cosmos,
    Pandemonium,
    Observer,
    Enforced,
    /// Enforced mode with the base policy ordering by CPU time used alone (scx_morpheus
    /// `--base-order cputime`, the former default): the before of the default's before/after.
    EnforcedCputime,
    /// Enforced mode with the CPU-time order's credit bounded by a slice lag (scx_morpheus
    /// `--base-order lag`): measured against `EnforcedCputime` in the same rounds.
    EnforcedLag,
    /// Enforced mode with the slice-lag key plus the CPU used since the last sleep (scx_morpheus
    /// `--base-order burst`): measured against `EnforcedCputime` in the same rounds.
    EnforcedBurst,
    /// Enforced mode with the burst order's term counting only the CPU beyond twice the task's
    /// usual burst (scx_morpheus `--base-order spare`): measured against `EnforcedCputime` and
    /// `EnforcedBurst` in the same rounds.
    EnforcedSpare,
    /// Enforced mode with the burst order's term left out while the task slept and has used less
    /// than a base slice of CPU since (scx_morpheus `--base-order recent`): measured against
    /// `EnforcedCputime` and `EnforcedSpare` in the same rounds.
    EnforcedRecent,
    /// Enforced mode with tasks that slept recently keyed by when they were queued (scx_morpheus
    /// `--base-order arrival`, the default since it was measured against `EnforcedRecent`): the same
    /// order as `Enforced`, named.
    EnforcedArrival,
    /// Enforced mode on the default order with a wake-up preemption margin of 500 µs instead of a
    /// slice lag (scx_morpheus `--wake-margin-us 500`): measured against `Enforced` in the same rounds.
    EnforcedMargin500,
}

impl Sched {
    /// The name in tables and in the JSON summary.
    pub fn name(self) -> &'static str {
        match self {
            Sched::Eevdf => "eevdf",
            Sched::Bpfland => "scx_bpfland",
            Sched::Lavd => "scx_lavd",
            Sched::Flash => "scx_flash",
            Sched::Cosmos => "scx_cosmos",
            Sched::Pandemonium => "scx_pandemonium",
            Sched::Observer => "morpheus_observer",
            Sched::Enforced => "morpheus_enforced",
            Sched::EnforcedCputime => "morpheus_enforced_cputime",
            Sched::EnforcedLag => "morpheus_enforced_lag",
            Sched::EnforcedBurst => "morpheus_enforced_burst",
            Sched::EnforcedSpare => "morpheus_enforced_spare",
            Sched::EnforcedRecent => "morpheus_enforced_recent",
            Sched::EnforcedArrival => "morpheus_enforced_arrival",
            Sched::EnforcedMargin500 => "morpheus_enforced_margin500",
        }
    }

    pub fn is_morpheus(self) -> bool {
        matches!(self, Sched::Observer | Sched::Enforced | Sched::EnforcedCputime | Sched::EnforcedLag | Sched::EnforcedBurst | Sched::EnforcedSpare | Sched::EnforcedRecent | Sched::EnforcedArrival | Sched::EnforcedMargin500)
    }
}

/// Binaries of the sched_ext schedulers; a peer's is empty when it was not given (and not asked for).
pub struct Binaries {
    pub morpheus: PathBuf,
    pub bpfland: PathBuf,
    pub lavd: PathBuf,
    pub flash: PathBuf,
    pub cosmos: PathBuf,
    pub pandemonium: PathBuf,
}

impl Binaries {
    /// A peer's binary (None for EEVDF and scx_morpheus's modes).
    fn peer(&self, sched: Sched) -> Option<&PathBuf> {
        match sched {
            Sched::Bpfland => Some(&self.bpfland),
            Sched::Lavd => Some(&self.lavd),
            Sched::Flash => Some(&self.flash),
            Sched::Cosmos => Some(&self.cosmos),
            Sched::Pandemonium => Some(&self.pandemonium),
            Sched::Eevdf | Sched::Observer | Sched::Enforced | Sched::EnforcedCputime | Sched::EnforcedLag | Sched::EnforcedBurst | Sched::EnforcedSpare | Sched::EnforcedRecent | Sched::EnforcedArrival | Sched::EnforcedMargin500 => None,
        }
    }
}

/// A loaded scheduler (nothing for EEVDF).
pub struct Running {
    sched: Sched,
    child: Option<Child>,
    /// scx_morpheus's agent socket, where workers register.
    pub socket: Option<PathBuf>,
    dir: Option<PathBuf>,
}

impl Running {
    /// The scheduler process's CPU time so far (utime + stime, clock ticks, /proc/PID/stat), for the
    /// debug lines; None for EEVDF (no process) or when it cannot be read.
    pub fn cpu_ticks(&self) -> Option<u64> {
        let pid = self.child.as_ref()?.id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name, which is in parentheses and may hold spaces.
        let rest = &stat[stat.rfind(')')? + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
        Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
    }
}

/// Stops `running` and starts the same scheduler again in its place (the same socket path for
/// scx_morpheus). Returns the stopped instance's stats snapshot, as [`stop`] does.
pub fn restart(running: &mut Running, bins: &Binaries) -> Result<Option<serde_json::Value>> {
    let sched = running.sched;
    let served = std::mem::replace(running, Running { sched, child: None, socket: None, dir: None });
    let totals = stop(served)?;
    *running = start(sched, bins)?;
    Ok(totals)
}

fn sched_ext_state() -> Result<String> {
    Ok(std::fs::read_to_string(SCHED_EXT_STATE).with_context(|| format!("cannot read {SCHED_EXT_STATE}"))?.trim().to_string())
}

/// The kernel must be on its default scheduler before a run starts (no stray sched_ext scheduler).
pub fn check_sched_ext_disabled() -> Result<()> {
    match sched_ext_state() {
        Ok(s) if s == "disabled" => Ok(()),
        Ok(s) => bail!("a sched_ext scheduler is already loaded ({SCHED_EXT_STATE} is '{s}')"),
        Err(e) => bail!("this kernel has no sched_ext: {e:#}"),
    }
}

fn wait_state(child: &mut Child, what: &str, want: &str, seconds: u64) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        if sched_ext_state()? == want {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!("{what} exited ({status}) before sched_ext became '{want}'");
        }
        if Instant::now() > deadline {
            bail!("{SCHED_EXT_STATE} is not '{want}' {seconds} s after starting {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_disabled(seconds: u64) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while sched_ext_state()? != "disabled" {
        if Instant::now() > deadline {
            bail!("{SCHED_EXT_STATE} is still '{}' {seconds} s after the scheduler exited", sched_ext_state()?);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

pub fn start(sched: Sched, bins: &Binaries) -> Result<Running> {
    let mut running = Running { sched, child: None, socket: None, dir: None };
    match sched {
        Sched::Eevdf => return Ok(running),
        Sched::Bpfland | Sched::Lavd | Sched::Flash | Sched::Cosmos | Sched::Pandemonium => {
            let bin = bins.peer(sched).expect("a peer has a binary");
            let mut child = Command::new(bin)
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .with_context(|| format!("cannot start {}", bin.display()))?;
            // Generous: under TCG the verifier alone can take minutes for a large BPF scheduler.
            if let Err(e) = wait_state(&mut child, sched.name(), "enabled", LOAD_SECONDS) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
            running.child = Some(child);
        }
        Sched::Observer | Sched::Enforced | Sched::EnforcedCputime | Sched::EnforcedLag | Sched::EnforcedBurst | Sched::EnforcedSpare | Sched::EnforcedRecent | Sched::EnforcedArrival | Sched::EnforcedMargin500 => {
            let dir = std::env::temp_dir().join(format!("morpheus-compare-{}-{}", std::process::id(), sched.name()));
            std::fs::create_dir_all(&dir)?;
            let socket = dir.join("agent.sock");
            let mode = if sched == Sched::Observer { "observer" } else { "enforced" };
            // Observer and Enforced run scx_morpheus's default order, the one it ships with.
            let order = match sched {
                Sched::EnforcedCputime => Some("cputime"),
                Sched::EnforcedLag => Some("lag"),
                Sched::EnforcedBurst => Some("burst"),
                Sched::EnforcedSpare => Some("spare"),
                Sched::EnforcedRecent => Some("recent"),
                Sched::EnforcedArrival => Some("arrival"),
                _ => None,
            };
            let mut child = Command::new(&bins.morpheus)
                .args(["--backend", "kernel", "--mode", mode, "--policy", "kick"])
                .args(order.map(|o| ["--base-order", o]).into_iter().flatten())
                .args(if sched == Sched::EnforcedMargin500 { &["--wake-margin-us", "500"][..] } else { &[] })
                .arg("--socket")
                .arg(&socket)
                // With COMPARE_DEBUG the base policy's debug trace is on (main.rs prints it per cell).
                .args(std::env::var_os("COMPARE_DEBUG").map(|_| "--debug-base-trace"))
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .with_context(|| format!("cannot start {}", bins.morpheus.display()))?;
            let deadline = Instant::now() + Duration::from_secs(LOAD_SECONDS);
            while !socket.exists() {
                if let Some(status) = child.try_wait()? {
                    bail!("scx_morpheus exited early ({status})");
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    bail!("scx_morpheus did not open {} within {LOAD_SECONDS} s", socket.display());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            running.child = Some(child);
            running.socket = Some(socket);
            running.dir = Some(dir);
        }
    }
    let ops = std::fs::read_to_string(SCHED_EXT_OPS).unwrap_or_default();
    eprintln!("compare: {} loaded (sched_ext ops '{}')", sched.name(), ops.trim());
    Ok(running)
}

/// Stops the scheduler and waits until the kernel is back on EEVDF. Returns scx_morpheus's stats
/// snapshot, read just before it stops (None for the others).
pub fn stop(mut running: Running) -> Result<Option<serde_json::Value>> {
    let Some(mut child) = running.child.take() else { return Ok(None) };
    let stats = running.socket.as_deref().map(morpheus_starvation::read_stats).transpose();
    if let Some(ms) = cpu_time_ms(child.id()) {
        eprintln!("compare: {} userspace CPU time while loaded: {ms} ms", running.sched.name());
    }
    // The scx schedulers and scx_morpheus all unload on SIGINT.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let status = child.wait()?;
    if let Some(dir) = running.dir.take() {
        let _ = std::fs::remove_dir_all(dir);
    }
    if !status.success() {
        if running.sched.is_morpheus() {
            bail!("{} exited with {status}", running.sched.name());
        }
        eprintln!("compare: note: {} exited with {status} on SIGINT", running.sched.name());
    }
    wait_disabled(30)?;
    stats
}

/// utime + stime of a process, all threads (ms), from /proc/PID/stat.
fn cpu_time_ms(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at state (field 3).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(ticks * 1000 / hz)
}

/// With COMPARE_DEBUG: what scx_morpheus did in one cell, the change of each counter between two
/// stats snapshots: the hints it published, then every backend counter (the kernel backend's kicks,
/// check-timer runs, wake-up preemptions, ...), with the base policy's debug trace (scx_morpheus
/// --debug-base-trace) as its `base_trace_*` counters without the prefix (the maxima are since the
/// scheduler loaded).
pub fn cell_counters_delta(before: &serde_json::Value, after: &serde_json::Value) -> String {
    let hints = stats_counter(after, "/hints_emitted").saturating_sub(stats_counter(before, "/hints_emitted"));
    let Some(counters) = after.pointer("/backend_counters").and_then(|v| v.as_object()) else { return format!("hints={hints}") };
    std::iter::once(format!("hints={hints}"))
        .chain(counters.iter().map(|(k, v)| {
            let (now, was) = (v.as_u64().unwrap_or(0), stats_counter(before, &format!("/backend_counters/{k}")));
            let name = k.strip_prefix("base_trace_").unwrap_or(k);
            // A maximum is the instance's since it started; a clock is shown with its advance in the cell.
            if k.ends_with("_max_us") {
                format!("{name}={now}")
            } else if k.ends_with("_now_us") {
                format!("{name}={now}(+{})", now.saturating_sub(was))
            } else {
                format!("{name}={}", now.saturating_sub(was))
            }
        }))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A counter of scx_morpheus's stats snapshot (0 when absent).
pub fn stats_counter(stats: &serde_json::Value, pointer: &str) -> u64 {
    stats.pointer(pointer).and_then(|v| v.as_u64()).unwrap_or(0)
}
