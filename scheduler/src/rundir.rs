// SPDX-License-Identifier: GPL-2.0-only
//! The agent's runtime directory: where its socket, instance lock and journal live (spec/SCB.md §10).
//!
//! Whoever can write a directory controls what its names point to (S1, S10). So the directory and
//! every directory above it must belong to root or to the agent's user and be writable by nobody else
//! (a world-writable ancestor is accepted only with the sticky bit, like /tmp, and then the directory
//! itself must be ours). Files inside are opened relative to the directory's descriptor with
//! O_NOFOLLOW, so a name can never lead outside it. The systemd unit (dist/) creates it as
//! `RuntimeDirectory=morpheus`, mode 0755, owned by root.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

pub struct RuntimeDir {
    fd: OwnedFd,
    path: PathBuf,
}

fn cstr(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes()).with_context(|| format!("{} contains a NUL byte", path.display()))
}

fn euid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() }
}

/// Why `meta` (of `path`) is a directory other users could redirect, if it is.
fn unsafe_dir(path: &Path, meta: &std::fs::Metadata, must_be_ours: bool) -> Option<String> {
    let me = euid();
    let mode = meta.mode();
    if !meta.is_dir() {
        return Some(format!("{} is not a directory", path.display()));
    }
    if must_be_ours && meta.uid() != me {
        return Some(format!("{} belongs to uid {}, not to the agent's user (uid {me})", path.display(), meta.uid()));
    }
    if meta.uid() != 0 && meta.uid() != me {
        return Some(format!("{} belongs to uid {}; only root or the agent's user (uid {me}) may own it", path.display(), meta.uid()));
    }
    // An ancestor such as /tmp may be world-writable if sticky (nobody can rename our directory out
    // of it); the runtime directory itself is writable by its owner only.
    if mode & 0o022 != 0 && (must_be_ours || mode & 0o1000 == 0) {
        return Some(format!("{} is writable by its group or by others (mode {:o})", path.display(), mode & 0o7777));
    }
    None
}

impl RuntimeDir {
    /// Opens (creating it, mode 0755, if missing) the directory `path` and checks it and its ancestors.
    pub fn open(path: &Path) -> Result<RuntimeDir> {
        let path = if path.is_absolute() { path.to_owned() } else { std::env::current_dir()?.join(path) };
        for dir in path.ancestors().skip(1).filter(|d| !d.as_os_str().is_empty()) {
            // metadata follows system symlinks such as /var/run -> /run; their targets are checked.
            let meta = std::fs::metadata(dir).with_context(|| format!("cannot inspect {}", dir.display()))?;
            if let Some(why) = unsafe_dir(dir, &meta, false) {
                bail!("unsafe runtime directory path: {why}");
            }
        }
        let c = cstr(&path)?;
        // SAFETY: valid path; EEXIST is fine (checked below like any existing directory).
        if unsafe { libc::mkdir(c.as_ptr(), 0o755) } != 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EEXIST) {
                return Err(err).with_context(|| format!("cannot create the runtime directory {}", path.display()));
            }
        }
        // SAFETY: valid path; O_NOFOLLOW: a symlink planted in place of the directory is refused.
        let raw = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
        if raw < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::ELOOP) || err.raw_os_error() == Some(libc::ENOTDIR) {
                bail!("runtime directory {} is a symbolic link or not a directory; refusing to use it", path.display());
            }
            return Err(err).with_context(|| format!("cannot open the runtime directory {}", path.display()));
        }
        // SAFETY: we own the new descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let meta = File::from(fd.try_clone()?).metadata()?;
        if let Some(why) = unsafe_dir(&path, &meta, true) {
            bail!("unsafe runtime directory: {why}; create it as the agent's user, mode 0755 (systemd: RuntimeDirectory=morpheus)");
        }
        Ok(RuntimeDir { fd, path })
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Opens `name` inside the directory: never through a symlink, created 0600 if `create`.
    pub fn open_file(&self, name: &str, create: bool) -> io::Result<File> {
        let c = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let mut flags = libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY;
        if create {
            flags |= libc::O_CREAT;
        }
        // SAFETY: valid dirfd and name.
        let raw = unsafe { libc::openat(self.fd.as_raw_fd(), c.as_ptr(), flags, 0o600 as libc::c_uint) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor we own.
        let file = unsafe { File::from_raw_fd(raw) };
        let meta = file.metadata()?;
        if !meta.is_file() || meta.uid() != euid() {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("{name} is not a regular file of the agent's user")));
        }
        Ok(file)
    }

    /// A second handle on the same directory (the journal keeps one to replace its file).
    pub fn try_clone(&self) -> io::Result<RuntimeDir> {
        Ok(RuntimeDir { fd: self.fd.try_clone()?, path: self.path.clone() })
    }

    /// Renames `from` to `to` inside the directory, replacing `to` atomically, then syncs the
    /// directory so the rename survives a crash.
    pub fn replace(&self, from: &str, to: &str) -> io::Result<()> {
        let f = CString::new(from).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let t = CString::new(to).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: valid dirfds and names.
        if unsafe { libc::renameat(self.fd.as_raw_fd(), f.as_ptr(), self.fd.as_raw_fd(), t.as_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fsync of our directory descriptor.
        if unsafe { libc::fsync(self.fd.as_raw_fd()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn unlink(&self, name: &str) -> io::Result<()> {
        let c = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: valid dirfd and name.
        if unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Binds the registration socket `name`, mode 0660 with group `group` (or 0600 without one:
    /// only the agent's user may register). A stale socket of an earlier instance is replaced; a live
    /// one, or anything that is not a socket, is refused.
    pub fn bind_socket(&self, name: &str, group: Option<u32>) -> Result<UnixListener> {
        let path = self.join(name);
        let c = CString::new(name).context("socket name")?;
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid dirfd, name and out-pointer; AT_SYMLINK_NOFOLLOW inspects the name itself.
        if unsafe { libc::fstatat(self.fd.as_raw_fd(), c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } == 0 {
            if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
                bail!("--socket {}: the path exists and is not a socket; refusing to replace it", path.display());
            }
            if UnixStream::connect(&path).is_ok() {
                bail!("--socket {}: another process is accepting connections on it; stop it first", path.display());
            }
            log::info!("removing stale socket {} left by an earlier instance", path.display());
            self.unlink(name).with_context(|| format!("cannot remove stale socket {}", path.display()))?;
        }
        // Bound 0600 whatever the caller's umask (A15: under umask 000 the socket was 0777 until the
        // chmod below, and a connection accepted in that window stayed usable to a non-member).
        let listener = under_strict_umask(|| UnixListener::bind(&path))
            .with_context(|| format!("cannot bind registration socket {}", path.display()))?;
        let (mode, gid) = match group {
            Some(gid) => (0o660, gid),
            None => (0o600, u32::MAX),
        };
        // SAFETY: valid dirfd and name; the name is the socket we just bound in a directory only we write.
        unsafe {
            if gid != u32::MAX && libc::fchownat(self.fd.as_raw_fd(), c.as_ptr(), u32::MAX, gid, libc::AT_SYMLINK_NOFOLLOW) != 0 {
                return Err(io::Error::last_os_error()).with_context(|| format!("cannot give {} to group {gid}", path.display()));
            }
            if libc::fchmodat(self.fd.as_raw_fd(), c.as_ptr(), mode, 0) != 0 {
                return Err(io::Error::last_os_error()).with_context(|| format!("cannot chmod {}", path.display()));
            }
        }
        Ok(listener)
    }

    /// Removes the socket `name` (clean exit).
    pub fn remove_socket(&self, name: &str) {
        let _ = self.unlink(name);
    }
}

/// Runs `create` (a bind or a file creation) under umask 0o177, so what it creates has mode 0600 or
/// stricter from its first instant: no window before a later chmod/chown in which another user can
/// open or connect to it. The umask is the process's: a file created by another thread meanwhile
/// only gets stricter permissions.
pub fn under_strict_umask<T>(create: impl FnOnce() -> T) -> T {
    // SAFETY: umask has no preconditions.
    let old = unsafe { libc::umask(0o177) };
    let out = create();
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    out
}

/// The gid of group `name` (`--socket-group`), or a number.
pub fn group_id(name: &str) -> Result<u32> {
    if let Ok(gid) = name.parse::<u32>() {
        return Ok(gid);
    }
    let c = CString::new(name).context("group name")?;
    // SAFETY: getgrnam at start-up, before any other thread exists; the result is copied at once.
    let entry = unsafe { libc::getgrnam(c.as_ptr()) };
    if entry.is_null() {
        bail!("--socket-group {name}: no such group (create it with `groupadd {name}`)");
    }
    // SAFETY: non-null entry from getgrnam.
    Ok(unsafe { (*entry).gr_gid })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A15: a socket bound through `under_strict_umask` is 0600 at once, even under umask 000 (the
    /// mode is read before any chmod), and bind_socket binds through it.
    #[test]
    fn sockets_are_bound_private_under_a_permissive_umask() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        // SAFETY: umask has no preconditions; restored below.
        let old = unsafe { libc::umask(0) };
        let bound = under_strict_umask(|| UnixListener::bind(&path));
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        let _listener = bound.unwrap();
        let mode = std::fs::symlink_metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600, "bound with mode {mode:o}");
        let source = include_str!("rundir.rs");
        let code = &source[..source.find("#[cfg(test)]").expect("this test module")];
        assert!(code.contains("under_strict_umask(|| UnixListener::bind(&path))"), "bind_socket binds outside the strict umask");
        assert_eq!(code.matches("UnixListener::bind(").count(), 1, "a second bind in rundir.rs");
    }
}
