// SPDX-License-Identifier: GPL-2.0-only
//! `morpheus top`'s screen: one [`Metrics`] snapshot (and the one before, for rates) drawn with
//! ratatui. The data comes from the agent's stats socket (src/stats_socket.rs), the agent being the
//! source of truth; this module only lays it out, so the same drawing runs on a real terminal and on
//! ratatui's TestBackend.

use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table};
use ratatui::Frame;

use crate::snapshot::{Metrics, ReactionStats, WorkerStats};

/// The worker table's columns, in order (the test reads the screen by these names).
pub const COLUMNS: [&str; 14] = [
    "PID", "TID", "COMM", "KIND", "STATE", "PENDING", "YIELDS", "BY_REASON", "ESCALATIONS", "ESCALATED", "IN_CRIT", "ESCAPABLE", "PRIO",
    "HINTS_DROPPED",
];

/// One letter per yield_reason in the BY_REASON column (the legend says which).
fn reason_letter(reason: &str) -> &'static str {
    match reason {
        "PREEMPT_REQUEST" => "P",
        "BUDGET" => "B",
        "PRESSURE" => "R",
        "DEFENSIVE" => "D",
        "EXPLICIT" => "X",
        "NONE" => "N",
        _ => "?",
    }
}

fn by_reason(w: &WorkerStats) -> String {
    if w.yields_by_reason.is_empty() {
        return "-".into();
    }
    w.yields_by_reason.iter().map(|(r, n)| format!("{}{n}", reason_letter(r))).collect::<Vec<_>>().join(",")
}

fn reaction(name: &str, r: Option<&ReactionStats>) -> String {
    match r {
        Some(r) if r.count > 0 => format!("{name} n={} p50={:.0} p90={:.0} p99={:.0} max={:.0} µs", r.count, r.p50_us, r.p90_us, r.p99_us, r.max_us),
        _ => format!("{name} n=0"),
    }
}

/// Per-second rate of a cumulative counter between two snapshots of the same agent.
fn rate(now: &Metrics, earlier: Option<&Metrics>, get: impl Fn(&Metrics) -> u64) -> String {
    match earlier {
        Some(e) if e.generation == now.generation && now.uptime_ms > e.uptime_ms => {
            format!("{:.1}/s", get(now).saturating_sub(get(e)) as f64 * 1000.0 / (now.uptime_ms - e.uptime_ms) as f64)
        }
        _ => "-/s".into(),
    }
}

fn map_line(map: &std::collections::BTreeMap<String, u64>) -> String {
    map.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

/// The summary lines above the worker table.
pub fn summary_lines(m: &Metrics, earlier: Option<&Metrics>) -> Vec<String> {
    let modes: Vec<String> = m.workers_by_runtime_mode.iter().map(|(k, v)| format!("{k} {v}")).collect();
    vec![
        format!(
            "{} {} {} | slice {} µs, grace {} µs | up {:.1} s | {}",
            m.backend,
            m.mode,
            m.policy,
            m.slice_us,
            m.grace_us,
            m.uptime_ms as f64 / 1000.0,
            m.version
        ),
        format!(
            "pressure {} | cpu {:.1}% io {:.1}% memory {:.1}% | runqueue +{}",
            m.pressure.level, m.pressure.cpu_some_avg10, m.pressure.io_some_avg10, m.pressure.memory_some_avg10, m.pressure.runqueue_depth
        ),
        format!(
            "workers {} ({}) | hints {} {} | dropped {} {} | escalations {} {}",
            m.nr_workers,
            modes.join(", "),
            m.hints_emitted,
            rate(m, earlier, |x| x.hints_emitted),
            m.hints_dropped,
            rate(m, earlier, |x| x.hints_dropped),
            m.escalations,
            rate(m, earlier, |x| x.escalations),
        ),
        format!("gate verdicts: {}", map_line(&m.gate_verdicts)),
        format!(
            "actions: {} | by policy: {} | fallbacks {} effect_errors {} spared_in_critical {} held_in_critical {}",
            map_line(&m.actions),
            map_line(&m.escalations_by_policy),
            m.fallbacks,
            m.effect_errors,
            m.spared_in_critical,
            m.held_in_critical
        ),
        format!(
            "reaction: {} | {} | {}",
            reaction("hint", m.reactions.get("hint")),
            reaction("escalation", m.reactions.get("escalation")),
            reaction("ack", m.reactions.get("acknowledgement"))
        ),
    ]
}

/// One table row per worker, the cells in [`COLUMNS`] order.
pub fn worker_cells(w: &WorkerStats) -> [String; 14] {
    [
        w.pid.to_string(),
        w.tid.to_string(),
        if w.comm.is_empty() { "?".into() } else { w.comm.replace(' ', "_") },
        w.runtime_kind.clone(),
        w.state.clone(),
        w.pending_requests.to_string(),
        w.yields.to_string(),
        by_reason(w),
        w.escalations.to_string(),
        w.escalated.to_string(),
        w.in_critical.to_string(),
        w.escapable.to_string(),
        w.priority.to_string(),
        w.hints_dropped.to_string(),
    ]
}

/// What the screen shows besides the snapshot.
pub struct Status<'a> {
    /// The stats socket read.
    pub source: &'a str,
    /// Set while the agent cannot be reached (the last snapshot stays on screen).
    pub error: Option<&'a str>,
}

/// Draws one screen.
pub fn draw(frame: &mut Frame, m: &Metrics, earlier: Option<&Metrics>, status: &Status<'_>) {
    let summary = summary_lines(m, earlier);
    let [top, table, footer] = Layout::vertical([
        Constraint::Length(summary.len() as u16 + 2),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    let title = format!(" morpheus top: {} ", status.source);
    frame.render_widget(
        Paragraph::new(summary.into_iter().map(Line::from).collect::<Vec<_>>()).block(Block::default().borders(Borders::ALL).title(title)),
        top,
    );
    let widths = [
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(16),
        Constraint::Length(7),
        Constraint::Length(10),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(18),
        Constraint::Length(11),
        Constraint::Length(9),
        Constraint::Length(7),
        Constraint::Length(9),
        Constraint::Length(5),
        Constraint::Length(13),
    ];
    let rows = m.workers.iter().map(|w| Row::new(worker_cells(w).to_vec()));
    let header = Row::new(COLUMNS.to_vec()).style(Style::default().add_modifier(Modifier::BOLD));
    frame.render_widget(
        Table::new(rows, widths)
            .header(header)
            .block(Block::default().borders(Borders::ALL).title(format!(" workers: {} ", m.workers.len()))),
        table,
    );
    let help = match status.error {
        Some(e) => format!("q quit | DISCONNECTED: {e} (retrying)"),
        None => "q quit | BY_REASON: P preempt request, B budget, R pressure, D defensive, X explicit".into(),
    };
    frame.render_widget(Paragraph::new(help), footer);
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    fn screen(m: &Metrics, width: u16) -> String {
        let mut terminal = Terminal::new(TestBackend::new(width, 20)).unwrap();
        terminal.draw(|f| draw(f, m, None, &Status { source: "/run/morpheus/agent.sock.stats", error: None })).unwrap();
        let buffer = terminal.backend().buffer().clone();
        (0..buffer.area.height)
            .map(|y| (0..buffer.area.width).map(|x| buffer[(x, y)].symbol().to_string()).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn draws_the_counters_and_one_row_per_worker() {
        let mut m = Metrics { backend: "SIM".into(), mode: "ENFORCED".into(), policy: "HYBRID".into(), nr_workers: 1, ..Metrics::default() };
        m.gate_verdicts.insert("critical".into(), 7);
        m.workers.push(WorkerStats {
            pid: 41,
            tid: 42,
            comm: "spin worker".into(),
            runtime_kind: "PYTHON".into(),
            state: "RUNNING".into(),
            pending_requests: 3,
            yields: 9,
            yields_by_reason: [("PREEMPT_REQUEST".to_string(), 8), ("EXPLICIT".to_string(), 1)].into_iter().collect(),
            escalated: 1,
            escalations: 2,
            escapable: 1,
            priority: -1,
            hints_dropped: 5,
            ..WorkerStats::default()
        });
        let text = screen(&m, 200);
        assert!(text.contains("SIM ENFORCED HYBRID"), "{text}");
        assert!(text.contains("critical=7"), "{text}");
        let row = text.lines().find(|l| l.contains(" 42 ")).unwrap_or_else(|| panic!("no row for tid 42:\n{text}"));
        let cells: Vec<&str> = row.trim_matches(|c: char| c == '│' || c.is_whitespace()).split_whitespace().collect();
        assert_eq!(cells, ["41", "42", "spin_worker", "PYTHON", "RUNNING", "3", "9", "X1,P8", "2", "1", "0", "1", "-1", "5"], "{row}");
        let header = text.lines().find(|l| l.contains("PENDING")).unwrap();
        for column in COLUMNS {
            assert!(header.contains(column), "{column} missing from {header}");
        }
    }
}
