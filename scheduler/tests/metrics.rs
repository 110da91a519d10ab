// SPDX-License-Identifier: GPL-2.0-only
//! `--metrics`: the real scx_morpheus (simulation backend) serves OpenMetrics over HTTP; the test
//! scrapes it, checks the exposition against the format's rules (TYPE before samples, families
//! contiguous, counter samples `_total`, info samples `_info`, valid names and label sets, `# EOF`
//! last) and the figures against the stats socket's snapshot, and feeds it bad requests and options.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Instant;

use scx_morpheus::openmetrics::CONTENT_TYPE;
use scx_morpheus::snapshot::Metrics;
use scx_morpheus::stats_socket::{self, Reader};

mod common;
use common::{SimAgent, BIN, PATIENCE};

/// The agent with a reader of its stats socket, to compare the scrape's figures with.
struct Agent {
    _agent: SimAgent,
    stats: Reader,
}

impl Agent {
    fn start(extra: &[&str]) -> Agent {
        let agent = SimAgent::start(extra, Stdio::null());
        let stats = Reader::connect_within(&stats_socket::path_for(&agent.socket()), PATIENCE).unwrap();
        Agent { _agent: agent, stats }
    }
}

/// One HTTP exchange: (status line, headers lower-cased, body).
fn http(addr: SocketAddr, request: &str) -> (String, HashMap<String, String>, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").expect("an HTTP head");
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().to_owned();
    let headers = lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_lowercase(), v.trim().to_owned())).collect();
    (status, headers, body.to_owned())
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':') && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// `name{k="v",...} value` -> (name, labels, value), or why not.
fn parse_sample(line: &str) -> Result<(String, Vec<(String, String)>, f64), String> {
    let (series, value) = line.rsplit_once(' ').ok_or("no value")?;
    let value: f64 = value.parse().map_err(|_| format!("value {value:?}"))?;
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (name, rest.strip_suffix('}').ok_or("unclosed label set")?),
        None => (series, ""),
    };
    let mut parsed = Vec::new();
    let mut rest = labels;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"").ok_or("label without =\"")?;
        // The value ends at the first quote not escaped by a backslash.
        let mut end = None;
        let mut escaped = false;
        for (i, c) in after.char_indices() {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => {
                    end = Some(i);
                    break;
                }
                _ => escaped = false,
            }
        }
        let end = end.ok_or("unterminated label value")?;
        if !valid_name(key) {
            return Err(format!("label name {key:?}"));
        }
        parsed.push((key.to_owned(), after[..end].to_owned()));
        rest = after[end + 1..].strip_prefix(',').unwrap_or(&after[end + 1..]);
    }
    Ok((name.to_owned(), parsed, value))
}

/// Checks the exposition's structure; returns every sample by `name{sorted labels}`.
fn validate(text: &str) -> HashMap<String, f64> {
    assert!(text.ends_with("# EOF\n"), "the exposition must end with # EOF: {text:?}");
    assert_eq!(text.matches("# EOF").count(), 1);
    let mut types: HashMap<String, String> = HashMap::new();
    let mut current: Option<(String, String)> = None;
    let mut closed: HashSet<String> = HashSet::new();
    let mut samples = HashMap::new();
    for line in text.lines().filter(|l| *l != "# EOF") {
        assert!(!line.is_empty(), "blank line in the exposition");
        if let Some(meta) = line.strip_prefix("# ") {
            let mut parts = meta.splitn(3, ' ');
            let (keyword, name, rest) = (parts.next().unwrap(), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            assert!(valid_name(name), "{line}");
            match keyword {
                "TYPE" => {
                    assert!(["counter", "gauge", "info", "stateset", "histogram", "gaugehistogram", "summary", "unknown"].contains(&rest), "{line}");
                    assert!(types.insert(name.to_owned(), rest.to_owned()).is_none(), "family {name} declared twice");
                    if let Some((previous, _)) = current.take() {
                        closed.insert(previous);
                    }
                    current = Some((name.to_owned(), rest.to_owned()));
                }
                "HELP" | "UNIT" => {
                    assert_eq!(current.as_ref().map(|c| c.0.as_str()), Some(name), "{keyword} outside its family: {line}");
                    if keyword == "UNIT" {
                        assert!(name.ends_with(&format!("_{rest}")), "a family with a unit ends with it: {line}");
                    }
                }
                _ => panic!("unknown comment {line}"),
            }
            continue;
        }
        let (name, mut labels, value) = parse_sample(line).unwrap_or_else(|e| panic!("bad sample line {line:?}: {e}"));
        let (family, kind) = current.clone().unwrap_or_else(|| panic!("sample before any TYPE: {line}"));
        let suffix = name.strip_prefix(&family).unwrap_or_else(|| panic!("{name} outside its family {family}"));
        let allowed: &[&str] = match kind.as_str() {
            "counter" => &["_total", "_created"],
            "info" => &["_info"],
            _ => &[""],
        };
        assert!(allowed.contains(&suffix), "{name}: a {kind} sample of {family} must end in {allowed:?}");
        assert!(!closed.contains(&family), "family {family} is not contiguous");
        assert!(value.is_finite() && (kind != "counter" || value >= 0.0), "{line}");
        let keys: HashSet<&String> = labels.iter().map(|(k, _)| k).collect();
        assert_eq!(keys.len(), labels.len(), "repeated label in {line}");
        labels.sort();
        let key = format!("{name}{{{}}}", labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","));
        assert!(samples.insert(key.clone(), value).is_none(), "sample {key} twice");
    }
    samples
}

fn value(samples: &HashMap<String, f64>, name: &str, extra: &str, m: &Metrics) -> f64 {
    let mut labels = vec![format!("backend={}", m.backend), format!("mode={}", m.mode), format!("policy={}", m.policy)];
    labels.extend(extra.split(',').filter(|l| !l.is_empty()).map(str::to_owned));
    labels.sort();
    let key = format!("{name}{{{}}}", labels.join(","));
    *samples.get(&key).unwrap_or_else(|| panic!("no sample {key}; have {:?}", samples.keys().collect::<Vec<_>>()))
}

#[test]
fn metrics_endpoint_serves_valid_openmetrics_with_the_stats_counters() {
    let mut agent = Agent::start(&["--mode", "enforced", "--policy", "throttle", "--metrics", "127.0.0.1:0"]);
    let before = agent.stats.fetch().unwrap();
    let addr: SocketAddr = before.metrics_address.parse().expect("the stats name the metrics address");
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");

    let (status, headers, body) = http(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let after = agent.stats.fetch().unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(headers["content-type"], CONTENT_TYPE);
    assert_eq!(headers["content-length"], body.len().to_string());
    let samples = validate(&body);

    // The same figures as the stats socket (cumulative counters between two snapshots around the scrape).
    let m = &after;
    assert_eq!((m.mode.as_str(), m.policy.as_str()), ("ENFORCED", "CGROUP_THROTTLE"));
    let ticks = value(&samples, "morpheus_ticks_total", "", m);
    assert!(ticks >= before.ticks as f64 && ticks <= after.ticks as f64, "{ticks} outside {}..{}", before.ticks, after.ticks);
    assert_eq!(value(&samples, "morpheus_workers", "", m), 0.0);
    assert_eq!(value(&samples, "morpheus_build_info", &format!("version={}", m.version), m), 1.0);
    assert_eq!(value(&samples, "morpheus_slice_seconds", "", m), m.slice_us as f64 / 1e6);
    for verdict in m.gate_verdicts.keys() {
        value(&samples, "morpheus_gate_verdicts_total", &format!("verdict={verdict}"), m);
    }
    for action in m.actions.keys() {
        value(&samples, "morpheus_actions_total", &format!("action={action}"), m);
    }
    for kind in ["hint", "escalation", "acknowledgement"] {
        value(&samples, "morpheus_reaction_seconds", &format!("kind={kind},percentile=99"), m);
        value(&samples, "morpheus_reaction_samples_total", &format!("kind={kind}"), m);
    }
    let level = value(&samples, "morpheus_pressure_level", "", m);
    assert!((0.0..=3.0).contains(&level), "{level}");
    // No worker identity on a TCP port.
    assert!(!body.contains("tid=") && !body.contains("comm="), "worker identities exported");

    // Bad requests get an HTTP error, and the endpoint keeps serving.
    assert!(http(addr, "POST /metrics HTTP/1.1\r\n\r\n").0.contains("405"));
    assert!(http(addr, "GET /other HTTP/1.1\r\n\r\n").0.contains("404"));
    let oversized = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(9000));
    assert!(http(addr, &oversized).0.contains("431"));
    assert!(http(addr, "GET /metrics HTTP/1.1\r\n\r\n").0.contains("200"));
}

#[test]
fn metrics_option_refuses_bad_addresses_and_a_taken_port() {
    let out = Command::new(BIN).args(["--backend", "sim", "--metrics", "localhost"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid value 'localhost' for '--metrics"), "{}", String::from_utf8_lossy(&out.stderr));

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let out = Command::new(BIN)
        .args(["--backend", "sim", "--metrics", &format!("127.0.0.1:{port}"), "--socket"])
        .arg(dir.path().join("sock"))
        .output()
        .unwrap();
    assert!(!out.status.success(), "started on a taken port");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("--metrics 127.0.0.1:{port}: cannot listen")), "{stderr}");
    assert!(start.elapsed() < PATIENCE);
    assert!(!dir.path().join("sock").exists(), "the registration socket was opened before the refusal");
}
