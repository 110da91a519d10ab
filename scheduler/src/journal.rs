// SPDX-License-Identifier: GPL-2.0-only
//! Effects die with the scheduler (S7): a journal of every effect on other tasks, written durably
//! before the effect is applied, and undone by the next instance if this one is killed.
//!
//! A killed sched_ext scheduler returns every task to the default class; a killed agent would leave
//! its SCHED_IDLE demotions and cpu.max caps in force and its regions looking served. So before a
//! demotion or cap the agent appends a line to `<socket>.journal` in its runtime directory (root-only
//! 0600, opened without following symlinks) and syncs it; after undoing one it appends the matching
//! line. At start-up [`Journal::recover`] replays the previous instance's file: it restores every
//! demotion still open (if the thread is still the same one: its start time is recorded), restores
//! every cgroup's cpu.max, and retires the previous instance's regions (generation := 0 in the memfds
//! its clients still map), then starts a fresh journal.
//!
//! Lines: `instance <generation>`, `client <pid> <starttime>`, `demote <tid> <starttime> <policy>
//! <priority> <nice>`, `restore <tid> <starttime>`, `cap <hex cgroup dir> <hex previous cpu.max>`,
//! `uncap <hex cgroup dir>`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::mem::offset_of;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result};
use morpheus_abi as abi;

use crate::rundir::RuntimeDir;

pub struct Journal {
    file: Mutex<File>,
    state: Mutex<Live>,
}

/// What this instance's journal says now, to rewrite it short when nothing is in force.
#[derive(Default)]
struct Live {
    generation: u64,
    clients: BTreeMap<u32, u64>,
    /// Effects recorded and not yet undone.
    open: i64,
    bytes: u64,
}

/// A journal longer than this is rewritten (instance and live clients only) once no effect is open.
const COMPACT_AT: u64 = 64 << 10;

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Journal")
    }
}

/// Start time of thread `tid` (clock ticks since boot, field 22 of /proc/<tid>/stat): tells a thread
/// apart from a later one that reuses its id.
pub fn start_time(tid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{tid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

/// What the previous instance left in force.
#[derive(Default, Debug)]
struct Open {
    generation: u64,
    clients: BTreeMap<u32, u64>,
    demotions: BTreeMap<(u32, u64), (i32, i32, i32)>,
    caps: BTreeMap<PathBuf, String>,
}

fn parse(text: &str) -> Open {
    let mut open = Open::default();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<i64>().ok());
        match (f.first().copied(), f.len()) {
            (Some("instance"), 2) => open.generation = f[1].parse().unwrap_or(0),
            (Some("client"), 3) => {
                if let (Some(pid), Some(start)) = (num(1), f[2].parse::<u64>().ok()) {
                    open.clients.insert(pid as u32, start);
                }
            }
            (Some("demote"), 6) => {
                if let (Some(tid), Ok(start), Some(p), Some(prio), Some(nice)) =
                    (num(1), f[2].parse::<u64>(), num(3), num(4), num(5))
                {
                    open.demotions.insert((tid as u32, start), (p as i32, prio as i32, nice as i32));
                }
            }
            (Some("restore"), 3) => {
                if let (Some(tid), Ok(start)) = (num(1), f[2].parse::<u64>()) {
                    open.demotions.remove(&(tid as u32, start));
                }
            }
            (Some("cap"), 3) => {
                if let (Some(dir), Some(prev)) = (unhex(f[1]), unhex(f[2])) {
                    let dir = PathBuf::from(std::ffi::OsStr::from_bytes(&dir));
                    open.caps.entry(dir).or_insert_with(|| String::from_utf8_lossy(&prev).into_owned());
                }
            }
            (Some("uncap"), 2) => {
                if let Some(dir) = unhex(f[1]) {
                    open.caps.remove(&PathBuf::from(std::ffi::OsStr::from_bytes(&dir)));
                }
            }
            _ => log::warn!("journal: ignoring a line it does not understand: {line:?}"),
        }
    }
    open
}

impl Journal {
    /// Undoes what the previous instance recorded and left open, then starts a fresh journal for the
    /// instance publishing `generation`.
    pub fn recover(dir: &RuntimeDir, name: &str, generation: u64) -> Result<Journal> {
        let path = dir.join(name);
        let mut file = dir.open_file(name, true).with_context(|| format!("cannot open the journal {}", path.display()))?;
        let mut text = String::new();
        Read::take(&mut file, 64 << 20).read_to_string(&mut text).with_context(|| format!("cannot read {}", path.display()))?;
        let open = parse(&text);
        undo(&open);
        file.set_len(0)?;
        file.rewind()?;
        let journal = Journal { file: Mutex::new(file), state: Mutex::new(Live { generation, ..Live::default() }) };
        journal.append(&format!("instance {generation}"))?;
        Ok(journal)
    }

    /// A journal that records to an unlinked file (unit tests).
    #[cfg(test)]
    pub fn scratch() -> Journal {
        // A memfd: syncing it costs nothing, so the tests do not depend on the disk.
        // SAFETY: a new memfd we own.
        let raw = unsafe { libc::memfd_create(c"journal-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0);
        // SAFETY: as above.
        let file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(raw) };
        Journal { file: Mutex::new(file), state: Mutex::new(Live::default()) }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, Live> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn append(&self, line: &str) -> Result<()> {
        let file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let mut f: &File = &file;
        f.write_all(format!("{line}\n").as_bytes()).context("cannot append to the journal")?;
        self.live().bytes += line.len() as u64 + 1;
        // Durable before the effect it announces is applied.
        // SAFETY: fdatasync on our descriptor.
        if unsafe { libc::fdatasync(f.as_raw_fd()) } != 0 {
            return Err(std::io::Error::last_os_error()).context("cannot sync the journal");
        }
        Ok(())
    }

    /// A process that holds (or held) a slot of this instance: its mappings are retired after a kill.
    pub fn client(&self, pid: u32) -> Result<()> {
        let start = start_time(pid).unwrap_or(0);
        if self.live().clients.insert(pid, start) == Some(start) {
            return Ok(());
        }
        self.append(&format!("client {pid} {start}"))
    }

    /// One effect recorded (+1) or undone (-1); with none open, a long journal is rewritten short.
    fn count(&self, delta: i64) {
        let compact = {
            let mut live = self.live();
            live.open += delta;
            live.open <= 0 && live.bytes > COMPACT_AT
        };
        if compact {
            if let Err(e) = self.compact() {
                log::warn!("journal: cannot compact: {e:#}");
            }
        }
    }

    /// Rewrites the journal as the instance line and the clients still alive (the same processes).
    fn compact(&self) -> Result<()> {
        let file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let mut live = self.live();
        live.clients.retain(|&pid, &mut start| start_time(pid) == Some(start));
        let mut text = format!("instance {}\n", live.generation);
        for (pid, start) in &live.clients {
            text.push_str(&format!("client {pid} {start}\n"));
        }
        let mut f: &File = &file;
        f.set_len(0)?;
        f.rewind()?;
        f.write_all(text.as_bytes())?;
        // SAFETY: fdatasync on our descriptor.
        if unsafe { libc::fdatasync(f.as_raw_fd()) } != 0 {
            return Err(std::io::Error::last_os_error()).context("cannot sync the journal");
        }
        live.bytes = text.len() as u64;
        Ok(())
    }

    /// About to demote `tid`; what to put back.
    pub fn demoting(&self, tid: u32, policy: i32, priority: i32, nice: i32) -> Result<()> {
        let start = start_time(tid).context("the thread is gone")?;
        self.append(&format!("demote {tid} {start} {policy} {priority} {nice}"))?;
        self.count(1);
        Ok(())
    }

    /// The demotion of `tid` was undone (or the thread is gone).
    pub fn restored(&self, tid: u32) {
        let start = start_time(tid).unwrap_or(0);
        if let Err(e) = self.append(&format!("restore {tid} {start}")) {
            log::warn!("{e:#}");
        }
        self.count(-1);
    }

    /// About to cap `dir`, whose own cpu.max is `previous`.
    pub fn capping(&self, dir: &Path, previous: &str) -> Result<()> {
        self.append(&format!("cap {} {}", hex(dir.as_os_str().as_bytes()), hex(previous.as_bytes())))?;
        self.count(1);
        Ok(())
    }

    /// `dir`'s cpu.max was put back.
    pub fn uncapped(&self, dir: &Path) {
        if let Err(e) = self.append(&format!("uncap {}", hex(dir.as_os_str().as_bytes()))) {
            log::warn!("{e:#}");
        }
        self.count(-1);
    }
}

fn undo(open: &Open) {
    for (&(tid, start), &(policy, priority, nice)) in &open.demotions {
        if start_time(tid) != Some(start) {
            log::info!("journal: tid {tid}, demoted by the previous instance, is gone");
            continue;
        }
        let param = libc::sched_param { sched_priority: priority };
        // SAFETY: plain syscalls on a thread id we recorded (and whose start time still matches).
        let ok = unsafe {
            let ok = libc::sched_setscheduler(tid as libc::pid_t, policy, &param) == 0;
            libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) == 0 && ok
        };
        if ok {
            log::info!("journal: restored tid {tid} (policy {policy}, nice {nice}), demoted by the previous instance");
        } else {
            log::warn!("journal: cannot restore tid {tid}: {}", std::io::Error::last_os_error());
        }
    }
    for (dir, previous) in &open.caps {
        let file = dir.join("cpu.max");
        match std::fs::write(&file, previous) {
            Ok(()) => log::info!("journal: restored {} to '{previous}', capped by the previous instance", file.display()),
            Err(e) => log::warn!("journal: cannot restore {} to '{previous}': {e}", file.display()),
        }
    }
    if open.generation != 0 {
        for (&pid, &start) in &open.clients {
            if start_time(pid) == Some(start) {
                retire_mapped_regions(pid, open.generation);
            }
        }
    }
}

/// Stores generation 0 in every region of instance `generation` that process `pid` still maps, so its
/// workers detach (spec/SCB.md §6). The memfds are reached through /proc/<pid>/map_files (root only).
fn retire_mapped_regions(pid: u32, generation: u64) {
    let dir = format!("/proc/{pid}/map_files");
    let Ok(entries) = std::fs::read_dir(&dir) else { return };
    let mut seen = BTreeSet::new();
    for entry in entries.flatten() {
        let Ok(target) = std::fs::read_link(entry.path()) else { continue };
        if !target.as_os_str().as_bytes().starts_with(b"/memfd:morpheus-region-") {
            continue;
        }
        let Ok(file) = OpenOptions::new().read(true).write(true).open(entry.path()) else { continue };
        let Ok(meta) = file.metadata() else { continue };
        if !seen.insert(std::os::unix::fs::MetadataExt::ino(&meta)) || meta.len() < std::mem::size_of::<abi::RegionHeader>() as u64 {
            continue;
        }
        let mut head = [0u8; 8];
        let at = offset_of!(abi::RegionHeader, generation) as u64;
        let magic_ok = std::os::unix::fs::FileExt::read_exact_at(&file, &mut head, 0).is_ok()
            && u64::from_le_bytes(head) == abi::REGION_MAGIC;
        let gen_ok = std::os::unix::fs::FileExt::read_exact_at(&file, &mut head, at).is_ok()
            && u64::from_le_bytes(head) == generation;
        if magic_ok && gen_ok && std::os::unix::fs::FileExt::write_all_at(&file, &0u64.to_le_bytes(), at).is_ok() {
            log::info!("journal: retired a region of the previous instance still mapped by pid {pid} (generation 0)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Many demote/restore pairs do not grow the journal without bound: with nothing open it is
    /// rewritten to the instance line and the live clients.
    #[test]
    fn a_long_journal_is_compacted_when_nothing_is_open() {
        let journal = Journal::scratch();
        journal.live().generation = 9;
        journal.client(std::process::id()).unwrap();
        // SAFETY: no preconditions.
        let me = unsafe { libc::gettid() } as u32;
        for _ in 0..2000 {
            journal.demoting(me, 0, 0, 0).unwrap();
            journal.restored(me);
        }
        let mut text = String::new();
        let mut f: &File = &journal.file.lock().unwrap();
        f.rewind().unwrap();
        f.read_to_string(&mut text).unwrap();
        assert!(text.len() < COMPACT_AT as usize, "{} bytes", text.len());
        let open = parse(&text);
        assert_eq!(open.generation, 9);
        assert!(open.demotions.is_empty());
        assert!(open.clients.contains_key(&std::process::id()), "{text}");
    }

    /// A cap recorded before it was written and never lifted (the agent was killed) is put back by
    /// recovery; a demotion of a thread that is gone is skipped.
    #[test]
    fn recovery_restores_an_open_cap() {
        let cgroup = tempfile::tempdir().unwrap();
        let cpu_max = cgroup.path().join("cpu.max");
        std::fs::write(&cpu_max, "10000 100000").unwrap(); // the cap in force
        let open = parse(&format!(
            "instance 1\ncap {} {}\ndemote 999999999 1 0 0 0\n",
            hex(cgroup.path().as_os_str().as_bytes()),
            hex(b"max 100000")
        ));
        undo(&open);
        assert_eq!(std::fs::read_to_string(&cpu_max).unwrap(), "max 100000");
    }

    #[test]
    fn parse_closes_what_was_undone() {
        let text = format!(
            "instance 7\nclient 10 5\ndemote 11 99 0 0 0\ndemote 12 98 0 0 5\nrestore 11 99\ncap {} {}\ncap {} {}\nuncap {}\ngarbage\n",
            hex(b"/sys/fs/cgroup/a"),
            hex(b"max 100000"),
            hex(b"/sys/fs/cgroup/b"),
            hex(b"50000 100000"),
            hex(b"/sys/fs/cgroup/a"),
        );
        let open = parse(&text);
        assert_eq!(open.generation, 7);
        assert_eq!(open.clients.get(&10), Some(&5));
        assert_eq!(open.demotions.len(), 1);
        assert_eq!(open.demotions.get(&(12, 98)), Some(&(0, 0, 5)));
        assert_eq!(open.caps.len(), 1);
        assert_eq!(open.caps.get(Path::new("/sys/fs/cgroup/b")).map(String::as_str), Some("50000 100000"));
    }
}
