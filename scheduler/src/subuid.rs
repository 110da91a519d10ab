// SPDX-License-Identifier: GPL-2.0-only
//! Who owns a uid: subordinate uid ranges (subuid(5), `/etc/subuid`) map back to the user they were
//! given to, so quotas and limits are charged to a *user*, not to each uid it can become (A03).
//!
//! With `newuidmap` (what rootless containers use) a user maps its subordinate range into a user
//! namespace; a process there keeps its supplementary groups (the socket group too) and connects as
//! any uid of the range, which SO_PEERCRED reports in the agent's namespace. Each such uid still gets
//! its own region (a process of a subordinate uid may be a container the user runs; memory of a
//! domain is reachable by every process of its uid, so the owner's region is not shared with it), but
//! slots, connections, live domains and refusal rates are charged to the owner.
//!
//! Lines are `owner:start:count` (owner: a user name or a uid; decimal start and count, count >= 1),
//! blank lines and `#` comments are skipped. Anything else is an error naming the file and line, and
//! so are ranges that wrap past the last uid, name an unknown user, or overlap another owner's range.
//! The file is read at start (an error stops the agent) and again whenever it changes (an error then
//! keeps the map in force and is logged). A missing file is an empty map.

use std::ffi::CString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};

/// One subordinate range: `count` uids from `start`, owned by `owner`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Range {
    start: u32,
    count: u32,
    owner: u32,
    /// The 1-based line it came from (for the overlap error).
    line: usize,
}

impl Range {
    fn last(&self) -> u32 {
        self.start + (self.count - 1)
    }
}

/// The subordinate ranges of a subuid file, sorted by start, no two owners' ranges overlapping.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubuidMap {
    ranges: Vec<Range>,
}

/// The uid of user `name` (getpwnam_r), None if there is none.
pub fn user_id(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    let mut buf = vec![0 as libc::c_char; 16384];
    // SAFETY: an all-zero passwd is a valid out-value.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: valid name, out-pointers and buffer of the given length; reentrant.
    let rc = unsafe { libc::getpwnam_r(c.as_ptr(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
    (rc == 0 && !found.is_null()).then_some(pwd.pw_uid)
}

impl SubuidMap {
    /// Parses `text` (the contents of `path`, named in errors), resolving user names with `resolve`.
    pub fn parse(text: &str, path: &Path, resolve: impl Fn(&str) -> Option<u32>) -> Result<SubuidMap> {
        let mut ranges = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let bad = |why: String| anyhow::anyhow!("{}:{line}: {why}: {raw:?}", path.display());
            let fields: Vec<&str> = trimmed.split(':').collect();
            if fields.len() != 3 {
                return Err(bad(format!("expected owner:start:count, found {} field(s)", fields.len())));
            }
            let number = |what: &str, v: &str| -> Result<u32> {
                if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad(format!("{what} {v:?} is not a decimal number")));
                }
                v.parse::<u32>().map_err(|_| bad(format!("{what} {v} does not fit a uid (32 bits)")))
            };
            let owner_field = fields[0];
            if owner_field.is_empty() {
                return Err(bad("the owner is empty".into()));
            }
            let owner = if owner_field.bytes().all(|b| b.is_ascii_digit()) {
                number("owner uid", owner_field)?
            } else {
                resolve(owner_field).ok_or_else(|| bad(format!("no user named {owner_field:?}")))?
            };
            let start = number("start", fields[1])?;
            let count = number("count", fields[2])?;
            if count == 0 {
                return Err(bad("count is 0".into()));
            }
            if start.checked_add(count - 1).is_none() {
                return Err(bad(format!("{count} uids from {start} run past the last uid")));
            }
            ranges.push(Range { start, count, owner, line });
        }
        ranges.sort_by_key(|r| (r.start, r.line));
        for pair in ranges.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if b.start <= a.last() && a.owner != b.owner {
                bail!(
                    "{}:{}: uids {}-{} of uid {} overlap uids {}-{} of uid {} (line {}); a uid has one owner",
                    path.display(),
                    b.line,
                    b.start,
                    b.last(),
                    b.owner,
                    a.start,
                    a.last(),
                    a.owner,
                    a.line
                );
            }
        }
        Ok(SubuidMap { ranges })
    }

    /// The user `uid` is charged to: the owner of the range holding it, else itself.
    pub fn owner(&self, uid: u32) -> u32 {
        let at = self.ranges.partition_point(|r| r.start <= uid);
        // Ranges of one owner may overlap: any range starting at or before uid may hold it, but
        // they all name the same owner when they do (checked at parse), so the latest start wins.
        self.ranges[..at].iter().rev().find(|r| uid <= r.last()).map_or(uid, |r| r.owner)
    }

    /// Number of ranges (for the start-up log).
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

/// What identifies one version of the file (re-read when any of it changes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
}

fn stamp(path: &Path) -> Result<Option<Stamp>> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            ctime_ns: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
        })),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot stat {}", path.display())),
    }
}

fn load(path: &Path) -> Result<(Option<Stamp>, SubuidMap)> {
    let before = stamp(path)?;
    if before.is_none() {
        return Ok((None, SubuidMap::default()));
    }
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((None, SubuidMap::default())),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    Ok((before, SubuidMap::parse(&text, path, user_id)?))
}

/// The subordinate uid map in force, from a file re-read when it changes.
pub struct Owners {
    path: PathBuf,
    state: Mutex<(Option<Stamp>, SubuidMap)>,
}

impl Owners {
    /// Reads `path` (an error names the file and line: the agent does not start on a map it cannot
    /// read, since every subordinate uid would then be a user of its own).
    pub fn load(path: &Path) -> Result<Owners> {
        let state = load(path).with_context(|| format!("subordinate uids (--subuid {})", path.display()))?;
        Ok(Owners { path: path.to_owned(), state: Mutex::new(state) })
    }

    /// A fixed map (tests, fuzzing), never re-read.
    pub fn fixed(map: SubuidMap) -> Owners {
        Owners { path: PathBuf::new(), state: Mutex::new((None, map)) }
    }

    /// Ranges in force.
    pub fn ranges(&self) -> usize {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1.len()
    }

    /// Re-reads the file if it changed since it was last read; a bad new version is logged, naming
    /// the line, and the map in force is kept.
    pub fn refresh(&self) {
        if self.path.as_os_str().is_empty() {
            return;
        }
        let now = match stamp(&self.path) {
            Ok(now) => now,
            Err(e) => {
                log::error!("subordinate uids: {e:#}; keeping the map read before");
                return;
            }
        };
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if now == state.0 {
            return;
        }
        match load(&self.path) {
            Ok(new) => {
                log::info!("subordinate uids: {} changed, {} range(s) now", self.path.display(), new.1.len());
                *state = new;
            }
            Err(e) => {
                log::error!("subordinate uids: {e:#}; keeping the map read before");
                state.0 = now; // logged once per version of the file
            }
        }
    }

    /// The user `uid` is charged to.
    pub fn owner(&self, uid: u32) -> u32 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1.owner(uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(name: &str) -> Option<u32> {
        match name {
            "alice" => Some(1000),
            "bob" => Some(1001),
            _ => None,
        }
    }

    fn parse(text: &str) -> Result<SubuidMap> {
        SubuidMap::parse(text, Path::new("/etc/subuid"), resolve)
    }

    #[test]
    fn subordinate_uids_map_to_their_owner() {
        let map = parse("# comment\n\nalice:100000:65536\n1001:165536:65536\n  alice:100000:10  \n").unwrap();
        assert_eq!(map.owner(100000), 1000);
        assert_eq!(map.owner(165535), 1000);
        assert_eq!(map.owner(165536), 1001);
        assert_eq!(map.owner(231071), 1001);
        assert_eq!(map.owner(231072), 231072, "past every range: its own user");
        assert_eq!(map.owner(99999), 99999);
        assert_eq!(map.owner(1000), 1000);
        assert_eq!(map.owner(0), 0);
        let top = parse("bob:4294967295:1\n").unwrap();
        assert_eq!(top.owner(u32::MAX), 1001);
    }

    #[test]
    fn bad_lines_are_refused_naming_file_line_and_what() {
        let cases = [
            ("alice:100000\n", "/etc/subuid:1: expected owner:start:count, found 2 field(s): \"alice:100000\""),
            ("alice:1:2:3\n", "found 4 field(s)"),
            ("\nalice:x:5\n", "/etc/subuid:2: start \"x\" is not a decimal number"),
            ("alice:-1:5\n", "start \"-1\" is not a decimal number"),
            ("alice:10:+5\n", "count \"+5\" is not a decimal number"),
            ("alice:10:\n", "count \"\" is not a decimal number"),
            ("alice:4294967296:5\n", "start 4294967296 does not fit a uid"),
            ("alice:10:0\n", "count is 0"),
            ("alice:4294967295:2\n", "2 uids from 4294967295 run past the last uid"),
            ("carol:100000:5\n", "/etc/subuid:1: no user named \"carol\""),
            (":100000:5\n", "the owner is empty"),
            ("alice:100000:65536\nbob:165535:10\n", "/etc/subuid:2: uids 165535-165544 of uid 1001 overlap uids 100000-165535 of uid 1000 (line 1)"),
        ];
        for (text, want) in cases {
            let err = format!("{:#}", parse(text).expect_err(text));
            assert!(err.contains(want), "{text:?}: got {err:?}, want {want:?}");
        }
    }

    #[test]
    fn a_changed_file_is_reread_and_a_bad_one_keeps_the_map_in_force() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("subuid");
        let owners = Owners::load(&path).unwrap();
        assert_eq!(owners.owner(100005), 100005, "no file: no ranges");
        std::fs::write(&path, "1000:100000:10\n").unwrap();
        owners.refresh();
        assert_eq!(owners.owner(100005), 1000);
        std::fs::write(&path, "1000:100000:10\nnonsense\n").unwrap();
        owners.refresh();
        assert_eq!(owners.owner(100005), 1000, "kept");
        std::fs::write(&path, "1001:100000:100\n").unwrap(); // another size: a coarse mtime alone may not move
        owners.refresh();
        assert_eq!(owners.owner(100005), 1001);
        std::fs::write(&path, "nonsense\n").unwrap();
        let err = format!("{:#}", Owners::load(&path).err().expect("refused at start"));
        assert!(err.contains("subuid:1: expected owner:start:count"), "{err}");
    }
}
