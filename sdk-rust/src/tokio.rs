// SPDX-License-Identifier: Apache-2.0 OR MIT
//! tokio integration (feature `tokio`): a checkpoint that yields through `tokio::task::yield_now`, and
//! hooks that register the threads that run tokio's scheduler, and only those.
//!
//! ```no_run
//! let runtime = morpheus::tokio::register_workers(
//!     tokio::runtime::Builder::new_multi_thread(),
//!     morpheus::Config::default(),
//!     |err| eprintln!("morpheus: {err}"),
//! )
//! .build()?;
//! runtime.block_on(async {
//!     loop {
//!         // ... work ...
//!         morpheus::checkpoint!(); // with this feature: the same yield as morpheus::tokio::checkpoint()
//!     }
//! });
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! Which threads hold a worker: a thread holds one while it runs tokio's scheduler, i.e. the
//! multi-thread runtime's worker threads and the thread that drives a current-thread runtime's
//! `block_on`. Those are the threads that run tasks, and tasks checkpoint. The blocking pool
//! (`spawn_blocking`, and `spawn_blocking`-style file and DNS work) runs closures that exist to run
//! long without yielding: a worker there would be hinted for nothing, would hold a slot per pool thread
//! (up to `max_blocking_threads`, 512 by default), and with Rust's default `escapable = true`
//! (spec/SCB.md §5.5) would be escalated in enforced mode. tokio calls `on_thread_start` for worker and
//! blocking-pool threads alike (a worker thread is a blocking-pool thread running the scheduler), so
//! that hook cannot tell them apart; `on_thread_park` and `on_thread_unpark` are called only by a
//! thread that runs the scheduler (tokio's blocking pool calls neither), so the registration happens
//! there.

use std::sync::Arc;

use crate::{raw, raw::register_current_thread, unregister_current_thread, Config, Error};

/// Checkpoint for tokio tasks: one load when nothing is asked; when asked, `tokio::task::yield_now()`
/// (which defers the task's wake-up until the runtime has polled its I/O and timer driver, so the
/// events that arrived while it ran are served first), then the acknowledgement. Resolves to whether
/// it yielded. With the `tokio` feature this is also what `morpheus::checkpoint!()` awaits; outside a
/// tokio runtime `yield_now` wakes the task at once, as [`crate::checkpoint`] does.
#[inline(always)]
pub async fn checkpoint() -> bool {
    match raw::prepare_current() {
        None => false,
        Some(ticket) => {
            ::tokio::task::yield_now().await;
            // It yielded, whether or not a restart meanwhile leaves nothing to acknowledge (§6).
            raw::commit_current(ticket);
            true
        }
    }
}

/// Register the calling thread, falling back to a detached worker (and reporting the error) when
/// registration fails, so that a runtime always starts.
pub fn register_thread_or_detach(config: &Config, on_error: &(dyn Fn(Error) + Send + Sync)) {
    if let Err(err) = register_current_thread(config) {
        if !matches!(err, Error::AlreadyRegistered { .. }) {
            let _ = register_current_thread(&config.clone().detached());
        }
        on_error(err);
    }
}

/// Register the calling thread unless it already holds a worker (one thread-local load when it does,
/// so the park hooks cost nothing after the first park). A failed registration leaves a detached
/// worker, so it is reported once and not retried at every park.
fn register_scheduler_thread(config: &Config, on_error: &(dyn Fn(Error) + Send + Sync)) {
    // SAFETY: current_raw() is this thread's state.
    if unsafe { (*raw::current_raw()).inner.is_null() } {
        register_thread_or_detach(config, on_error);
    }
}

/// Install hooks that register every thread running the runtime's scheduler (multi-thread worker
/// threads, and the thread that drives a current-thread runtime's `block_on`) and never a
/// blocking-pool thread, so a `spawn_blocking` job is neither hinted nor escalated (module docs).
///
/// * A scheduler thread registers (with `config`) at its first `on_thread_park` or
///   `on_thread_unpark`, i.e. the first time it runs out of tasks or wakes for new ones. A worker
///   thread that finds tasks waiting when it starts runs them unregistered (its checkpoints read the
///   detached SCB and never yield) until it first parks.
/// * `on_thread_stop` releases the slot of a pool thread that held one. The thread that called a
///   current-thread runtime's `block_on` belongs to the caller: it keeps its worker after the runtime
///   is dropped, until it exits or calls [`crate::unregister_current_thread`]. A thread that already
///   holds a worker (registered by the caller) is left as it is.
/// * `tokio::task::block_in_place` keeps the calling worker thread's registration while the closure
///   runs, and tokio then returns that thread to the blocking pool; call
///   [`crate::unregister_current_thread`] before `block_in_place` (the thread registers again at its
///   next park if it runs the scheduler again).
/// * Registration errors go to `on_error` once per thread and leave the thread detached.
/// * tokio keeps one callback per hook: setting `on_thread_park`, `on_thread_unpark` or
///   `on_thread_stop` on the builder afterwards replaces these.
pub fn register_workers(
    mut builder: ::tokio::runtime::Builder,
    config: Config,
    on_error: impl Fn(Error) + Send + Sync + 'static,
) -> ::tokio::runtime::Builder {
    let on_error: Arc<dyn Fn(Error) + Send + Sync> = Arc::new(on_error);
    let config = Arc::new(config);
    let (park_config, park_error) = (config.clone(), on_error.clone());
    builder
        .on_thread_park(move || register_scheduler_thread(&park_config, &*park_error))
        .on_thread_unpark(move || register_scheduler_thread(&config, &*on_error))
        .on_thread_stop(|| {
            let _ = unregister_current_thread();
        });
    builder
}
