// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Morpheus runtime SDK: kernel-guided cooperative yielding.
//!
//! A scheduler (the `scx_morpheus` sched_ext program, or its simulation backend) watches registered
//! worker threads. When one overruns its slice it bumps `preempt_seq` in that worker's Shared Control
//! Block (SCB). The worker calls a **checkpoint** at safe points: one acquire load when nothing is
//! asked; when asked, it yields and acknowledges. **Critical sections** mark code that must not be
//! interrupted. Normative protocol: `spec/SCB.md`; layout: the `morpheus-abi` crate.
//!
//! ```no_run
//! // A thread-per-core work loop.
//! let worker = morpheus::Worker::register()?; // discover the region; detached if there is none
//! for job in 0..1_000_000u64 {
//!     let _ = job; // ... one unit of work ...
//!     if worker.checkpoint_sync() {
//!         std::thread::yield_now(); // asked to yield: do it now
//!     }
//! }
//! # Ok::<(), morpheus::Error>(())
//! ```
//!
//! In async code the free functions act on the calling thread's worker:
//!
//! ```no_run
//! async fn busy() {
//!     for _ in 0..1000 {
//!         // ... work ...
//!         morpheus::checkpoint!(); // yields to the executor only when the scheduler asked
//!     }
//! }
//! ```

#![deny(missing_docs)]
#![allow(clippy::missing_safety_doc)]

// spec/SCB.md §0.1: the region is read by other processes with single lock-free little-endian accesses.
#[cfg(not(all(target_endian = "little", target_has_atomic = "64", target_has_atomic = "32")))]
compile_error!(
    "UNSUPPORTED_PLATFORM: the Morpheus ABI needs a little-endian target with lock-free 64-bit atomics \
     (a lock-based fallback is not address-free and breaks across processes)"
);

pub mod agent;
mod config;
mod error;
pub mod kit;
mod lifeline;
#[doc(hidden)]
pub mod protocol;
#[doc(hidden)]
pub mod raw;
pub mod region;
mod registration;
mod slow_path;
mod sys;
#[cfg(feature = "testing")]
pub mod testing;
#[cfg(feature = "tokio")]
pub mod tokio;
mod worker;

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

pub use error::{Error, Result};
pub use morpheus_abi::{ErrorCode, PressureLevel, RuntimeKind, RuntimeMode, YieldReason};
pub use region::{Backing, DetachReason, Discovered, PressureSnapshot, Region};
pub use config::{validate_priority, Config, RegionSource, Registration};
pub use lifeline::{set_notice_hook, NoticeHook, NoticeLevel};
pub use registration::unregister_current_thread;
pub use slow_path::YieldCounts;
pub use worker::{with_current_worker, CriticalSection, Worker};

/// The calling thread's synchronous checkpoint: true means "yield now" (see
/// [`Worker::checkpoint_sync`]). A thread without a worker reads the detached SCB and never yields.
#[inline(always)]
pub fn checkpoint_sync() -> bool {
    // SAFETY: current_raw() is this thread's state.
    unsafe { raw::checkpoint_sync_raw(raw::current_raw()) }
}

/// The calling thread's asynchronous checkpoint. When the scheduler asked, the future yields to the
/// executor once (wakes itself and returns `Pending`) and acknowledges when polled again, so the
/// acknowledgement is written only after the task really yielded. Resolves to whether it yielded.
///
/// Executor-agnostic: the self-wake puts the task straight back in the run queue. Under tokio that
/// queue is served before the I/O and timer driver is polled, so tokio code should await
/// `morpheus::tokio::checkpoint()` (feature `tokio`), which yields through `tokio::task::yield_now`
/// and lets the driver run first; `checkpoint!()` picks that one when the feature is on.
#[inline(always)]
pub fn checkpoint() -> Checkpoint {
    Checkpoint { ticket: None }
}

/// Future returned by [`checkpoint`].
#[derive(Debug)]
#[must_use = "a checkpoint does nothing unless awaited"]
pub struct Checkpoint {
    ticket: Option<slow_path::Ticket>,
}

impl Future for Checkpoint {
    type Output = bool;

    #[inline(always)]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        match self.ticket.take() {
            None => match raw::prepare_current() {
                None => Poll::Ready(false),
                Some(ticket) => {
                    self.ticket = Some(ticket);
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            },
            Some(ticket) => {
                // The task did yield; a restart during the suspension only means nothing is
                // acknowledged (SCB.md §6), so the answer is still "yielded".
                raw::commit_current(ticket);
                Poll::Ready(true)
            }
        }
    }
}

/// Enter a critical section on the calling thread's worker until the guard drops.
#[inline(always)]
pub fn critical_section() -> CriticalSection<'static> {
    CriticalSection::enter()
}

/// Checkpoint macro.
///
/// * `checkpoint!()` inside an `async` block: one load; yields to the executor only when asked
///   (through [`checkpoint`]'s self-wake, or with the `tokio` feature through
///   `morpheus::tokio::checkpoint()`, which lets tokio's I/O and timer driver run first).
/// * `checkpoint!(sync)`: the calling thread's [`checkpoint_sync`] (a `bool`: true = yield now).
/// * `checkpoint!(worker)`: `worker.checkpoint_sync()`.
#[macro_export]
macro_rules! checkpoint {
    () => {
        $crate::__private::checkpoint_async().await
    };
    (sync) => {
        $crate::checkpoint_sync()
    };
    ($worker:expr) => {
        $worker.checkpoint_sync()
    };
}

#[doc(hidden)]
pub mod __private {
    /// What `checkpoint!()` awaits without the `tokio` feature: the fast path decides before any
    /// future is polled.
    #[cfg(not(feature = "tokio"))]
    #[inline(always)]
    pub fn checkpoint_async() -> super::Checkpoint {
        super::checkpoint()
    }

    /// What `checkpoint!()` awaits with the `tokio` feature: tokio's yield, which lets the runtime
    /// poll its I/O and timer driver before the task resumes (and wakes at once outside tokio).
    #[cfg(feature = "tokio")]
    #[inline(always)]
    pub fn checkpoint_async() -> impl core::future::Future<Output = bool> {
        super::tokio::checkpoint()
    }
}
