// SPDX-License-Identifier: GPL-2.0-only
//! `--attack`: what a hostile member of the socket group does to another user's worker on the kernel
//! backend (spec/SCB.md §10, trust domains), for e2e/trust-guest.sh. Run as an unprivileged user once
//! its own worker is registered:
//!
//! 1. it looks at every SCB of the region the agent sent it and counts the slots that are not its own
//!    and not free (`foreign_slots`): another user's worker would show there if regions were shared;
//! 2. it tries the other ways to another region: the root-only pins (`BPF_OBJ_GET`), map ids
//!    (`BPF_MAP_GET_FD_BY_ID`), the agent's and the victim's descriptors and mappings in /proc;
//! 3. it forges every other slot of its region as a RUNNING, escapable worker naming the victim's and
//!    a root process's tid and pid, and its own SCB as escapable with the victim's tid (its worker
//!    registered with escapable = 0): the scheduler must act on none of the named threads.

use std::ffi::CString;
use std::mem::offset_of;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use morpheus::Worker;
use morpheus_abi::{Scb, WorkerState};

/// Who the attack names: `VICTIM_PID:VICTIM_TID:ROOT_PID:AGENT_PID`.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pub victim_pid: u32,
    pub victim_tid: u32,
    pub root_pid: u32,
    pub agent_pid: u32,
}

impl Target {
    pub fn parse(s: &str) -> Result<Target, String> {
        let n: Vec<u32> = s
            .split(':')
            .map(|v| v.parse().map_err(|_| format!("--attack: '{v}' is not a pid")))
            .collect::<Result<_, _>>()?;
        match n[..] {
            [victim_pid, victim_tid, root_pid, agent_pid] => Ok(Target { victim_pid, victim_tid, root_pid, agent_pid }),
            _ => Err(format!("--attack {s}: expected VICTIM_PID:VICTIM_TID:ROOT_PID:AGENT_PID")),
        }
    }
}

fn a32(scb: *mut Scb, offset: usize) -> &'static AtomicU32 {
    // SAFETY: an aligned u32 field of an SCB in the region the worker keeps mapped while attacking.
    unsafe { &*scb.cast::<u8>().add(offset).cast::<AtomicU32>() }
}

fn a64(scb: *mut Scb, offset: usize) -> &'static AtomicU64 {
    // SAFETY: as above, an aligned u64 field.
    unsafe { &*scb.cast::<u8>().add(offset).cast::<AtomicU64>() }
}

/// "denied" (EACCES/EPERM), "ok" or the errno's text: how an attempt to reach something ended.
fn outcome<T>(result: std::io::Result<T>) -> String {
    match result {
        Ok(_) => "ok".into(),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)) => "denied".into(),
        Err(e) => format!("{:?}", e.kind()).to_lowercase(),
    }
}

/// bpf(2) with a zeroed attribute whose first bytes are `head`. Returns the new descriptor.
fn bpf_fd(cmd: libc::c_long, head: &[u8]) -> std::io::Result<i32> {
    let mut attr = [0u8; 128];
    attr[..head.len()].copy_from_slice(head);
    // SAFETY: a valid attribute buffer of its stated size.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor we now own.
    unsafe { libc::close(fd as i32) };
    Ok(fd as i32)
}

/// BPF_OBJ_GET of a pinned object.
fn open_pinned(path: &str) -> std::io::Result<i32> {
    const BPF_OBJ_GET: libc::c_long = 7;
    let c = CString::new(path).expect("no NUL");
    bpf_fd(BPF_OBJ_GET, &(c.as_ptr() as u64).to_ne_bytes())
}

/// How many of the map ids 1..=`max` BPF_MAP_GET_FD_BY_ID opened, and how the first attempt ended.
fn open_maps_by_id(max: u32) -> (u32, String) {
    const BPF_MAP_GET_FD_BY_ID: libc::c_long = 14;
    let first = outcome(bpf_fd(BPF_MAP_GET_FD_BY_ID, &1u32.to_ne_bytes()));
    let opened = (1..=max).filter(|id| bpf_fd(BPF_MAP_GET_FD_BY_ID, &id.to_ne_bytes()).is_ok()).count() as u32;
    (opened, first)
}

fn list_dir(path: &str) -> std::io::Result<usize> {
    std::fs::read_dir(path).map(|entries| entries.count())
}

/// Steps 1 and 2; the report's first fields.
pub fn probe(worker: &Worker, target: &Target) -> Result<String, String> {
    let region = worker.region().ok_or("the worker is not attached to a region")?;
    let own = worker.slot().ok_or("the worker has no slot")?;
    let mut foreign = 0;
    for slot in 0..region.scb_count() {
        let scb = region.scb_ptr(slot).map_err(|e| format!("SCB {slot}: {e}"))?;
        let state = a32(scb, offset_of!(Scb, worker_state)).load(Ordering::Acquire);
        if slot != own && state != WorkerState::Init.raw() {
            foreign += 1;
        }
    }
    let (by_id, by_id_first) = open_maps_by_id(4096);
    Ok(format!(
        "scb_count={} own_slot={own} foreign_slots={foreign} pin={} pin_dir={} map_ids_opened={by_id} map_id_1={by_id_first} agent_fds={} victim_fds={} victim_map_files={}",
        region.scb_count(),
        outcome(open_pinned(morpheus_abi::PINNED_REGION_PATH)),
        outcome(list_dir(morpheus_abi::PIN_DIR)),
        outcome(list_dir(&format!("/proc/{}/fd", target.agent_pid))),
        outcome(list_dir(&format!("/proc/{}/fd", target.victim_pid))),
        outcome(list_dir(&format!("/proc/{}/map_files", target.victim_pid))),
    ))
}

/// The worker's own SCB fields the forgery changes, to put back before it unregisters.
pub struct Saved {
    tid: u32,
    pid: u32,
    escapable: u32,
}

/// Step 3. Returns how many foreign slots were forged and what to restore.
pub fn forge(worker: &Worker, target: &Target) -> Result<(u32, Saved), String> {
    let region = worker.region().ok_or("the worker is not attached to a region")?;
    let own = worker.slot().ok_or("the worker has no slot")?;
    let mut forged = 0;
    let mut saved = None;
    for slot in 0..region.scb_count() {
        let scb = region.scb_ptr(slot).map_err(|e| format!("SCB {slot}: {e}"))?;
        let (tid, pid) =
            if slot % 2 == 0 { (target.victim_tid, target.victim_pid) } else { (target.root_pid, target.root_pid) };
        let tid_field = a32(scb, offset_of!(Scb, tid));
        let pid_field = a32(scb, offset_of!(Scb, pid));
        let escapable = a32(scb, offset_of!(Scb, escapable));
        if slot == own {
            saved = Some(Saved {
                tid: tid_field.load(Ordering::Relaxed),
                pid: pid_field.load(Ordering::Relaxed),
                escapable: escapable.load(Ordering::Relaxed),
            });
            tid_field.store(target.victim_tid, Ordering::Relaxed);
            pid_field.store(target.victim_pid, Ordering::Relaxed);
            escapable.store(1, Ordering::Release);
            continue;
        }
        tid_field.store(tid, Ordering::Relaxed);
        pid_field.store(pid, Ordering::Relaxed);
        escapable.store(1, Ordering::Relaxed);
        a32(scb, offset_of!(Scb, in_critical)).store(0, Ordering::Relaxed);
        a64(scb, offset_of!(Scb, last_ack_seq)).store(0, Ordering::Relaxed);
        a32(scb, offset_of!(Scb, worker_state)).store(WorkerState::Running.raw(), Ordering::Release);
        forged += 1;
    }
    Ok((forged, saved.ok_or("the worker's own slot is outside its region")?))
}

/// Puts the worker's own SCB back as it registered, so it unregisters cleanly.
pub fn restore(worker: &Worker, saved: &Saved) -> Result<(), String> {
    let region = worker.region().ok_or("the worker is not attached to a region")?;
    let own = worker.slot().ok_or("the worker has no slot")?;
    let scb = region.scb_ptr(own).map_err(|e| format!("SCB {own}: {e}"))?;
    a32(scb, offset_of!(Scb, tid)).store(saved.tid, Ordering::Relaxed);
    a32(scb, offset_of!(Scb, pid)).store(saved.pid, Ordering::Relaxed);
    a32(scb, offset_of!(Scb, escapable)).store(saved.escapable, Ordering::Release);
    Ok(())
}
