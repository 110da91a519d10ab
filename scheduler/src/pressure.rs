// SPDX-License-Identifier: GPL-2.0-only
//! Machine pressure for the region header: PSI "some avg10" of cpu, io and memory, and the run-queue
//! depth from /proc/loadavg, published under the header's seqlock.

use std::fs;
use std::time::Duration;

use morpheus_abi::Pressure;



/// PSI's avg10 moves every 2 s; a few updates per second are plenty.
pub const PUBLISH_INTERVAL: Duration = Duration::from_millis(250);

/// Parses the `some avg10=` figure of a /proc/pressure file, in hundredths of a percent.
pub fn parse_psi_some_avg10(text: &str) -> Option<u32> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    let value = line.split_whitespace().find_map(|f| f.strip_prefix("avg10="))?;
    let (whole, frac) = value.split_once('.').unwrap_or((value, "0"));
    let whole: u32 = whole.parse().ok()?;
    let mut frac2: String = frac.chars().take(2).collect();
    while frac2.len() < 2 {
        frac2.push('0');
    }
    whole.checked_mul(100)?.checked_add(frac2.parse::<u32>().ok()?)
}

/// The runnable tasks of /proc/loadavg (its fourth field, `running/threads`): the kernel's nr_running(),
/// the figure /proc/stat reports as procs_running. /proc/stat is not read for it: the kernel sums every
/// IRQ's count over every CPU for each read, and in the VM (TCG) the idle agent's four reads a second
/// took it from 1.3 % to 5.4 % of a CPU (scheduler/BENCHMARKS.md).
pub fn parse_loadavg_running(loadavg: &str) -> Option<u32> {
    let field = loadavg.split_whitespace().nth(3)?;
    let (running, _threads) = field.split_once('/')?;
    running.parse().ok()
}

pub struct PressureFeed {
    nr_cpus: u32,
}

impl Default for PressureFeed {
    fn default() -> Self {
        Self::new()
    }
}

impl PressureFeed {
    pub fn new() -> PressureFeed {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        PressureFeed { nr_cpus: if n > 0 { n as u32 } else { 1 } }
    }

    /// Whether this kernel reports PSI (it may be built with it but boot with psi=0).
    pub fn psi_available() -> bool {
        fs::read_to_string("/proc/pressure/cpu").map(|t| parse_psi_some_avg10(&t).is_some()).unwrap_or(false)
    }

    /// Reads the current figures.
    pub fn sample(&self, now_ns: u64) -> Pressure {
        let psi = |name: &str| {
            fs::read_to_string(format!("/proc/pressure/{name}")).ok().and_then(|t| parse_psi_some_avg10(&t)).unwrap_or(0)
        };
        let cpu = psi("cpu");
        let running = fs::read_to_string("/proc/loadavg").ok().and_then(|t| parse_loadavg_running(&t)).unwrap_or(0);
        Pressure {
            seq: 0,
            level: morpheus_policy_ffi::pressure_level(cpu),
            cpu_some_avg10: cpu,
            io_some_avg10: psi("io"),
            memory_some_avg10: psi("memory"),
            runqueue_depth: running.saturating_sub(self.nr_cpus),
            updated_ns: now_ns,
        }
    }

}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_psi() {
        let text = "some avg10=63.82 avg60=37.17 avg300=15.78 total=77439840\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(parse_psi_some_avg10(text), Some(6382));
        assert_eq!(parse_psi_some_avg10("some avg10=0.5 avg60=0"), Some(50));
        assert_eq!(parse_psi_some_avg10("full avg10=1.00"), None);
        assert_eq!(parse_psi_some_avg10("some avg10=x"), None);
    }

    #[test]
    fn parses_loadavg_running() {
        assert_eq!(parse_loadavg_running("0.20 0.18 0.12 7/80 11206\n"), Some(7));
        assert_eq!(parse_loadavg_running("0.20 0.18 0.12\n"), None);
        assert_eq!(parse_loadavg_running("0.20 0.18 0.12 x/80 11206\n"), None);
    }
}
