// SPDX-License-Identifier: Apache-2.0 OR MIT
//! tokio integration (feature `tokio`): a checkpoint that yields through `tokio::task::yield_now`, and
//! hooks that register tokio's worker threads.
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
//!         morpheus::tokio::checkpoint().await;
//!     }
//! });
//! # Ok::<(), std::io::Error>(())
//! ```

use std::sync::Arc;

use crate::{raw, raw::register_current_thread, unregister_current_thread, Config, Error};

/// Checkpoint for tokio tasks: one load when nothing is asked; when asked, `tokio::task::yield_now()`
/// (which lets the driver and other tasks run before this one resumes), then the acknowledgement.
/// Resolves to whether it yielded.
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

/// Install `on_thread_start` / `on_thread_stop` hooks that register every thread of the runtime
/// (tokio calls them for worker and blocking-pool threads alike) and release the slot when the
/// thread stops. Registration errors go to `on_error` and leave the thread detached.
pub fn register_workers(
    mut builder: ::tokio::runtime::Builder,
    config: Config,
    on_error: impl Fn(Error) + Send + Sync + 'static,
) -> ::tokio::runtime::Builder {
    let on_error: Arc<dyn Fn(Error) + Send + Sync> = Arc::new(on_error);
    let config = Arc::new(config);
    builder
        .on_thread_start(move || register_thread_or_detach(&config, &*on_error))
        .on_thread_stop(|| {
            let _ = unregister_current_thread();
        });
    builder
}
