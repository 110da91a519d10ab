// SPDX-License-Identifier: GPL-2.0-only
//! The simulation backend: Morpheus on a kernel without sched_ext.
//!
//! Every tick it reads each registered worker's CPU time (schedstat, the kernel's sum_exec_runtime, read
//! through the thread's /proc directory pinned at registration: never re-opened by number), keeps the CPU time since the worker's last yield point, and runs the
//! same decision functions the BPF program runs (src/policy/morpheus_policy.h, through FFI): hints
//! bump preempt_seq; escalations use effects a normal kernel offers — demoting the thread to
//! SCHED_IDLE (KICK: there is no cross-CPU kick from userspace) or capping its cgroup v2 cpu.max
//! (THROTTLE; demotion when the cgroup is not writable). When to act, to act again and to lift is the
//! shared escalation state machine (morpheus_escalation_decide), the one the BPF program runs.
//!
//! Critical sections (spec/SCB.md §5.6): these effects act asynchronously, so right after applying
//! one the backend loads in_critical again and undoes it at once if a section began meanwhile
//! (`spared_in_critical`); a section entered while an effect is in force lifts it at the next tick
//! (`held_in_critical`: the window is one tick).
//!
//! Identity (spec/SCB.md §10): a worker is the thread the registry pinned ([`Thread`]). Its files are
//! opened through that descriptor; a demotion and its lift, which must name the tid, are applied only
//! while the descriptor says the thread is alive ([`Thread::act`]), and a worker whose thread is gone
//! is dropped without restoring anything (its id may belong to another thread by then). A cgroup is
//! capped only as found through the descriptor.
//!
//! Precision: sum_exec_runtime of a thread that is on a CPU is brought up to date at the scheduler
//! tick (CONFIG_HZ), so overruns are seen up to one kernel tick late.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use morpheus_abi as abi;
use morpheus_abi::{EscalationAction, WorkerState};
use morpheus_policy_ffi::{self as policy, EscalationStep, GateInput, HintDecision, YieldPoint};

use crate::backend::{Backend, Config, SlotObserver};
use crate::cgroup::{self, Caps};
use crate::domains::{Assigned, Workers};
use crate::identity::Thread;
use crate::region::ScbRef;
use crate::stats::{Counters, Reactions};

/// A demotion in force: what to put back.
#[derive(Debug)]
pub(crate) struct Demotion {
    policy: libc::c_int,
    priority: libc::c_int,
    nice: libc::c_int,
}

/// An escalation effect in force (the simulation and tracing backends carry them out in the agent).
#[derive(Debug)]
pub(crate) enum Effect {
    Demoted(Demotion),
    Throttled(PathBuf),
}

struct Worker {
    /// Which region the slot's SCB is in (the domain's mapping address): identity with tid, pid, slot.
    region_id: usize,
    /// The registered thread (the slot's identity); tid and pid are its numbers, for logs and events.
    thread: Arc<Thread>,
    tid: u32,
    pid: u32,
    local_slot: u32,
    schedstat: File,
    status: File,
    run_ns: u64,
    voluntary_switches: u64,
    since_yield_ns: u64,
    /// `last_ack_seq` at the last look (the yield-point rule compares with it).
    last_ack: u64,
    /// Gate verdicts counted for this slot's requests (the policy header's counting rule).
    verdicts: policy::VerdictTally,
    /// A hint went out since the worker's last yield point (only the first one measures a reaction).
    hinted_since_yield: bool,
    /// The escalation episode (shared state machine) and the effects it has in force.
    episode: Episode,
}

#[derive(Default)]
struct Episode {
    state: policy::Escalation,
    effects: Vec<Effect>,
}

pub struct SimBackend {
    /// The agent's own slot table: which thread each slot means (S3: never the SCB's tid/pid).
    table: Arc<Workers>,
    config: Config,
    workers: Vec<Option<Worker>>,
    counters: Counters,
    effects: Effects,
    released: Arc<Released>,
    reactions: Reactions,
}

/// The escalation effects any kernel offers, carried out by the agent: SCHED_IDLE demotion (KICK, and
/// THROTTLE's fallback) and the cgroup v2 cpu.max cap (THROTTLE), each journalled before it is applied
/// (S7) and undone exactly; one record per action taken or undone. The simulation backend decides
/// when; the tracing backend (src/trace.rs) applies what its BPF side decided.
pub(crate) struct Effects {
    config: Config,
    caps: Caps,
    cgroup2_root: Option<PathBuf>,
    warned_no_cgroup: bool,
    /// escalation_event records since the last `take_events` (one per action taken or undone).
    events: Vec<abi::EscalationEvent>,
}

/// Why an escalation step is taken: the request it answers and how far past slice + grace.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cause {
    pub(crate) preempt_seq: u64,
    pub(crate) overrun_ns: u64,
}

/// Bound on buffered events between two drains (the agent drains every tick); beyond it the oldest
/// are dropped rather than growing without limit.
const MAX_BUFFERED_EVENTS: usize = 4096;

/// Slots the registry released since the last tick, with the thread that held each (lifted at the
/// next tick, or at once by the tick noticing the slot changed owner).
#[derive(Default)]
pub(crate) struct Released(Mutex<Vec<(u32, Arc<Thread>)>>);

impl Released {
    /// The slots released since the last call, with the thread that held each.
    pub(crate) fn take(&self) -> Vec<(u32, Arc<Thread>)> {
        self.0.lock().map(|mut l| std::mem::take(&mut *l)).unwrap_or_default()
    }
}

impl SlotObserver for Released {
    fn assigned(&self, _slot: u32, _worker: &Assigned) -> Result<()> {
        Ok(())
    }
    fn released(&self, slot: u32, worker: &Assigned) {
        if let Ok(mut list) = self.0.lock() {
            list.push((slot, Arc::clone(&worker.thread)));
        }
    }
}

fn read_u64_fields(file: &File, buf: &mut [u8]) -> Option<usize> {
    file.read_at(buf, 0).ok().filter(|n| *n > 0)
}

/// First field of /proc/.../schedstat: nanoseconds on CPU.
fn read_runtime(file: &File) -> Option<u64> {
    let mut buf = [0u8; 96];
    let n = read_u64_fields(file, &mut buf)?;
    std::str::from_utf8(&buf[..n]).ok()?.split_whitespace().next()?.parse().ok()
}

/// `voluntary_ctxt_switches` of /proc/.../status: it grows each time the thread blocks or sleeps
/// (sched_yield and preemption count as involuntary), i.e. at each voluntary yield point.
fn read_voluntary_switches(file: &File) -> Option<u64> {
    let mut buf = [0u8; 4096];
    let n = read_u64_fields(file, &mut buf)?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    text.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:")).and_then(|v| v.trim().parse().ok())
}

impl Effects {
    pub(crate) fn new(config: &Config) -> Effects {
        Effects {
            config: config.clone(),
            caps: Caps::with_journal(config.journal.clone()),
            cgroup2_root: cgroup::cgroup2_root(),
            warned_no_cgroup: false,
            events: Vec::new(),
        }
    }

    /// The escalation_event records since the last call.
    pub(crate) fn take_events(&mut self) -> Vec<abi::EscalationEvent> {
        std::mem::take(&mut self.events)
    }

    /// Demotes the registered thread to SCHED_IDLE, returning what to put back. The values are read and
    /// the policy set by tid only between liveness checks of its descriptor (None: it is gone).
    pub(crate) fn demote(&mut self, thread: &Thread) -> Option<Demotion> {
        let tid = thread.tid;
        // SAFETY: plain syscalls on a thread id; failures are reported through errno.
        let read = thread.act(|t| unsafe {
            let policy = libc::sched_getscheduler(t);
            let mut param = libc::sched_param { sched_priority: 0 };
            libc::sched_getparam(t, &mut param);
            *libc::__errno_location() = 0;
            let nice = libc::getpriority(libc::PRIO_PROCESS, t as libc::id_t);
            (policy >= 0).then_some((policy, param.sched_priority, nice))
        });
        let Some((Some((policy, priority, nice)), true)) = read else { return None };
        // Recorded durably first, so the next instance can undo it if this one is killed (S7).
        if let Some(journal) = &self.config.journal {
            if let Err(e) = journal.demoting(tid, policy, priority, nice) {
                log::warn!("not demoting tid {tid}: {e:#}");
                return None;
            }
        }
        let idle = libc::sched_param { sched_priority: 0 };
        // SAFETY: as above.
        let set = thread.act(|t| unsafe { libc::sched_setscheduler(t, libc::SCHED_IDLE, &idle) == 0 });
        match set {
            Some((true, alive)) => {
                if !alive {
                    log::warn!("tid {tid} exited while it was being demoted (its id was used for a few system calls after the last check)");
                }
                Some(Demotion { policy, priority, nice })
            }
            _ => {
                if let Some(journal) = &self.config.journal {
                    journal.restored(tid);
                }
                None
            }
        }
    }

    /// Puts back what a demotion took, if the registered thread is still alive. None: it is gone, and
    /// nothing is applied (its id may be another thread's by now); Some(false): the call failed.
    pub(crate) fn restore(thread: &Thread, demotion: &Demotion) -> Option<bool> {
        let param = libc::sched_param { sched_priority: demotion.priority };
        // SAFETY: as in demote.
        let (ok, alive) = thread.act(|t| unsafe {
            let ok = libc::sched_setscheduler(t, demotion.policy, &param) == 0;
            libc::setpriority(libc::PRIO_PROCESS, t as libc::id_t, demotion.nice);
            ok
        })?;
        if !alive {
            // It exited during the calls: gone, like a thread found gone before them.
            log::debug!("tid {} exited while its demotion was being lifted", thread.tid);
            return None;
        }
        Some(ok)
    }

    /// The worker's cgroup (v2) directory, found through its descriptor, if its cpu.max is writable.
    fn cappable_cgroup_of(&self, thread: &Thread) -> Option<PathBuf> {
        let dir = cgroup::cgroup_dir_of(self.cgroup2_root.as_ref()?, thread).ok()?;
        let writable = std::fs::OpenOptions::new().write(true).open(dir.join("cpu.max")).is_ok();
        writable.then_some(dir)
    }

    /// Records one escalation action as an escalation_event (spec/SCB.md §8).
    pub(crate) fn record(&mut self, slot: u32, tid: u32, pid: u32, action: EscalationAction, cause: Cause) {
        if self.events.len() >= MAX_BUFFERED_EVENTS {
            self.events.remove(0);
        }
        self.events.push(abi::EscalationEvent {
            timestamp_ns: crate::monotonic_ns(),
            preempt_seq: cause.preempt_seq,
            slot,
            tid,
            pid,
            policy: self.config.policy.raw(),
            action: action.raw(),
            overrun_ns: cause.overrun_ns,
            ..Default::default()
        });
    }

    /// Applies one escalation step; returns the effects it took. `demoted` says the thread is already
    /// demoted by an earlier step, so a demotion fallback would change nothing and is not taken.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn apply(
        &mut self,
        counters: &mut Counters,
        slot: u32,
        action: u32,
        thread: &Thread,
        pid: u32,
        cause: Cause,
        demoted: bool,
    ) -> Vec<Effect> {
        let tid = thread.tid;
        let mut effects = Vec::new();
        let want_throttle = action == EscalationAction::Throttle.raw();
        if want_throttle {
            if let Some(cgroup) = self.cappable_cgroup_of(thread) {
                match self.caps.cap(&cgroup) {
                    Ok(()) => {
                        counters.actions[EscalationAction::Throttle.raw() as usize] += 1;
                        log::debug!("slot {slot}: throttled {} (tid {tid})", cgroup.display());
                        self.record(slot, tid, pid, EscalationAction::Throttle, cause);
                        effects.push(Effect::Throttled(cgroup));
                        return effects;
                    }
                    Err(e) => {
                        log::debug!("slot {slot}: {e:#}");
                        counters.effect_errors += 1;
                    }
                }
            }
            counters.fallbacks += 1;
            if !self.warned_no_cgroup {
                log::warn!(
                    "CGROUP_THROTTLE: tid {tid} (pid {pid}) is not in a writable cgroup v2 with cpu.max; demoting the thread with SCHED_IDLE instead"
                );
                self.warned_no_cgroup = true;
            }
        }
        if demoted {
            return effects;
        }
        match self.demote(thread) {
            Some(demotion) => {
                counters.actions[EscalationAction::Demote.raw() as usize] += 1;
                log::debug!("slot {slot}: demoted tid {tid} to SCHED_IDLE");
                self.record(slot, tid, pid, EscalationAction::Demote, cause);
                effects.push(Effect::Demoted(demotion));
            }
            None => {
                counters.effect_errors += 1;
                log::debug!("slot {slot}: cannot demote tid {tid}: {}", std::io::Error::last_os_error());
            }
        }
        effects
    }

    /// Undoes every effect of an episode (opened for request `preempt_seq`) and marks it closed in the
    /// SCB the agent's `table` names for the slot, if that slot still belongs to `thread`. A demotion of
    /// a thread that is gone is dropped, not restored by its id.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn lift(
        &mut self,
        counters: &mut Counters,
        table: &Workers,
        slot: u32,
        thread: &Arc<Thread>,
        pid: u32,
        effects: Vec<Effect>,
        preempt_seq: u64,
        why: &str,
    ) {
        let tid = thread.tid;
        // Undoing is not about an overrun: overrun_ns 0; preempt_seq names the request escalated for.
        let cause = Cause { preempt_seq, overrun_ns: 0 };
        for effect in effects {
            match effect {
                Effect::Demoted(demotion) => {
                    let restored = Self::restore(thread, &demotion);
                    if let Some(journal) = &self.config.journal {
                        journal.restored(tid);
                    }
                    match restored {
                        Some(true) => {
                            counters.actions[EscalationAction::Restore.raw() as usize] += 1;
                            self.record(slot, tid, pid, EscalationAction::Restore, cause);
                        }
                        Some(false) => counters.effect_errors += 1,
                        None => log::debug!("slot {slot}: tid {tid} is gone; its demotion is dropped, not restored"),
                    }
                }
                Effect::Throttled(cgroup) => match self.caps.release(&cgroup) {
                    Ok(()) => {
                        counters.actions[EscalationAction::Unthrottle.raw() as usize] += 1;
                        self.record(slot, tid, pid, EscalationAction::Unthrottle, cause);
                    }
                    Err(e) => {
                        log::warn!("slot {slot}: {e:#}");
                        counters.effect_errors += 1;
                    }
                },
            }
        }
        if let Some(assigned) = table.get(slot).filter(|a| Arc::ptr_eq(&a.thread, thread)) {
            assigned.domain.region.scb(assigned.local).escalated().store(0, Ordering::Relaxed);
        }
        log::debug!("slot {slot}: escalation of tid {tid} lifted ({why})");
    }

}

impl SimBackend {
    /// The sim backend publishes no region itself: the agent gives each uid its own (src/domains.rs)
    /// and records who holds which slot in `table`, which is what this backend watches.
    pub fn open(config: &Config, table: Arc<Workers>) -> Result<SimBackend> {
        Ok(SimBackend {
            table,
            config: config.clone(),
            workers: (0..config.max_workers).map(|_| None).collect(),
            counters: Counters::default(),
            effects: Effects::new(config),
            released: Arc::new(Released::default()),
            reactions: Reactions::default(),
        })
    }

    /// Starts measuring `assigned`'s thread, through its pinned directory (None: it is gone).
    fn track(&self, assigned: &Assigned) -> Option<Worker> {
        let thread = Arc::clone(&assigned.thread);
        let schedstat = thread.open("schedstat").ok()?;
        let status = thread.open("status").ok()?;
        let run_ns = read_runtime(&schedstat)?;
        let voluntary_switches = read_voluntary_switches(&status)?;
        Some(Worker {
            region_id: 0,
            thread,
            tid: assigned.tid,
            pid: assigned.pid,
            local_slot: assigned.local,
            schedstat,
            status,
            run_ns,
            voluntary_switches,
            since_yield_ns: 0,
            last_ack: 0,
            verdicts: policy::VerdictTally::default(),
            hinted_since_yield: false,
            episode: Episode::default(),
        })
    }

    /// Undoes every effect of an episode and marks it closed in the SCB.
    fn lift(&mut self, slot: u32, thread: &Arc<Thread>, pid: u32, episode: Episode, why: &str) {
        let preempt_seq = episode.state.preempt_seq;
        self.effects.lift(&mut self.counters, &self.table, slot, thread, pid, episode.effects, preempt_seq, why);
    }

    fn drop_worker(&mut self, slot: u32, why: &str) {
        if let Some(mut worker) = self.workers[slot as usize].take() {
            let episode = std::mem::take(&mut worker.episode);
            if episode.state.open != 0 || !episode.effects.is_empty() {
                self.lift(slot, &worker.thread, worker.pid, episode, why);
            }
        }
    }

    /// The gate's inputs: the SCB's fields as the shared loader reads them, the configuration from the
    /// agent's own copy (S4: never the header's, which the domain's runtimes can write).
    fn gate_input(&self, scb: ScbRef<'_>, since_yield: u64) -> GateInput {
        let config = policy::GateConfig {
            scheduler_mode: self.config.mode.raw(),
            escalation_policy: self.config.policy.raw(),
            slice_ns: self.config.slice_ns,
            grace_ns: self.config.grace_ns,
        };
        // SAFETY: an SCB of a live mapping the caller's domain holds.
        unsafe { policy::gate_load(&config, scb.as_ptr(), since_yield) }
    }

    /// Runs the shared escalation state machine for one worker and carries out its step.
    fn escalate(&mut self, slot: u32, since_yield: u64, now_ns: u64) {
        let Some(assigned) = self.table.get(slot) else { return };
        let region = Arc::clone(&assigned.domain.region);
        let scb = region.scb(assigned.local);
        let input = self.gate_input(scb, since_yield);
        let verdict = policy::gate(&input);
        let worker = self.workers[slot as usize].as_mut().expect("tracked");
        // The policy header's counting rule: once per (request, verdict) past the slice. A sim tick may
        // always act (its effects need no CPU).
        if policy::verdict_count(&mut worker.verdicts, true, since_yield, input.slice_ns, input.preempt_seq, verdict) {
            self.counters.gate[verdict as usize] += 1;
        }
        let (tid, pid, thread) = (worker.tid, worker.pid, Arc::clone(&worker.thread));
        if worker.episode.state.open != 0 && input.in_critical != 0 && !worker.episode.effects.is_empty() {
            // An effect was in force over a section entered after it took hold: lifted now, one tick late.
            self.counters.held_in_critical += 1;
        }
        let step = policy::escalation_decide(&worker.episode.state, &input, verdict, now_ns, self.config.throttle_max_ns);
        if let Some(why) = step.lift_reason() {
            self.close(slot, step, &input, now_ns, why);
            return;
        }
        let Some(action) = step.action() else { return };
        // The sim backend's kick is a demotion, in force until the lift: a repeat changes nothing.
        let demoted = worker.episode.effects.iter().any(|e| matches!(e, Effect::Demoted(_)));
        if !step.takes_effect(worker.episode.state.open != 0 && demoted) {
            return;
        }
        let overrun_ns = (since_yield - input.slice_ns).saturating_sub(input.grace_ns);
        if worker.episode.state.open == 0 {
            self.reactions.escalation.push(overrun_ns);
        }
        if let Some(n) = self.counters.escalations_by_policy.get_mut(input.escalation_policy as usize) {
            *n += 1;
        }
        let cause = Cause { preempt_seq: input.preempt_seq, overrun_ns };
        let effects = self.effects.apply(&mut self.counters, slot, action, &thread, pid, cause, demoted);
        let worker = self.workers[slot as usize].as_mut().expect("tracked");
        worker.episode.effects.extend(effects);
        policy::escalation_commit(&mut worker.episode.state, step, &input, now_ns);
        scb.escalations().fetch_add(1, Ordering::Relaxed);
        scb.escalated().store(1, Ordering::Relaxed);
        log::debug!(
            "slot {slot}: escalated tid {tid} (pid {pid}), step {step:?}, {} µs past slice + grace, policy {}",
            overrun_ns / 1000,
            abi::EscalationPolicy::try_from(input.escalation_policy).map(|p| p.name()).unwrap_or("?")
        );
        // Where the effect takes hold: a section that began after the decision is not held.
        // SAFETY: as above.
        if !unsafe { policy::effect_may_hold(scb.as_ptr()) } {
            self.counters.spared_in_critical += 1;
            let input = self.gate_input(scb, since_yield);
            let step = policy::escalation_decide(
                &self.workers[slot as usize].as_ref().expect("tracked").episode.state,
                &input,
                policy::gate(&input),
                now_ns,
                self.config.throttle_max_ns,
            );
            if let Some(why) = step.lift_reason() {
                self.close(slot, step, &input, now_ns, why);
            }
        }
    }

    /// Lifts the worker's episode for a lift step of the state machine.
    fn close(&mut self, slot: u32, step: EscalationStep, input: &GateInput, now_ns: u64, why: &str) {
        let worker = self.workers[slot as usize].as_mut().expect("tracked");
        let (thread, pid) = (Arc::clone(&worker.thread), worker.pid);
        let mut episode = std::mem::take(&mut worker.episode);
        policy::escalation_commit(&mut episode.state, step, input, now_ns);
        self.lift(slot, &thread, pid, episode, why);
    }

    fn tick_slot(&mut self, slot: u32, now_ns: u64) {
        // Who the slot belongs to comes from the agent's table (checked at registration), never from
        // the SCB, which its runtime can write (S3).
        let assigned: Option<Assigned> = self.table.get(slot);
        let Some(assigned) = assigned else {
            self.drop_worker(slot, "slot released");
            return;
        };
        let region = Arc::clone(&assigned.domain.region);
        let scb = region.scb(assigned.local);
        let state = scb.worker_state().load(Ordering::Acquire);
        let tid = assigned.tid;
        let local_slot = assigned.local;
        let active = state == WorkerState::Registered.raw()
            || state == WorkerState::Running.raw()
            || state == WorkerState::Quiescing.raw();
        let same = self.workers[slot as usize].as_ref().is_some_and(|w| {
            Arc::ptr_eq(&w.thread, &assigned.thread) && w.local_slot == local_slot && w.region_id == Arc::as_ptr(&region) as usize
        });
        if !active || !same {
            self.drop_worker(slot, "slot released");
            if !active {
                return;
            }
            let Some(mut worker) = self.track(&assigned) else { return };
            worker.region_id = Arc::as_ptr(&region) as usize;
            worker.last_ack = scb.last_ack_seq().load(Ordering::Acquire);
            self.workers[slot as usize] = Some(worker);
        }
        // The agent's own configuration, never the header's copy (S4).
        let slice_ns = self.config.slice_ns;
        let worker = self.workers[slot as usize].as_mut().expect("tracked above");

        let Some(run_ns) = read_runtime(&worker.schedstat) else {
            // The thread is gone (a read through its descriptor failed); the registry frees the slot,
            // and its id is never opened again.
            self.drop_worker(slot, "thread exited");
            return;
        };
        let ran = run_ns.saturating_sub(worker.run_ns);
        worker.run_ns = run_ns;
        let ack = scb.last_ack_seq().load(Ordering::Acquire);
        // A voluntary sleep or block since the last tick (what it ran after waking is unknown at this
        // resolution: counted from zero, as the kernel backend does at the sleep).
        let slept = match read_voluntary_switches(&worker.status) {
            Some(switches) if switches != worker.voluntary_switches => {
                worker.voluntary_switches = switches;
                true
            }
            _ => false,
        };
        // The yield-point rule of the policy header, the kernel backend's too (spec/SCB.md §5.2).
        if policy::yield_point(worker.last_ack, ack, state, slept) != YieldPoint::MORPHEUS_YIELD_POINT_NONE {
            worker.since_yield_ns = 0;
        } else {
            worker.since_yield_ns = worker.since_yield_ns.saturating_add(ran);
        }
        worker.last_ack = ack;
        if worker.since_yield_ns == 0 {
            worker.hinted_since_yield = false;
        }
        let since_yield = worker.since_yield_ns;
        scb.budget_remaining_ns().store(slice_ns.saturating_sub(since_yield), Ordering::Relaxed);

        // `ack` was loaded with acquire above; preempt_seq only the scheduler writes (relaxed).
        let seq = scb.preempt_seq().load(Ordering::Relaxed);
        let hint = policy::hint_decide(state, since_yield, slice_ns, now_ns, scb.last_hint_ns().load(Ordering::Relaxed), self.config.hint_min_interval_ns, seq, ack);
        match hint {
            HintDecision::MORPHEUS_HINT_EMIT => {
                // The hint's fields first, the signal last (release): SCB.md §5.2.
                scb.last_hint_ns().store(now_ns, Ordering::Relaxed);
                scb.budget_remaining_ns().store(0, Ordering::Relaxed);
                // preempt_seq is in the runtime's memory (any value): the increment wraps, as fetch_add does.
                let seq = scb.preempt_seq().fetch_add(1, Ordering::Release).wrapping_add(1);
                self.counters.hints_emitted += 1;
                let worker = self.workers[slot as usize].as_mut().expect("tracked above");
                if !worker.hinted_since_yield {
                    worker.hinted_since_yield = true;
                    self.reactions.hint.push(since_yield.saturating_sub(slice_ns));
                }
                log::trace!("slot {slot}: hint to tid {tid}, preempt_seq {seq}, {} µs since its last yield", since_yield / 1000);
            }
            hint if policy::hint_dropped(hint) => {
                scb.hints_dropped().fetch_add(1, Ordering::Relaxed);
                self.counters.hints_dropped += 1;
            }
            // Within the slice; or rate limited with the request still pending: it has been asked.
            _ => {}
        }
        // Not in the tick that made the request; an open episode is looked at for its lifts.
        let open = self.workers[slot as usize].as_ref().is_some_and(|w| w.episode.state.open != 0);
        if policy::gate_due(open, hint, since_yield, slice_ns) {
            self.escalate(slot, since_yield, now_ns);
        }
    }
}

impl Backend for SimBackend {
    fn kind(&self) -> abi::Backend {
        abi::Backend::Sim
    }

    fn slot_observer(&self) -> Option<Arc<dyn SlotObserver>> {
        Some(Arc::clone(&self.released) as Arc<dyn SlotObserver>)
    }

    fn tick_interval(&self) -> Duration {
        self.config.tick
    }

    fn tick(&mut self, now_ns: u64, level: u32) -> Result<()> {
        let released = self.released.take();
        for (slot, thread) in released {
            if self.workers[slot as usize].as_ref().is_some_and(|w| Arc::ptr_eq(&w.thread, &thread)) {
                self.drop_worker(slot, "unregistered");
            }
        }
        for slot in 0..self.table.capacity() {
            self.tick_slot(slot, now_ns);
            if self.workers[slot as usize].is_some() {
                if let Some(assigned) = self.table.get(slot) {
                    assigned.domain.region.scb(assigned.local).kernel_pressure_level().store(level, Ordering::Relaxed);
                }
            }
        }
        self.counters.ticks += 1;
        Ok(())
    }

    fn reactions(&self) -> Reactions {
        self.reactions.clone()
    }

    fn take_events(&mut self) -> Vec<abi::EscalationEvent> {
        self.effects.take_events()
    }

    fn counters(&self) -> Counters {
        let mut counters = self.counters.clone();
        counters.workers = self.workers.iter().filter(|w| w.is_some()).count() as u64;
        counters
    }

    fn shutdown(&mut self) -> Result<()> {
        for slot in 0..self.workers.len() as u32 {
            self.drop_worker(slot, "scheduler exiting");
        }
        Ok(())
    }
}
