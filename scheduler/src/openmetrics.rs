// SPDX-License-Identifier: GPL-2.0-only
//! `--metrics ADDR:PORT`: the agent's counters in the OpenMetrics text format, over HTTP (GET
//! /metrics), for Prometheus and the like. Opt-in.
//!
//! Each scrape reads a fresh snapshot from the agent's own stats socket, so the figures are the ones
//! `--monitor` and `morpheus top` show. Only aggregate counters are exported: the worker list names
//! other users' threads (pid, tid, comm), and a TCP port is open to every local user, so it stays on
//! the 0600 stats socket.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::snapshot::Metrics;
use crate::stats_socket::Reader;

/// The content type OpenMetrics 1.0 scrapers ask for.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Longest request head accepted.
const MAX_REQUEST: usize = 8192;
/// A client must send its whole request head within this long (a silent or trickling one is cut off),
/// and read the reply within as long again.
const REQUEST_DEADLINE: Duration = Duration::from_secs(2);

/// Label value escaping (OpenMetrics: backslash, double quote, newline).
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

struct Writer {
    out: String,
    /// The agent-wide labels every sample carries.
    common: String,
}

impl Writer {
    fn family(&mut self, name: &str, kind: &str, unit: Option<&str>, help: &str) {
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        if let Some(unit) = unit {
            let _ = writeln!(self.out, "# UNIT {name} {unit}");
        }
        let _ = writeln!(self.out, "# HELP {name} {}", escape(help));
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        let mut all = self.common.clone();
        for (k, v) in labels {
            let _ = write!(all, ",{k}=\"{}\"", escape(v));
        }
        let _ = writeln!(self.out, "{name}{{{all}}} {value}");
    }

    fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.family(name, "counter", None, help);
        self.sample(&format!("{name}_total"), &[], value);
    }

    fn gauge(&mut self, name: &str, help: &str, value: impl std::fmt::Display) {
        self.family(name, "gauge", None, help);
        self.sample(name, &[], value);
    }

    fn counters_by(&mut self, name: &str, label: &str, help: &str, map: &BTreeMap<String, u64>) {
        self.family(name, "counter", None, help);
        for (k, v) in map {
            self.sample(&format!("{name}_total"), &[(label, k)], v);
        }
    }
}

/// One snapshot in the OpenMetrics text format, ending with `# EOF`.
pub fn render(m: &Metrics) -> String {
    let common = format!("backend=\"{}\",mode=\"{}\",policy=\"{}\"", escape(&m.backend), escape(&m.mode), escape(&m.policy));
    let mut w = Writer { out: String::new(), common };
    w.family("morpheus_build", "info", None, "scx_morpheus version and build id");
    w.sample("morpheus_build_info", &[("version", &m.version)], 1);
    w.gauge("morpheus_uptime_seconds", "Seconds since the agent started", m.uptime_ms as f64 / 1000.0);
    w.gauge("morpheus_slice_seconds", "Slice after which a worker is asked to yield", m.slice_us as f64 / 1e6);
    w.gauge("morpheus_grace_seconds", "Time past the slice before a worker may be escalated", m.grace_us as f64 / 1e6);
    w.gauge("morpheus_workers", "Workers registered now", m.nr_workers);
    w.family("morpheus_workers_by_runtime_mode", "gauge", None, "Registered workers by the runtime_mode their runtime reports");
    for (k, v) in &m.workers_by_runtime_mode {
        w.sample("morpheus_workers_by_runtime_mode", &[("runtime_mode", k)], v);
    }
    w.counter("morpheus_ticks", "Backend ticks (sim) or BPF timer runs (kernel)", m.ticks);
    w.counter("morpheus_hints_emitted", "Hints emitted (preempt_seq increments)", m.hints_emitted);
    w.counter("morpheus_hints_dropped", "Hints dropped: rate limited with no request pending, or lost to a full ring", m.hints_dropped);
    w.counter("morpheus_escalations", "Escalations applied", m.escalations);
    w.counters_by(
        "morpheus_escalations_by_policy",
        "escalation_policy",
        "Escalations applied, by the escalation policy in force",
        &m.escalations_by_policy,
    );
    w.counters_by("morpheus_gate_verdicts", "verdict", "Gate evaluations past the slice, by verdict", &m.gate_verdicts);
    w.counters_by("morpheus_actions", "action", "Escalation actions taken or undone, by action", &m.actions);
    w.counter("morpheus_fallbacks", "Escalations that fell back from the configured effect", m.fallbacks);
    w.counter("morpheus_effect_errors", "Errors applying or lifting an effect", m.effect_errors);
    w.counter("morpheus_spared_in_critical", "Effects not applied or undone at once: the worker was in a critical section", m.spared_in_critical);
    w.counter("morpheus_held_in_critical", "Effects seen in force inside a critical section", m.held_in_critical);
    w.counter("morpheus_escalation_events", "Escalation events recorded (sim backend)", m.events_total);
    w.counters_by("morpheus_backend", "counter", "Counters only this backend has (kernel: the BPF program's)", &m.backend_counters);
    let level = ["NONE", "LOW", "MEDIUM", "HIGH"].iter().position(|l| *l == m.pressure.level).map_or(-1, |i| i as i64);
    w.gauge("morpheus_pressure_level", "pressure_level: 0 NONE, 1 LOW, 2 MEDIUM, 3 HIGH", level);
    w.family("morpheus_pressure_some_avg10_ratio", "gauge", Some("ratio"), "PSI some avg10 by resource, as a ratio");
    for (resource, percent) in [("cpu", m.pressure.cpu_some_avg10), ("io", m.pressure.io_some_avg10), ("memory", m.pressure.memory_some_avg10)] {
        w.sample("morpheus_pressure_some_avg10_ratio", &[("resource", resource)], percent / 100.0);
    }
    w.gauge("morpheus_runqueue_depth", "Runnable tasks beyond the number of CPUs", m.pressure.runqueue_depth);
    w.family("morpheus_reaction_seconds", "gauge", Some("seconds"), "Reaction time percentiles over the recent samples (max: since start)");
    for (kind, r) in &m.reactions {
        for (percentile, us) in [("50", r.p50_us), ("90", r.p90_us), ("99", r.p99_us), ("100", r.max_us)] {
            w.sample("morpheus_reaction_seconds", &[("kind", kind), ("percentile", percentile)], us / 1e6);
        }
    }
    w.family("morpheus_reaction_samples", "counter", None, "Reaction time samples since start");
    for (kind, r) in &m.reactions {
        w.sample("morpheus_reaction_samples_total", &[("kind", kind)], r.count);
    }
    w.out.push_str("# EOF\n");
    w.out
}

/// Binds the endpoint (at start-up, so a bad address or a port in use stops the agent at once).
pub fn bind(addr: SocketAddr) -> Result<TcpListener> {
    let listener = TcpListener::bind(addr).with_context(|| format!("--metrics {addr}: cannot listen"))?;
    if !addr.ip().is_loopback() {
        log::warn!("--metrics {addr}: not a loopback address; the counters are readable from the network");
    }
    Ok(listener)
}

/// Connections served at once; one more is answered 503 at once and closed (a scraper retries).
const MAX_CLIENTS: usize = 16;

/// Serves scrapes until the process exits, each connection on its own thread (at most
/// [`MAX_CLIENTS`]), so a client that trickles its request delays no one else's scrape (A04).
pub fn serve(listener: TcpListener, stats: PathBuf) {
    let reader: Arc<Mutex<Option<Reader>>> = Arc::new(Mutex::new(None));
    let stats = Arc::new(stats);
    let active = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        if active.load(Ordering::Acquire) >= MAX_CLIENTS {
            let _ = stream.set_nonblocking(true);
            let _ = respond(&mut stream, "503 Service Unavailable", "text/plain", "too many scrapes at once\n");
            continue;
        }
        active.fetch_add(1, Ordering::AcqRel);
        let (reader, stats, done) = (Arc::clone(&reader), Arc::clone(&stats), Arc::clone(&active));
        let spawned = std::thread::Builder::new().name("metrics-client".into()).spawn(move || {
            if let Err(e) = answer(stream, &stats, &reader) {
                log::debug!("--metrics: {e:#}");
            }
            done.fetch_sub(1, Ordering::AcqRel);
        });
        if let Err(e) = spawned {
            active.fetch_sub(1, Ordering::AcqRel);
            log::warn!("--metrics: cannot start a thread for a scrape: {e}");
        }
    }
}

/// The time left until `deadline`, or a TimedOut error once it has passed (a zero timeout would mean
/// "block forever" to set_read_timeout).
fn remaining(deadline: Instant) -> std::io::Result<Duration> {
    match deadline.checked_duration_since(Instant::now()) {
        Some(left) if !left.is_zero() => Ok(left),
        _ => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the request's deadline passed")),
    }
}

fn answer(mut stream: TcpStream, stats: &Path, reader: &Mutex<Option<Reader>>) -> Result<()> {
    // The whole request head must arrive by the deadline, however it is split (a byte every second
    // would otherwise renew a per-read timeout for hours).
    let deadline = Instant::now() + REQUEST_DEADLINE;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        stream.set_read_timeout(Some(remaining(deadline)?))?;
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_REQUEST {
            stream.set_write_timeout(Some(REQUEST_DEADLINE))?;
            return respond(&mut stream, "431 Request Header Fields Too Large", "text/plain", "request too large\n");
        }
    }
    // The reply gets a deadline of its own (a client that stops reading is cut off).
    stream.set_write_timeout(Some(REQUEST_DEADLINE))?;
    let text = String::from_utf8_lossy(&head);
    let mut first = text.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
    if method != "GET" {
        return respond(&mut stream, "405 Method Not Allowed", "text/plain", "only GET\n");
    }
    if target != "/metrics" {
        return respond(&mut stream, "404 Not Found", "text/plain", "see /metrics\n");
    }
    let snapshot = {
        let mut reader = reader.lock().unwrap_or_else(|p| p.into_inner());
        let snapshot = (|| -> Result<Metrics> {
            if reader.is_none() {
                *reader = Some(Reader::connect(stats)?);
            }
            reader.as_mut().expect("connected above").fetch()
        })();
        if snapshot.is_err() {
            *reader = None;
        }
        snapshot
    };
    match snapshot {
        Ok(m) => respond(&mut stream, "200 OK", CONTENT_TYPE, &render(&m)),
        Err(e) => respond(&mut stream, "503 Service Unavailable", "text/plain", &format!("the agent's stats are unavailable: {e:#}\n")),
    }
}

fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &str) -> Result<()> {
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped_and_the_exposition_ends_with_eof() {
        let m = Metrics { version: "1.0 \"odd\"\\build\nx".into(), backend: "SIM".into(), ..Metrics::default() };
        let text = render(&m);
        assert!(text.contains(r#"morpheus_build_info{backend="SIM",mode="",policy="",version="1.0 \"odd\"\\build\nx"} 1"#), "{text}");
        assert!(text.ends_with("\n# EOF\n"));
        assert_eq!(text.lines().filter(|l| l.starts_with("# TYPE morpheus_ticks ")).count(), 1);
    }

    /// A04: a client trickling its request neither delays another client's scrape (served on its
    /// own thread) nor holds its connection past the whole-request deadline (a byte every 100 ms
    /// renewed a per-read timeout before: 8 KiB would have taken 14 minutes).
    #[test]
    fn a_trickling_client_blocks_no_scrape_and_is_cut_off() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stats = tempfile::tempdir().unwrap().path().join("no-stats.sock"); // 503: no agent
        std::thread::spawn(move || serve(listener, stats));
        let mut slow = TcpStream::connect(addr).unwrap();
        slow.write_all(b"G").unwrap();
        let trickler = std::thread::spawn(move || {
            // Bytes sent before the agent cut the connection (a write fails once it is closed).
            let mut sent = 1u32;
            while sent < 600 {
                std::thread::sleep(Duration::from_millis(100));
                if slow.write_all(b"E").is_err() {
                    break;
                }
                sent += 1;
            }
            sent
        });
        std::thread::sleep(Duration::from_millis(300));
        let mut scrape = TcpStream::connect(addr).unwrap();
        scrape.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        scrape.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut reply = String::new();
        scrape.read_to_string(&mut reply).expect("the scrape is answered while the trickler still sends");
        assert!(reply.starts_with("HTTP/1.1 503 "), "{reply}");
        // 2 s of deadline is about 20 bytes; 600 bytes (a minute at least) means it was never cut.
        let sent = trickler.join().unwrap();
        assert!(sent < 600, "the trickling client was never cut off ({sent} bytes sent)");
    }
}
