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
//!
//! Bounded (A07): every registration from a new process adds a `client` line, so the journal is
//! compacted whenever it has grown past [`COMPACT_AT`] and doubled since its last compaction, open
//! effects or not: it is rewritten as the instance line, the clients still alive (same start time)
//! and every effect still open, into a new file that atomically replaces it (a crash at any point
//! leaves either journal whole). Its size is thus about twice what the live clients and open effects
//! need. Recovery streams the file line by line, with no size limit: every open effect is restored,
//! or the agent refuses to start naming the line it cannot read. A last line without its newline is
//! an append cut short by the crash, before its effect was applied (appends are synced first), and is
//! ignored.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, Write};
use std::mem::offset_of;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use morpheus_abi as abi;

use crate::rundir::RuntimeDir;

pub struct Journal {
    file: Mutex<File>,
    state: Mutex<Live>,
    /// The runtime directory and the journal's name in it (None: a scratch journal, rewritten in
    /// place).
    place: Option<(RuntimeDir, String)>,
}

/// What this instance's journal says now: enough to rewrite it short at any time.
#[derive(Default)]
struct Live {
    generation: u64,
    clients: BTreeMap<u32, u64>,
    /// Effects recorded and not yet undone.
    open: Open,
    bytes: u64,
    /// Bytes right after the last compaction (the next one waits until the file has doubled).
    compacted: u64,
}

/// A journal longer than this, and twice as long as after its last compaction, is rewritten as the
/// instance line, the live clients and the open effects.
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

/// What a journal says is in force (the previous instance's at recovery; this one's while it runs).
#[derive(Default, Debug)]
struct Open {
    generation: u64,
    clients: BTreeMap<u32, u64>,
    demotions: BTreeMap<(u32, u64), (i32, i32, i32)>,
    caps: BTreeMap<PathBuf, String>,
}

impl Open {
    /// Applies one line. Err: a line this journal cannot have written (named by the caller).
    fn apply(&mut self, line: &str) -> std::result::Result<(), &'static str> {
        let f: Vec<&str> = line.split(' ').collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<i64>().ok());
        match (f.first().copied(), f.len()) {
            (Some("instance"), 2) => self.generation = f[1].parse().map_err(|_| "a bad generation")?,
            (Some("client"), 3) => {
                let (Some(pid), Ok(start)) = (num(1), f[2].parse::<u64>()) else { return Err("a bad client line") };
                self.clients.insert(pid as u32, start);
            }
            (Some("demote"), 6) => {
                let (Some(tid), Ok(start), Some(p), Some(prio), Some(nice)) = (num(1), f[2].parse::<u64>(), num(3), num(4), num(5)) else {
                    return Err("a bad demote line");
                };
                self.demotions.insert((tid as u32, start), (p as i32, prio as i32, nice as i32));
            }
            (Some("restore"), 3) => {
                let (Some(tid), Ok(start)) = (num(1), f[2].parse::<u64>()) else { return Err("a bad restore line") };
                self.demotions.remove(&(tid as u32, start));
            }
            (Some("cap"), 3) => {
                let (Some(dir), Some(prev)) = (unhex(f[1]), unhex(f[2])) else { return Err("a bad cap line") };
                let dir = PathBuf::from(std::ffi::OsStr::from_bytes(&dir));
                self.caps.entry(dir).or_insert_with(|| String::from_utf8_lossy(&prev).into_owned());
            }
            (Some("uncap"), 2) => {
                let Some(dir) = unhex(f[1]) else { return Err("a bad uncap line") };
                self.caps.remove(&PathBuf::from(std::ffi::OsStr::from_bytes(&dir)));
            }
            _ => return Err("an unknown line"),
        }
        Ok(())
    }

    /// The journal's text for this state: instance, clients, then the effects still open.
    fn text(&self, generation: u64, clients: &BTreeMap<u32, u64>) -> String {
        let mut text = format!("instance {generation}\n");
        for (pid, start) in clients {
            text.push_str(&format!("client {pid} {start}\n"));
        }
        for (&(tid, start), &(policy, priority, nice)) in &self.demotions {
            text.push_str(&format!("demote {tid} {start} {policy} {priority} {nice}\n"));
        }
        for (dir, previous) in &self.caps {
            text.push_str(&format!("cap {} {}\n", hex(dir.as_os_str().as_bytes()), hex(previous.as_bytes())));
        }
        text
    }
}

/// Reads a journal line by line (any length), applying every line. Refuses (naming `what` and the
/// line) a line that is not UTF-8 or not understood, except a last line without its newline: an
/// append cut short by a crash, before its effect was applied.
fn parse_stream(reader: impl BufRead, what: &str) -> Result<Open> {
    let mut open = Open::default();
    let mut reader = reader;
    let mut buf = Vec::new();
    let mut number = 0usize;
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf).with_context(|| format!("cannot read {what} (after line {number})"))?;
        if n == 0 {
            break;
        }
        number += 1;
        let complete = buf.last() == Some(&b'\n');
        let bytes = if complete { &buf[..buf.len() - 1] } else { &buf[..] };
        let result = std::str::from_utf8(bytes).map_err(|_| "a line that is not UTF-8").and_then(|line| open.apply(line));
        match result {
            Ok(()) => {}
            Err(why) if !complete => {
                log::warn!("{what}: ignoring its last line {number}, cut short ({why}): an append the previous instance did not finish");
            }
            Err(why) => bail!(
                "{what}: line {number} is {why} ({:?}); it may record an effect still in force, so the agent will not start over it. \
                 Undo what it names by hand (a thread's policy and nice, a cgroup's cpu.max) and remove the file",
                String::from_utf8_lossy(bytes)
            ),
        }
    }
    Ok(open)
}

#[cfg(test)]
fn parse(text: &str) -> Open {
    parse_stream(text.as_bytes(), "journal").expect("a journal this agent writes")
}

impl Journal {
    /// Undoes what the previous instance recorded and left open, then starts a fresh journal for the
    /// instance publishing `generation`.
    pub fn recover(dir: &RuntimeDir, name: &str, generation: u64) -> Result<Journal> {
        let path = dir.join(name);
        let mut file = dir.open_file(name, true).with_context(|| format!("cannot open the journal {}", path.display()))?;
        let open = parse_stream(BufReader::new(&mut file), &format!("the journal {}", path.display()))?;
        undo(&open);
        file.set_len(0)?;
        file.rewind()?;
        let place = Some((dir.try_clone().context("cannot duplicate the runtime directory's descriptor")?, name.to_owned()));
        let journal = Journal { file: Mutex::new(file), state: Mutex::new(Live { generation, ..Live::default() }), place };
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
        Journal { file: Mutex::new(file), state: Mutex::new(Live::default()), place: None }
    }

    /// The journal's size now, in bytes.
    pub fn size(&self) -> u64 {
        self.live().bytes
    }

    fn live(&self) -> std::sync::MutexGuard<'_, Live> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `line` durably, `record` it in the live state, then compacts if due.
    fn append_with(&self, line: &str, record: impl FnOnce(&mut Live)) -> Result<()> {
        {
            let file = self.file.lock().unwrap_or_else(|p| p.into_inner());
            let mut f: &File = &file;
            f.write_all(format!("{line}\n").as_bytes()).context("cannot append to the journal")?;
            // Durable before the effect it announces is applied.
            // SAFETY: fdatasync on our descriptor.
            if unsafe { libc::fdatasync(f.as_raw_fd()) } != 0 {
                return Err(std::io::Error::last_os_error()).context("cannot sync the journal");
            }
            let mut live = self.live();
            live.bytes += line.len() as u64 + 1;
            record(&mut live);
        }
        let due = {
            let live = self.live();
            live.bytes > COMPACT_AT && live.bytes > 2 * live.compacted
        };
        if due {
            if let Err(e) = self.compact() {
                log::warn!("journal: cannot compact: {e:#}");
            }
        }
        Ok(())
    }

    fn append(&self, line: &str) -> Result<()> {
        self.append_with(line, |_| {})
    }

    /// A process that holds (or held) a slot of this instance: its mappings are retired after a kill.
    pub fn client(&self, pid: u32) -> Result<()> {
        let start = start_time(pid).unwrap_or(0);
        if self.live().clients.get(&pid) == Some(&start) {
            return Ok(());
        }
        self.append_with(&format!("client {pid} {start}"), |live| {
            live.clients.insert(pid, start);
        })
    }

    /// Rewrites the journal as the instance line, the clients still alive (the same processes) and
    /// the effects still open. With a runtime directory, into a new file that replaces the journal
    /// by rename (a crash leaves the old or the new one, each whole); a scratch journal in place.
    fn compact(&self) -> Result<()> {
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let mut live = self.live();
        live.clients.retain(|&pid, &mut start| start_time(pid) == Some(start));
        let text = live.open.text(live.generation, &live.clients);
        let sync = |f: &File| -> Result<()> {
            // SAFETY: fdatasync on our descriptor.
            if unsafe { libc::fdatasync(f.as_raw_fd()) } != 0 {
                return Err(std::io::Error::last_os_error()).context("cannot sync the journal");
            }
            Ok(())
        };
        match &self.place {
            Some((dir, name)) => {
                let tmp = format!("{name}.compact");
                let mut new = dir.open_file(&tmp, true).with_context(|| format!("cannot create {}", dir.join(&tmp).display()))?;
                new.set_len(0)?;
                new.write_all(text.as_bytes())?;
                sync(&new)?;
                dir.replace(&tmp, name).with_context(|| format!("cannot replace the journal with {}", dir.join(&tmp).display()))?;
                new.seek(std::io::SeekFrom::End(0))?;
                *file = new;
            }
            None => {
                let mut f: &File = &file;
                f.set_len(0)?;
                f.rewind()?;
                f.write_all(text.as_bytes())?;
                sync(f)?;
            }
        }
        live.bytes = text.len() as u64;
        live.compacted = live.bytes;
        Ok(())
    }

    /// About to demote `tid`; what to put back.
    pub fn demoting(&self, tid: u32, policy: i32, priority: i32, nice: i32) -> Result<()> {
        let start = start_time(tid).context("the thread is gone")?;
        self.append_with(&format!("demote {tid} {start} {policy} {priority} {nice}"), |live| {
            live.open.demotions.insert((tid, start), (policy, priority, nice));
        })
    }

    /// The demotion of `tid` was undone (or the thread is gone).
    pub fn restored(&self, tid: u32) {
        let start = start_time(tid).unwrap_or(0);
        let line = format!("restore {tid} {start}");
        let result = self.append_with(&line, |live| {
            // A thread that is gone (start 0) closes every demotion of its tid.
            if start == 0 {
                live.open.demotions.retain(|&(t, _), _| t != tid);
            } else {
                live.open.demotions.remove(&(tid, start));
            }
        });
        if let Err(e) = result {
            log::warn!("{e:#}");
        }
    }

    /// About to cap `dir`, whose own cpu.max is `previous`.
    pub fn capping(&self, dir: &Path, previous: &str) -> Result<()> {
        self.append_with(&format!("cap {} {}", hex(dir.as_os_str().as_bytes()), hex(previous.as_bytes())), |live| {
            live.open.caps.entry(dir.to_owned()).or_insert_with(|| previous.to_owned());
        })
    }

    /// `dir`'s cpu.max was put back.
    pub fn uncapped(&self, dir: &Path) {
        let result = self.append_with(&format!("uncap {}", hex(dir.as_os_str().as_bytes())), |live| {
            live.open.caps.remove(dir);
        });
        if let Err(e) = result {
            log::warn!("{e:#}");
        }
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
    use std::io::Read;

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
            "instance 7\nclient 10 5\ndemote 11 99 0 0 0\ndemote 12 98 0 0 5\nrestore 11 99\ncap {} {}\ncap {} {}\nuncap {}\ndemote 13 9",
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

    /// The text of a journal file.
    fn contents(journal: &Journal) -> String {
        let mut text = String::new();
        let mut f: &File = &journal.file.lock().unwrap();
        f.rewind().unwrap();
        f.read_to_string(&mut text).unwrap();
        text
    }

    /// A07: client lines of processes that are gone do not accumulate, even with an effect open for
    /// the whole run (before, compaction waited for no effect to be open, and never came in observer
    /// mode); the compacted journal, replaced by rename in its directory, still holds the open
    /// effects and the live clients, and recovery from it restores them. 10^4 registrations of
    /// processes that exited leave it under twice COMPACT_AT.
    #[test]
    fn client_lines_are_compacted_while_an_effect_stays_open() {
        // On tmpfs when there is one: 10^4 fdatasyncs on a disk take half a minute.
        let shm = Path::new("/dev/shm");
        let tmp = if shm.is_dir() { tempfile::tempdir_in(shm) } else { tempfile::tempdir() }.unwrap();
        let dir = RuntimeDir::open(tmp.path()).unwrap();
        let journal = Journal::recover(&dir, "j", 5).unwrap();
        let me = std::process::id();
        journal.client(me).unwrap();
        journal.demoting(me, 0, 0, 3).unwrap(); // open all along
        let cgroup = tempfile::tempdir().unwrap();
        journal.capping(cgroup.path(), "max 100000").unwrap();
        // Pids above the kernel's PID_MAX_LIMIT (4194304): processes that are never alive.
        let mut most = 0;
        for i in 0..10_000u32 {
            journal.client(5_000_000 + i).unwrap();
            most = most.max(journal.size());
        }
        assert!(most <= 2 * COMPACT_AT + 64, "the journal reached {most} bytes");
        let text = std::fs::read_to_string(tmp.path().join("j")).unwrap();
        assert_eq!(text.len() as u64, journal.size(), "the file in the directory is the journal written to");
        let open = parse(&text);
        assert_eq!(open.generation, 5);
        assert_eq!(open.demotions.get(&(me, start_time(me).unwrap())), Some(&(0, 0, 3)), "{}", &text[..200.min(text.len())]);
        assert_eq!(open.caps.get(cgroup.path()).map(String::as_str), Some("max 100000"));
        assert!(open.clients.contains_key(&me));
        assert!(open.clients.len() < 4000, "{} clients kept", open.clients.len());
        assert!(!tmp.path().join("j.compact").exists());
        // Undone: the next compaction drops them.
        journal.restored(me);
        journal.uncapped(cgroup.path());
        journal.compact().unwrap();
        let open = parse(&contents(&journal));
        assert!(open.demotions.is_empty() && open.caps.is_empty());
    }

    /// A07: recovery reads a journal of any length; an effect recorded after 64 MiB of client
    /// lines is restored (before, everything past 64 MiB was dropped without a word).
    #[test]
    fn recovery_reads_past_64_mib() {
        struct Lines(u64);
        impl Read for Lines {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                const LINE: &[u8] = b"client 5000000 12345678\n";
                let mut n = 0;
                while self.0 > 0 && n + LINE.len() <= buf.len() {
                    buf[n..n + LINE.len()].copy_from_slice(LINE);
                    n += LINE.len();
                    self.0 -= 1;
                }
                Ok(n)
            }
        }
        let lines = (70u64 << 20) / 24 + 1;
        let text = BufReader::new(Read::chain(Read::chain(&b"instance 3\n"[..], Lines(lines)), &b"demote 77 88 0 0 19\ncap 2f78 6d6178\n"[..]));
        let open = parse_stream(text, "test journal").unwrap();
        assert_eq!(open.demotions.get(&(77, 88)), Some(&(0, 0, 19)));
        assert_eq!(open.caps.get(Path::new("/x")).map(String::as_str), Some("max"));
    }

    /// A07: a line the agent cannot have written stops recovery with an error naming the line
    /// (an effect it records may be in force); only a last line cut short (no newline) is skipped.
    #[test]
    fn an_unreadable_line_refuses_recovery_naming_it() {
        let err = parse_stream(&b"instance 1\nclient 1 2\ndemote 5 6 x 0 0\nrestore 5 6\n"[..], "the journal J").unwrap_err();
        let err = format!("{err:#}");
        assert!(err.contains("the journal J: line 3 is a bad demote line (\"demote 5 6 x 0 0\")"), "{err}");
        let err = format!("{:#}", parse_stream(&b"instance 1\n\xff\xfe\ndemote 5 6 0 0 0\n"[..], "J").unwrap_err());
        assert!(err.contains("line 2 is a line that is not UTF-8"), "{err}");
        let err = format!("{:#}", parse_stream(&b"instance 1\nfrobnicate\n"[..], "J").unwrap_err());
        assert!(err.contains("line 2 is an unknown line"), "{err}");
        let open = parse_stream(&b"instance 1\ndemote 5 6 0 0 0\ndemote 7 8 0"[..], "J").unwrap();
        assert_eq!(open.demotions.len(), 1, "the torn last line is skipped, the rest kept");
    }
}
