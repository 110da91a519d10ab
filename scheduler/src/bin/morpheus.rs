// SPDX-License-Identifier: GPL-2.0-only
//! `morpheus`: operator tools for a running scx_morpheus.
//!
//! `morpheus top` shows, live, what the agent sees: every registered worker, the machine's pressure and
//! the scheduler's counters; `morpheus top --json` prints one snapshot for scripts. Both read the
//! agent's stats socket (`<registration socket>.stats`, scx_stats protocol), the one read-only
//! interface the agent offers: nothing here maps a region or talks to BPF, so it works the same
//! against either backend, and it sees what the agent's user may see (the socket is 0600).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use morpheus_abi as abi;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use scx_morpheus::snapshot::Metrics;
use scx_morpheus::stats_socket::{self, Reader};
use scx_morpheus::{build_id, top};

#[derive(Debug, Parser)]
#[command(name = "morpheus", version = build_id::FULL_VERSION.as_str(), about = "Operator tools for a running scx_morpheus")]
struct Opts {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Live view of the agent: registered workers, pressure, counters (q or Esc quits).
    Top(TopOpts),
    /// One snapshot for scripts: all of it as JSON, or the fields named with --get, one per line.
    Stats(StatsOpts),
}

#[derive(Debug, clap::Args)]
struct StatsOpts {
    /// The agent's registration socket; its stats socket is this path with `.stats` appended.
    #[arg(short = 'S', long, value_name = "PATH", default_value = abi::DEFAULT_SOCKET_PATH)]
    socket: PathBuf,

    /// The stats socket itself (overrides the one derived from --socket).
    #[arg(long, value_name = "PATH")]
    stats_socket: Option<PathBuf>,

    /// A field by JSON pointer, e.g. /gate_verdicts/critical or /backend_counters/kicks (repeatable;
    /// printed one per line, strings without quotes). A pointer that names nothing is an error.
    #[arg(long, value_name = "POINTER")]
    get: Vec<String>,
}

#[derive(Debug, clap::Args)]
struct TopOpts {
    /// The agent's registration socket; its stats socket is this path with `.stats` appended.
    #[arg(short = 'S', long, value_name = "PATH", default_value = abi::DEFAULT_SOCKET_PATH)]
    socket: PathBuf,

    /// The stats socket itself (overrides the one derived from --socket).
    #[arg(long, value_name = "PATH")]
    stats_socket: Option<PathBuf>,

    /// Seconds between two refreshes.
    #[arg(short = 'i', long, default_value_t = 1.0)]
    interval: f64,

    /// Print one snapshot as JSON (the stats socket's schema, `scx_morpheus --help-stats`) and exit.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let opts = Opts::parse();
    let result = match opts.command {
        Command::Top(top) => run_top(top),
        Command::Stats(stats) => run_stats(stats),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("morpheus: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_stats(opts: StatsOpts) -> Result<()> {
    let path = opts.stats_socket.clone().unwrap_or_else(|| stats_socket::path_for(&opts.socket));
    let snapshot = serde_json::to_value(Reader::connect(&path)?.fetch()?)?;
    let mut out = std::io::stdout().lock();
    if opts.get.is_empty() {
        serde_json::to_writer_pretty(&mut out, &snapshot)?;
        writeln!(out)?;
        return Ok(());
    }
    // Every pointer is checked before anything is printed: a script never reads half an answer.
    let mut lines = Vec::new();
    for pointer in &opts.get {
        let value = snapshot.pointer(pointer).with_context(|| {
            format!("--get {pointer}: no such field in the stats (`scx_morpheus --help-stats` lists them; pointers look like /gate_verdicts/critical)")
        })?;
        lines.push(match value {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        });
    }
    for line in lines {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

fn run_top(opts: TopOpts) -> Result<()> {
    let interval = stats_socket::check_interval("--interval", opts.interval)?;
    let path = opts.stats_socket.clone().unwrap_or_else(|| stats_socket::path_for(&opts.socket));
    if opts.json {
        let metrics = Reader::connect(&path)?.fetch()?;
        let mut out = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, &metrics)?;
        writeln!(out)?;
        return Ok(());
    }
    // Fail before taking over the terminal if there is no agent to show.
    let reader = Reader::connect(&path)?;
    let mut terminal = ratatui::try_init().context("cannot set up the terminal")?;
    let result = live(&mut terminal, reader, &path, interval);
    ratatui::restore();
    result
}

/// The refresh loop: a snapshot per interval, keys in between; reconnects if the agent goes away.
fn live(terminal: &mut ratatui::DefaultTerminal, reader: Reader, path: &std::path::Path, interval: Duration) -> Result<()> {
    let source = path.display().to_string();
    let mut reader = Some(reader);
    let mut current: Option<Metrics> = None;
    let mut earlier: Option<Metrics> = None;
    let mut error: Option<String> = None;
    loop {
        if reader.is_none() {
            reader = Reader::connect(path).ok();
        }
        if let Some(r) = reader.as_mut() {
            match r.fetch() {
                Ok(m) => {
                    earlier = current.replace(m);
                    error = None;
                }
                Err(e) => {
                    error = Some(format!("{e:#}"));
                    reader = None;
                }
            }
        } else if error.is_none() {
            error = Some(format!("cannot connect to {source}"));
        }
        let shown = current.clone().unwrap_or_default();
        terminal.draw(|f| top::draw(f, &shown, earlier.as_ref(), &top::Status { source: &source, error: error.as_deref() }))?;
        // Keys until the next refresh.
        let next = Instant::now() + interval;
        loop {
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if event::poll(left)? {
                if let Event::Key(key) = event::read()? {
                    let ctrl_c = key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL);
                    if key.kind == KeyEventKind::Press && (matches!(key.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c) {
                        return Ok(());
                    }
                }
            }
        }
    }
}
