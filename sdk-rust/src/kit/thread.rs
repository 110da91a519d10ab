// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The calling thread's worker, owned by the kit and named by a token.
//!
//! A binding's handle object (a Python `Worker`, a JS `Worker`) may travel between threads and
//! outlive its registration; the [`Worker`] it stands for may not (it is `!Send`). So the kit keeps
//! the worker in a thread-local slot and hands out a token: an operation through a handle acts only
//! on the thread that registered it, and only while that registration is live; otherwise it fails
//! with `NOT_REGISTERED` naming the operation. Tokens are never reused in a process, so a handle of an
//! earlier registration of the thread never reaches a later one. The thread's exit drops the slot,
//! which shuts the worker down.

use std::{
    cell::RefCell,
    sync::atomic::{AtomicU64, Ordering},
};

use crate::{
    config::Config,
    error::{Error, Result},
    worker::Worker,
};

/// Hands out the token that ties a binding's handle to one registration of one thread.
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The thread's worker registered through the kit, with its token.
    static HELD: RefCell<Option<(u64, Worker)>> = const { RefCell::new(None) };
}

/// Register the calling thread with `config` and keep its worker; returns the registration's token.
/// `ALREADY_REGISTERED` (the core's check) if the thread holds a worker, through the kit or not;
/// nothing is kept on an error.
pub fn register(config: &Config) -> Result<u64> {
    let worker = config.register()?;
    let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
    HELD.with(|held| *held.borrow_mut() = Some((token, worker)));
    Ok(token)
}

/// Run `f` with the worker of registration `token`, if it is the calling thread's live one;
/// `NOT_REGISTERED` naming `operation` otherwise. `f` must not register or close through the kit.
pub fn with<T>(token: u64, operation: &'static str, f: impl FnOnce(&Worker) -> T) -> Result<T> {
    HELD.with(|held| match &*held.borrow() {
        Some((t, worker)) if *t == token => Ok(f(worker)),
        _ => Err(Error::NotRegistered { operation }),
    })
}

/// Whether registration `token` is the calling thread's live one.
pub fn holds(token: u64) -> bool {
    HELD.with(|held| matches!(&*held.borrow(), Some((t, _)) if *t == token))
}

/// The token of the calling thread's worker registered through the kit, or None.
pub fn current() -> Option<u64> {
    HELD.with(|held| held.borrow().as_ref().map(|(token, _)| *token))
}

/// Shut down registration `token` (QUIESCING, DEAD, then the slot is released). Returns whether it
/// was the thread's live registration: closing twice, or on another thread, does nothing (false).
/// An error is the core's shutdown error (the scheduler restarted meanwhile); the slot is given up.
pub fn close(token: u64) -> Result<bool> {
    let worker = HELD.with(|held| {
        let mut held = held.borrow_mut();
        match &*held {
            Some((t, _)) if *t == token => held.take().map(|(_, w)| w),
            _ => None,
        }
    });
    match worker {
        Some(worker) => worker.shutdown().map(|()| true),
        None => Ok(false),
    }
}

/// Shut down whatever the calling thread holds through the kit (an interpreter's exit: thread-local
/// destructors do not run for the main thread at process exit). Returns whether it held one.
pub fn close_current() -> Result<bool> {
    match current() {
        Some(token) => close(token),
        None => Ok(false),
    }
}

/// The slice a turn the rotation gives is timed by (spec/SCB.md §5.7): the region's `slice_ns` while
/// the thread's worker is registered with a live scheduler; 0 (no timed turn) while detached or
/// waiting for a scheduler. Read without looking for the scheduler's life (no system call).
pub fn turn_slice_ns() -> u64 {
    HELD.with(|held| {
        let held = held.borrow();
        let Some((_, worker)) = held.as_ref() else { return 0 };
        if worker.slot().is_none() || worker.is_waiting_for_scheduler() {
            return 0;
        }
        worker.region().map_or(0, |region| region.slice_ns())
    })
}
