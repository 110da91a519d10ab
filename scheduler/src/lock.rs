// SPDX-License-Identifier: GPL-2.0-only
//! One scheduler instance per socket and per region.
//!
//! A lock file beside the path, held with flock(2): the kernel releases it when the holder exits,
//! however it exits, so a killed instance never blocks the next start. The file is left in place (it
//! only holds the holder's pid, for the refusal message); unlinking it could let two instances lock
//! different inodes of the same name.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// `<path>.lock`.
pub fn lock_path_for(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".lock");
    path.with_file_name(name)
}

/// A held instance lock; released when dropped (or when the process dies).
pub struct InstanceLock {
    _file: File,
}

impl InstanceLock {
    /// Takes the lock at `lock_path` or explains who holds it. `what` names the guarded resource.
    pub fn acquire(lock_path: &Path, what: &str) -> Result<InstanceLock> {
        if let Some(dir) = lock_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).with_context(|| format!("cannot create directory {}", dir.display()))?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(lock_path)
            .with_context(|| format!("cannot open lock file {}", lock_path.display()))?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
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
