// SPDX-License-Identifier: GPL-2.0-only
//! One scheduler instance per runtime directory.
//!
//! A lock file in the checked runtime directory, held with flock(2): the kernel releases it when the
//! holder exits, however it exits, so a killed instance never blocks the next start. It is opened with
//! O_NOFOLLOW relative to the directory (a planted symlink cannot redirect it: S1) and never truncated
//! before the lock is ours. The file is left in place (it only holds the holder's pid, for the refusal
//! message); unlinking it could let two instances lock different inodes of the same name.

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;

use anyhow::{bail, Context, Result};

use crate::rundir::RuntimeDir;

/// A held instance lock; released when dropped (or when the process dies).
pub struct InstanceLock {
    _file: File,
}

impl InstanceLock {
    /// Takes the lock `name` in `dir` or explains who holds it. `what` names the guarded resource.
    pub fn acquire(dir: &RuntimeDir, name: &str, what: &str) -> Result<InstanceLock> {
        let lock_path = dir.join(name);
        let mut file = dir.open_file(name, true).with_context(|| format!("cannot open lock file {}", lock_path.display()))?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let mut holder = String::new();
                let _ = Read::take(&mut file, 32).read_to_string(&mut holder);
                let holder = holder.trim();
                let who = if holder.is_empty() { String::new() } else { format!(" (pid {holder})") };
                bail!(
                    "another scx_morpheus is already running{who}: it holds the {what} lock {}; stop it first",
                    lock_path.display()
                );
            }
            return Err(err).with_context(|| format!("cannot lock {}", lock_path.display()));
        }
        // Ours now: record our pid for the next one's error message.
        file.set_len(0).and_then(|_| file.rewind()).and_then(|_| writeln!(file, "{}", std::process::id()))
            .with_context(|| format!("cannot write lock file {}", lock_path.display()))?;
        Ok(InstanceLock { _file: file })
    }
}
