// SPDX-License-Identifier: GPL-2.0-only
//! cgroup v2 `cpu.max` caps for CGROUP_THROTTLE, shared by both backends: where a worker's cgroup is,
//! and a reference-counted cap per cgroup that restores the cgroup's own value when its last escalated
//! worker is released.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};

use crate::identity::Thread;
use crate::journal::Journal;

/// `cpu.max` of a capped cgroup: 10% of one CPU, enough to reach the next checkpoint, too little to
/// starve anyone.
pub const THROTTLE_CPU_MAX: &str = "10000 100000";

/// Where cgroup v2 is mounted (from /proc/self/mountinfo), if it is.
pub fn cgroup2_root() -> Option<PathBuf> {
    let mounts = fs::read_to_string("/proc/self/mountinfo").ok()?;
    mounts.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        (right.split_whitespace().next() == Some("cgroup2")).then(|| left.split_whitespace().nth(4).map(PathBuf::from))?
    })
}

/// The worker's cgroup v2 directory under `root`, from its `cgroup` file read through the thread's own
/// /proc directory (the registered thread, never whoever carries its id now). The root cgroup is
/// refused: it has no `cpu.max`, and capping it would cap everyone.
pub fn cgroup_dir_of(root: &Path, thread: &Thread) -> Result<PathBuf> {
    let tid = thread.tid;
    let text = thread.read("cgroup").with_context(|| format!("cannot read the cgroup of thread {tid} (has it exited?)"))?;
    let rel = text
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or_else(|| anyhow!("thread {tid} has no cgroup v2 membership"))?;
    if rel == "/" || rel.is_empty() {
        bail!("thread {tid} is in the root cgroup, which has no cpu.max; put the worker's process in a child cgroup");
    }
    if rel.split('/').any(|c| c == "..") {
        bail!("thread {tid}: its cgroup path {rel:?} leaves the hierarchy");
    }
    Ok(root.join(rel.trim_start_matches('/')))
}

/// One capped cgroup: its own value, and how many escalated workers hold the cap.
struct Cap {
    previous: String,
    holders: u32,
}

/// The caps in force, by cgroup directory.
#[derive(Default)]
pub struct Caps {
    by_dir: HashMap<PathBuf, Cap>,
    /// Where each cap is recorded before it is written (S7), if anywhere.
    journal: Option<Arc<Journal>>,
}

impl Caps {
    pub fn with_journal(journal: Option<Arc<Journal>>) -> Caps {
        Caps { by_dir: HashMap::new(), journal }
    }

    /// Caps `dir` for one more worker (writing `cpu.max` only for the first).
    pub fn cap(&mut self, dir: &Path) -> Result<()> {
        if let Some(cap) = self.by_dir.get_mut(dir) {
            cap.holders += 1;
            return Ok(());
        }
        let file = dir.join("cpu.max");
        let previous = fs::read_to_string(&file)
            .with_context(|| format!("cannot read {} (is the cpu controller enabled?)", file.display()))?;
        if let Some(journal) = &self.journal {
            journal.capping(dir, previous.trim())?;
        }
        if let Err(e) = fs::write(&file, THROTTLE_CPU_MAX) {
            if let Some(journal) = &self.journal {
                journal.uncapped(dir); // recorded, but never in force
            }
            return Err(e).with_context(|| format!("cannot write {}", file.display()));
        }
        self.by_dir.insert(dir.to_owned(), Cap { previous: previous.trim().to_owned(), holders: 1 });
        Ok(())
    }

    /// Releases one worker's hold on `dir`'s cap; the last one restores the cgroup's own value.
    /// Releasing a cgroup that is not capped is an error.
    pub fn release(&mut self, dir: &Path) -> Result<()> {
        let cap = self.by_dir.get_mut(dir).ok_or_else(|| anyhow!("{} is not capped", dir.display()))?;
        cap.holders -= 1;
        if cap.holders > 0 {
            return Ok(());
        }
        let cap = self.by_dir.remove(dir).expect("present");
        let file = dir.join("cpu.max");
        fs::write(&file, &cap.previous).with_context(|| format!("cannot restore {} to '{}'", file.display(), cap.previous))?;
        if let Some(journal) = &self.journal {
            journal.uncapped(dir);
        }
        Ok(())
    }
}
