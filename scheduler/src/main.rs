// SPDX-License-Identifier: GPL-2.0-only
//! scx_morpheus: the Morpheus scheduler agent.
//!
//! Publishes the region of Shared Control Blocks, serves worker registrations on a Unix socket, keeps
//! the pressure record current and drives a backend: the sched_ext BPF scheduler (`kernel`), BPF
//! tracing programs beside the kernel's own scheduler (`trace`) for kernels with BPF and BTF but no
//! sched_ext, or the simulation backend (`sim`) for any kernel. Normative protocol: spec/SCB.md.

#[cfg(feature = "kernel")]
use scx_morpheus::{kernel, trace};
use scx_morpheus::{
    backend, build_id, domains, journal, lock, monotonic_ns, openmetrics, pressure, region, registry, replay, rundir, snapshot, stats, stats_socket, subuid, watch,
};

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use morpheus_abi as abi;

use backend::{BackendChoice, BaseOrder, Config};

/// `--mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ModeArg {
    /// Hints only, never escalate (the default).
    Observer,
    /// Escalate workers that pass the escalation gate.
    Enforced,
}

/// `--policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum PolicyArg {
    /// Never escalate, even in enforced mode.
    None,
    /// Preempt the worker's CPU (kernel) / demote the thread (sim).
    Kick,
    /// Cap the worker's cgroup (cgroup v2 cpu.max) for a bounded time.
    Throttle,
    /// Kick first, throttle if still unacknowledged after another grace period.
    Hybrid,
}

// Bounds a human could mean; beyond them a value is a typo (ms for µs, an extra zero block).
const MIN_SLICE_US: u64 = 50;
const MAX_SLICE_US: u64 = 10_000_000;
const MIN_GRACE_US: u64 = 10;
const MAX_GRACE_US: u64 = 10_000_000;
const MAX_SLOTS: u32 = 16_384;

/// Morpheus scheduler agent: asks registered worker threads to yield at safe points, and (enforced
/// mode) escalates those that ignore it.
#[derive(Debug, Parser)]
#[command(name = "scx_morpheus", version = build_id::FULL_VERSION.as_str(), about, long_about = None)]
struct Opts {
    /// CPU time a worker may run before it is asked to yield, in microseconds.
    #[arg(short = 's', long, default_value_t = abi::DEFAULT_SLICE_NS / 1000)]
    slice_us: u64,

    /// Time past the slice a worker has to acknowledge before it may be escalated, in microseconds.
    #[arg(short = 'g', long, default_value_t = abi::DEFAULT_GRACE_NS / 1000)]
    grace_us: u64,

    /// Minimum time between two hints to the same worker, in microseconds.
    #[arg(long, default_value_t = abi::DEFAULT_HINT_MIN_INTERVAL_NS / 1000)]
    hint_interval_us: u64,

    /// Longest an escalation (demotion, cgroup cap) stays in force without an acknowledgement, in ms.
    #[arg(long, default_value_t = abi::DEFAULT_THROTTLE_MAX_NS / 1_000_000)]
    throttle_max_ms: u64,

    /// observer: hints only. enforced: also escalate workers that pass the gate.
    #[arg(short = 'm', long, value_enum, default_value_t = ModeArg::Observer)]
    mode: ModeArg,

    /// How an escalation is carried out (enforced mode only).
    #[arg(short = 'p', long, value_enum, default_value_t = PolicyArg::Kick)]
    policy: PolicyArg,

    /// Which backend publishes the hints; auto: kernel where sched_ext runs, else trace where BPF with
    /// BTF is usable, else sim (the choice and why are logged).
    #[arg(short = 'b', long, value_enum, default_value_t = BackendChoice::Auto)]
    backend: BackendChoice,

    /// Run the scheduler and print its stats every INTERVAL seconds (default 1), read back through
    /// its stats socket as --monitor does.
    #[arg(long, value_name = "INTERVAL", num_args = 0..=1, default_missing_value = "1")]
    stats: Option<f64>,

    /// Do not run a scheduler: print the stats of the one serving --socket every INTERVAL seconds
    /// (default 1), through its stats socket (<--socket>.stats, readable by the agent's user only).
    #[arg(long, value_name = "INTERVAL", num_args = 0..=1, default_missing_value = "1", conflicts_with = "stats")]
    monitor: Option<f64>,

    /// Serve the counters in the OpenMetrics text format at http://ADDR:PORT/metrics (off by default;
    /// use a loopback address such as 127.0.0.1:9090 unless the network may read them; port 0 picks
    /// one, shown in the stats as metrics_address). Worker identities are not exported.
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<std::net::SocketAddr>,

    /// Describe every field of the stats (the scx_stats schema) and exit.
    #[arg(long)]
    help_stats: bool,

    /// Kernel backend: size of the BPF scheduler's debug dump printed if it exits with an error
    /// (0: the kernel's default). The sim backend has no dump.
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    exit_dump_len: u32,

    /// Kernel backend: how its sched_ext ops order every runnable task (the sim backend schedules
    /// nothing itself).
    #[arg(long, value_enum, default_value_t = BaseOrder::Arrival)]
    base_order: BaseOrder,

    /// Kernel backend: a waking task preempts the task running on its CPU if its queue key is ahead
    /// of the runner's (advanced by the CPU the runner has used since it started) by more than this
    /// margin, in µs (default: a slice lag, an eighth of the base slice).
    #[arg(long, value_name = "MICROSECONDS")]
    wake_margin_us: Option<u64>,

    /// Kernel backend, debugging only: the BPF program traces its base policy (queue waits, keys
    /// against vtime_now, the BURST exec term; intf.h, enum morpheus_base_trace) into the stats'
    /// backend_counters as base_trace_*. Off by default; it costs each scheduling event a little.
    #[arg(long)]
    debug_base_trace: bool,

    /// Kernel backend only: where its region map is pinned (always the spec's PINNED_REGION_PATH).
    /// The sim backend has no region file: each user's region is handed over the socket.
    #[arg(short = 'r', long, value_name = "PATH")]
    region: Option<PathBuf>,

    /// Registration socket. Its directory is the agent's runtime directory (also its lock and effect
    /// journal): it must belong to the agent's user and be writable by nobody else. Default: the
    /// spec's DEFAULT_SOCKET_PATH (in /run/morpheus).
    #[arg(short = 'S', long, value_name = "PATH", default_value = abi::DEFAULT_SOCKET_PATH)]
    socket: PathBuf,

    /// Group whose members may register (socket mode 0660). Without it the socket is 0600: only the
    /// agent's own user may register.
    #[arg(long, value_name = "GROUP")]
    socket_group: Option<String>,

    /// Number of SCB slots (workers that can be registered at once).
    #[arg(short = 'w', long, default_value_t = abi::MAX_WORKERS)]
    max_workers: u32,

    /// Slots one process may hold at once (default: --max-workers-per-uid).
    #[arg(long)]
    max_workers_per_process: Option<u32>,

    /// Slots the processes of one user may hold at once (default: half of --max-workers): one user
    /// cannot take every slot. Also the size of each user's region.
    #[arg(long)]
    max_workers_per_uid: Option<u32>,

    /// Trust domains (uids with a region of their own) live at once, every user's together. A domain
    /// lives while a worker of its uid holds a slot; past the cap a new uid's registration is refused
    /// (NO_FREE_SLOT). The kernel backend holds at most its array of maps' size.
    #[arg(long, default_value_t = 256)]
    max_domains: u32,

    /// Trust domains one user may have live at once: its own uid and its subordinate uids (--subuid)
    /// together. Past it, a registration from another of its uids is refused (PROCESS_LIMIT).
    #[arg(long, default_value_t = 16)]
    max_domains_per_user: u32,

    /// The subordinate uid ranges (subuid(5)) whose uids are charged to their owner for slots,
    /// connections, domains and refusals; re-read when it changes. A missing file has no ranges.
    #[arg(long, value_name = "PATH", default_value = "/etc/subuid")]
    subuid: PathBuf,

    /// Simulation backend: how often worker CPU time is sampled, in microseconds.
    #[arg(long, default_value_t = 1000)]
    tick_us: u64,

    /// More logging (-v: registrations and escalations; -vv: every hint).
    #[arg(short = 'v', long, action = clap::ArgAction::Count)]
    verbose: u8,

    /// Do not schedule: answer the escalation-gate cases in CASES_FILE (one JSON line each, from
    /// `conformance/harness/cli.py export-gate-cases`) with the BPF program's gate, loaded but not
    /// attached, one answer line each on stdout (for `cli.py import-answers`). Needs the kernel
    /// feature; `--backend` picks the object: `kernel` (needs sched_ext) or `trace` (BPF with BTF).
    #[arg(long, value_name = "CASES_FILE")]
    replay_gate: Option<PathBuf>,
}

fn validate(opts: &Opts) -> Result<Config> {
    let range = |name: &str, value: u64, min: u64, max: u64, unit: &str| -> Result<()> {
        if value == 0 {
            bail!("--{name} 0: must be at least {min} {unit}");
        }
        if value < min {
            bail!("--{name} {value}: too small; must be at least {min} {unit}");
        }
        if value > max {
            bail!("--{name} {value}: too large; must be at most {max} {unit}");
        }
        Ok(())
    };
    range("slice-us", opts.slice_us, MIN_SLICE_US, MAX_SLICE_US, "µs")?;
    range("grace-us", opts.grace_us, MIN_GRACE_US, MAX_GRACE_US, "µs")?;
    range("hint-interval-us", opts.hint_interval_us, 1, MAX_SLICE_US, "µs")?;
    range("throttle-max-ms", opts.throttle_max_ms, 1, 60_000, "ms")?;
    range("tick-us", opts.tick_us, 100, 1_000_000, "µs")?;
    if let Some(margin) = opts.wake_margin_us {
        range("wake-margin-us", margin, 1, MAX_SLICE_US, "µs")?;
    }
    if opts.max_workers == 0 || opts.max_workers > MAX_SLOTS {
        bail!("--max-workers {}: must be between 1 and {MAX_SLOTS}", opts.max_workers);
    }
    let per_uid = opts.max_workers_per_uid.unwrap_or((opts.max_workers / 2).max(1));
    if per_uid == 0 || per_uid > opts.max_workers {
        bail!("--max-workers-per-uid {per_uid}: must be between 1 and --max-workers ({})", opts.max_workers);
    }
    let per_process = opts.max_workers_per_process.unwrap_or(per_uid);
    if per_process == 0 || per_process > per_uid {
        bail!("--max-workers-per-process {per_process}: must be between 1 and the per-uid limit ({per_uid})");
    }
    if let Some(interval) = opts.stats {
        stats_socket::check_interval("--stats", interval)?;
    }
    if let Some(interval) = opts.monitor {
        stats_socket::check_interval("--monitor", interval)?;
    }
    if opts.region.is_some() && backend::resolve(opts.backend) == BackendChoice::Sim {
        bail!(
            "--region: the sim backend has no region file since ABI 1.3; each user's region is a sealed memfd \
             handed out with the registration reply (spec/SCB.md §1.1). Drop --region"
        );
    }
    if let Some(region) = &opts.region {
        if region.as_os_str().is_empty() {
            bail!("--region: the path is empty");
        }
        if region::path_for_reply(region).is_none() {
            bail!(
                "--region {}: the path must be shorter than {} bytes (it is sent in registration replies)",
                region.display(),
                abi::REGION_PATH_MAX
            );
        }
    }
    registry::check_socket_path(&opts.socket)?;
    Ok(Config {
        slice_ns: opts.slice_us * 1000,
        grace_ns: opts.grace_us * 1000,
        hint_min_interval_ns: opts.hint_interval_us * 1000,
        throttle_max_ns: opts.throttle_max_ms * 1_000_000,
        mode: match opts.mode {
            ModeArg::Observer => abi::SchedulerMode::Observer,
            ModeArg::Enforced => abi::SchedulerMode::Enforced,
        },
        policy: match opts.policy {
            PolicyArg::None => abi::EscalationPolicy::None,
            PolicyArg::Kick => abi::EscalationPolicy::ThreadKick,
            PolicyArg::Throttle => abi::EscalationPolicy::CgroupThrottle,
            PolicyArg::Hybrid => abi::EscalationPolicy::Hybrid,
        },
        max_workers: opts.max_workers,
        max_workers_per_process: per_process,
        max_workers_per_uid: per_uid,
        region_path: opts.region.clone(),
        socket_path: opts.socket.clone(),
        journal: None,
        tick: Duration::from_micros(opts.tick_us),
        verbose: opts.verbose,
        exit_dump_len: opts.exit_dump_len,
        base_order: opts.base_order,
        wake_margin_ns: opts.wake_margin_us.map_or(0, |us| us * 1000),
        debug_base_trace: opts.debug_base_trace,
    })
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn install_signal_handlers() -> Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe).
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        // SAFETY: valid sigaction struct.
        if unsafe { libc::sigaction(sig, &action, std::ptr::null_mut()) } != 0 {
            return Err(std::io::Error::last_os_error()).context("sigaction");
        }
    }
    // A client that hangs up mid-reply must not kill the agent.
    // SAFETY: ignoring SIGPIPE is always allowed.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    Ok(())
}

fn init_logging(verbose: u8) {
    struct Stderr(log::LevelFilter);
    impl log::Log for Stderr {
        fn enabled(&self, metadata: &log::Metadata) -> bool {
            metadata.level() <= self.0
        }
        fn log(&self, record: &log::Record) {
            if self.enabled(record.metadata()) {
                eprintln!("scx_morpheus: {}: {}", record.level().as_str().to_lowercase(), record.args());
            }
        }
        fn flush(&self) {}
    }
    let level = match verbose {
        0 => log::LevelFilter::Info,
        1 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    };
    let _ = log::set_boxed_logger(Box::new(Stderr(level)));
    log::set_max_level(level);
}

/// `--replay-gate`: the conformance cases of the escalation gate, judged by the BPF program.
/// `--backend` picks the object: the sched_ext program (`kernel`), the tracing backend's (`trace`), and
/// `auto` resolves as for scheduling; the sim backend has no BPF program.
fn replay_gate(path: &std::path::Path, choice: BackendChoice, verbose: u8) -> Result<()> {
    init_logging(verbose);
    let cases = replay::read_cases(path)?;
    #[cfg(feature = "kernel")]
    {
        let (choice, why) = backend::resolve_why(choice);
        if !why.is_empty() {
            log::info!("--backend auto: {why}");
        }
        let refused = match choice {
            BackendChoice::Kernel => kernel::replay_gate(&cases, &mut std::io::stdout().lock())?,
            BackendChoice::Trace => trace::replay_gate(&cases, &mut std::io::stdout().lock())?,
            _ => bail!("--replay-gate --backend sim: the sim backend has no BPF program ({} case(s) not answered)", cases.len()),
        };
        log::info!("--replay-gate: {} case(s) answered by the BPF gate, {refused} refused", cases.len() - refused);
        if refused > 0 {
            bail!("{refused} case(s) have a region layout the BPF region map cannot hold (see their answer lines)");
        }
        Ok(())
    }
    #[cfg(not(feature = "kernel"))]
    {
        let _ = choice;
        bail!(
            "--replay-gate: this scx_morpheus was built without the `kernel` feature, so it has no BPF program \
             ({} case(s) not answered)",
            cases.len()
        )
    }
}

/// Raises the soft descriptor limit to the hard one: every live trust domain, connection and worker
/// holds descriptors, and systemd's default soft limit (1024) was exhausted by 1014 domains (A03).
/// The unit also sets LimitNOFILE=; a failure here is logged, not fatal.
fn raise_descriptor_limit() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        log::warn!("cannot read RLIMIT_NOFILE: {}", std::io::Error::last_os_error());
        return;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
        // SAFETY: valid pointer; raising the soft limit up to the hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            log::warn!("cannot raise RLIMIT_NOFILE from {} to {}: {}", limit.rlim_cur, limit.rlim_max, std::io::Error::last_os_error());
            return;
        }
    }
    log::debug!("descriptor limit (RLIMIT_NOFILE): {}", limit.rlim_max);
}

fn run(opts: Opts) -> Result<()> {
    if let Some(path) = &opts.replay_gate {
        return replay_gate(path, opts.backend, opts.verbose);
    }
    if opts.help_stats {
        let mut data = scx_stats::StatsServerData::<(), ()>::new();
        for meta in snapshot::server_meta() {
            data = data.add_meta(meta);
        }
        return data.describe_meta(&mut std::io::stdout(), None);
    }
    let config = validate(&opts)?;
    if opts.max_domains == 0 || opts.max_domains_per_user == 0 || opts.max_domains_per_user > opts.max_domains {
        bail!(
            "--max-domains {} / --max-domains-per-user {}: both must be at least 1, and the per-user cap at most --max-domains",
            opts.max_domains,
            opts.max_domains_per_user
        );
    }
    init_logging(config.verbose);
    raise_descriptor_limit();
    install_signal_handlers()?;
    let stats_path = stats_socket::path_for(&config.socket_path);
    if let Some(interval) = opts.monitor {
        // A client only: the running agent's stats until Ctrl-C.
        return stats_socket::monitor(&stats_path, Duration::from_secs_f64(interval), || STOP.load(Ordering::SeqCst));
    }
    let reporter = match opts.stats {
        Some(interval) => Some({
            let path = stats_path.clone();
            std::thread::Builder::new()
                .name("stats".into())
                .spawn(move || stats_socket::monitor(&path, Duration::from_secs_f64(interval), || STOP.load(Ordering::SeqCst)))
                .context("cannot start the stats reporter thread")?
        }),
        None => None,
    };
    let metrics_address = match opts.metrics {
        Some(addr) => {
            let listener = openmetrics::bind(addr)?;
            let bound = listener.local_addr().context("--metrics: the bound address")?;
            let path = stats_path.clone();
            std::thread::Builder::new()
                .name("metrics".into())
                .spawn(move || openmetrics::serve(listener, path))
                .context("cannot start the metrics thread")?;
            log::info!("OpenMetrics on http://{bound}/metrics");
            Some(bound)
        }
        None => None,
    };
    // The scx convention: the BPF side may ask to be restarted (UserExitInfo::should_restart); the
    // agent then sets everything up again, with a new generation its runtimes re-register under.
    let result = loop {
        match run_instance(&opts, config.clone(), metrics_address) {
            Ok(Exit::Restart) if !STOP.load(Ordering::SeqCst) => {
                log::info!("the BPF scheduler asked to be restarted; restarting");
                if !backend::wait_sched_ext_disabled(Duration::from_secs(10)) {
                    break Err(anyhow::anyhow!("restart: sched_ext is still not disabled 10 s after the BPF scheduler exited"));
                }
            }
            Ok(_) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    STOP.store(true, Ordering::SeqCst);
    if let Some(reporter) = reporter {
        match reporter.join() {
            Ok(Err(e)) => log::warn!("stats reporter: {e:#}"),
            Err(_) => log::warn!("the stats reporter thread panicked"),
            Ok(Ok(())) => {}
        }
    }
    result
}

/// How one instance (one generation) of the agent ended.
enum Exit {
    /// Stopped by a signal.
    Done,
    /// The backend asked to be set up again (the BPF scheduler exited with the restart code).
    Restart,
}

fn run_instance(opts: &Opts, mut config: Config, metrics_address: Option<std::net::SocketAddr>) -> Result<Exit> {
    let group = opts.socket_group.as_deref().map(rundir::group_id).transpose()?;
    let (choice, why) = backend::resolve_why(opts.backend);
    if opts.backend == BackendChoice::Auto {
        log::info!("--backend auto: {why}");
    }
    if choice == BackendChoice::Sim && config.exit_dump_len != 0 {
        log::info!("--exit-dump-len: the sim backend has no BPF program, nothing to dump");
    }
    // The runtime directory (the socket's) holds the socket, the instance lock and the effect journal;
    // it is checked before anything in it is opened (S1, S10).
    let socket_name = config.socket_path.file_name().and_then(|n| n.to_str()).context("--socket: the file name is not UTF-8")?.to_owned();
    let dir_path = match config.socket_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => dir.to_owned(),
        None => PathBuf::from("."),
    };
    let dir = rundir::RuntimeDir::open(&dir_path)?;
    // One instance per runtime directory: flock, so a killed instance leaves nothing that blocks the
    // next start (the kernel drops the lock with the process).
    let _instance_lock = lock::InstanceLock::acquire(&dir, &format!("{socket_name}.lock"), "instance")?;
    let generation = region::new_generation(0);
    // Undo what a killed predecessor left in force, before anything new is applied (S7).
    let journal = Arc::new(journal::Journal::recover(&dir, &format!("{socket_name}.journal"), generation)?);
    config.journal = Some(Arc::clone(&journal));

    let workers = domains::Workers::new(config.max_workers);
    let mut backend = backend::open(choice, &config, &workers)?;
    let params = region::RegionParams {
        scb_count: config.max_workers_per_uid,
        mode: config.mode,
        policy: config.policy,
        slice_ns: config.slice_ns,
        grace_ns: config.grace_ns,
        hint_min_interval_ns: config.hint_min_interval_ns,
        backend: backend.kind(),
        optional_features: if pressure::PressureFeed::psi_available() { abi::feature::PRESSURE_RECORD } else { 0 },
    };
    // One region per uid (SCB.md §10): a sealed memfd (sim) or a BPF map the program reaches through
    // its array of maps (kernel).
    let maker = backend.region_maker();
    let per_uid = if maker.is_some() { "one BPF region map per uid" } else { "one sealed memfd region per uid" };
    let domain_limits = domains::DomainLimits { total: opts.max_domains, per_user: opts.max_domains_per_user };
    let domains = Arc::new(domains::Domains::new(params.clone(), generation, maker, domain_limits));
    let owners = Arc::new(subuid::Owners::load(&opts.subuid)?);
    // Fail at start-up, not at a registration, if a region cannot be allocated (S9): the agent's own
    // uid's region is made now (kernel: it is the one pinned at PINNED_REGION_PATH); for the sim a
    // probe is enough (its uid may never register).
    if backend.region_maker().is_some() {
        // SAFETY: no preconditions.
        domains.keep(unsafe { libc::geteuid() }).map_err(|e| anyhow::anyhow!("cannot allocate the agent's own region: {e}"))?;
    } else {
        region::Region::create_memfd("morpheus-region-probe", params.scb_count)
            .context("cannot allocate a region of --max-workers-per-uid slots")?;
    }
    log::info!(
        "{} backend, {per_uid} (generation {:#x}), {} slots, {} per uid, {} per process, mode {}, policy {}, slice {} µs, grace {} µs",
        backend.kind(),
        generation,
        config.max_workers,
        config.max_workers_per_uid,
        config.max_workers_per_process,
        config.mode,
        config.policy,
        config.slice_ns / 1000,
        config.grace_ns / 1000,
    );

    let limits = registry::Limits {
        per_process: config.max_workers_per_process,
        per_uid: config.max_workers_per_uid,
        slice_ns: config.slice_ns,
    };
    let shared = registry::Shared::new(
        Arc::clone(&domains),
        Arc::clone(&workers),
        backend.slot_observer(),
        Some(Arc::clone(&journal)),
        limits,
    )
    .with_owners(Arc::clone(&owners));
    log::info!(
        "trust domains: at most {} live, {} per user; {} subordinate uid range(s) from {} charged to their owners",
        domains.limits().total,
        domains.limits().per_user,
        owners.ranges(),
        opts.subuid.display()
    );
    // The stats socket: before the registry thread starts (its bind runs under a strict umask).
    let publisher = stats_socket::StatsPublisher::launch(&dir, &socket_name)?;
    log::info!("stats on {} (scx_morpheus --monitor, morpheus top)", publisher.path().display());
    let identity = snapshot::Identity {
        version: build_id::FULL_VERSION.clone(),
        backend: backend.kind(),
        mode: config.mode,
        policy: config.policy,
        slice_ns: config.slice_ns,
        grace_ns: config.grace_ns,
        generation,
        metrics_address,
    };

    let registry = registry::Registry::start(&dir, &socket_name, group, shared)?;
    log::info!(
        "listening for registrations on {} ({})",
        config.socket_path.display(),
        match &opts.socket_group {
            Some(g) => format!("group {g} may register"),
            None => "only the agent's user may register; see --socket-group".into(),
        }
    );

    let result = serve(backend.as_mut(), &domains, &workers, &publisher, &identity);
    registry.stop();
    let shutdown = backend.shutdown();
    for region in domains.regions() {
        region.retire();
    }
    dir.remove_socket(&socket_name);
    drop(publisher);
    let c = backend.counters();
    log::info!(
        "totals: hints {} (dropped {}), escalations {}, actions [{}], effect errors {}",
        c.hints_emitted,
        c.hints_dropped,
        c.escalations_by_policy.iter().sum::<u64>(),
        abi::EscalationAction::ALL.iter().map(|a| format!("{}={}", a.name(), c.actions[a.raw() as usize])).collect::<Vec<_>>().join(" "),
        c.effect_errors
    );
    drop(backend);
    let exit = result?;
    shutdown?;
    Ok(exit)
}

/// Escalation events kept for the stats (the most recent ones).
const RECENT_EVENTS: usize = 256;

/// The main loop: pressure, backend ticks, the worker watch and the stats requests, until a signal
/// or a backend error (or the backend's request to restart).
fn serve(
    backend: &mut dyn backend::Backend,
    domains: &domains::Domains,
    workers: &domains::Workers,
    publisher: &stats_socket::StatsPublisher,
    identity: &snapshot::Identity,
) -> Result<Exit> {
    let feed = pressure::PressureFeed::new();
    let tick = backend.tick_interval();
    let started = Instant::now();
    let mut watch = watch::WorkerWatch::default();
    let mut recent_events: VecDeque<abi::EscalationEvent> = VecDeque::with_capacity(RECENT_EVENTS);
    let mut events_total = 0u64;
    let mut next_tick = Instant::now();
    let mut next_pressure = Instant::now();
    let mut sample = feed.sample(monotonic_ns());
    while !STOP.load(Ordering::SeqCst) {
        let now = Instant::now();
        if now >= next_pressure {
            sample = feed.sample(monotonic_ns());
            for region in domains.regions() {
                region.publish_pressure(&sample);
            }
            next_pressure = now + pressure::PUBLISH_INTERVAL;
        }
        if let Err(e) = backend.tick(monotonic_ns(), sample.level) {
            if e.is::<backend::RestartRequested>() {
                return Ok(Exit::Restart);
            }
            return Err(e).context("backend tick failed");
        }
        for event in backend.take_events() {
            log::debug!("{}", stats::format_event(&event));
            if recent_events.len() == RECENT_EVENTS {
                recent_events.pop_front();
            }
            recent_events.push_back(event);
            events_total += 1;
        }
        watch.sample(workers, monotonic_ns());
        publisher.serve_pending(|| {
            let reactions = backend.reactions();
            let view = watch.view(workers);
            snapshot::Metrics::build(snapshot::Sources {
                identity,
                uptime_ms: started.elapsed().as_millis() as u64,
                counters: &backend.counters(),
                reactions: &[
                    ("hint", reactions.hint.percentiles()),
                    ("escalation", reactions.escalation.percentiles()),
                    ("acknowledgement", watch.acknowledgement.percentiles()),
                ],
                backend_counters: backend.backend_counters(),
                pressure: &sample,
                events_total,
                recent_events: &recent_events,
                workers: &view,
            })
        });
        // With no worker registered there is nothing to sample: the backend may tick less often.
        let tick = if workers.assigned().is_empty() { backend.idle_tick_interval() } else { tick };
        let now = Instant::now();
        if next_tick <= now {
            // Fell behind (a slow tick, or the machine was busy): don't try to catch up in a burst.
            next_tick = (next_tick + tick).max(now);
        }
        if next_tick > now {
            // Returns early when the backend has work (kernel: an escalation record); the tick after
            // that keeps its time.
            backend.wait(next_tick - now).context("backend wait failed")?;
        }
    }
    log::info!("stopping");
    Ok(Exit::Done)
}

fn main() -> ExitCode {
    let opts = Opts::parse();
    match run(opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scx_morpheus: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
