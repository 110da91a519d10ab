// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The JNI backend of the Morpheus Java SDK: the native methods of `dev.morpheus.JniNative`, each a thin
//! wrapper over the `morpheus` crate's safe API acting on the calling thread's worker.
//!
//! The Java side calls these only from the platform thread that registered (it refuses virtual
//! threads), because the worker lives in this library's thread-local storage. Registration, the slow
//! path of the checkpoint, critical sections and the setters are here; the checkpoint's fast path is
//! pure Java (an acquire load through a direct `ByteBuffer` over the SCB, see `scb`).
//!
//! Conventions as libmorpheus: an `int` result is 0 (or a documented non-negative value) or a negated
//! `error_code`, and `lastError()` then describes the failure.

use std::{
    cell::RefCell,
    ffi::OsStr,
    os::unix::ffi::OsStrExt,
    path::PathBuf,
};

use jni::{
    errors::ThrowRuntimeExAndDefault,
    objects::{JByteArray, JByteBuffer, JClass, JString},
    sys::{jboolean, jint, jlong},
    EnvUnowned,
};
use morpheus::{Config, Discovered, Error, Region, RuntimeKind, Worker};
use morpheus_abi::ErrorCode;

thread_local! {
    static WORKER: RefCell<Option<Worker>> = const { RefCell::new(None) };
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

fn fail_with(code: ErrorCode, text: String) -> jint {
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
    -(code.raw() as jint)
}

fn fail(err: Error) -> jint {
    fail_with(err.code(), err.to_string())
}

fn status(result: Result<(), Error>) -> jint {
    result.map_or_else(fail, |()| 0)
}

/// Run `f` on the calling thread's worker; `NOT_REGISTERED` if it holds none.
fn with_worker(operation: &str, f: impl FnOnce(&Worker) -> jint) -> jint {
    WORKER.with(|w| match w.borrow().as_ref() {
        Some(worker) => f(worker),
        None => fail_with(ErrorCode::NotRegistered, format!("{operation}: the calling thread holds no worker")),
    })
}

fn path(bytes: Vec<u8>) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(&bytes))
}

/// Register the calling thread. `region`: null discovers (spec/SCB.md §1.2), empty is detached,
/// otherwise a path; `socket`: null for `MORPHEUS_SOCKET` or the default; `direct_slot` < 0 registers
/// through the agent; `escapable` -1 takes Java's default (false), 0 or 1 sets it.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_register<'caller>(
    mut env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    region: JByteArray<'caller>,
    socket: JByteArray<'caller>,
    direct_slot: jint,
    escapable: jint,
    priority: jint,
) -> jint {
    env.with_env(|env| -> Result<jint, jni::errors::Error> {
        if WORKER.with(|w| w.borrow().is_some()) {
            return Ok(fail(Error::AlreadyRegistered { slot: slot_of_current() }));
        }
        let mut config = Config::default().runtime_kind(RuntimeKind::Java).priority(priority);
        if escapable >= 0 {
            config = config.escapable(escapable != 0);
        }
        if !region.is_null() {
            let region = env.convert_byte_array(&region)?;
            config = if region.is_empty() { config.detached() } else { config.region_path(path(region)) };
        }
        if !socket.is_null() {
            config = config.agent_socket(path(env.convert_byte_array(&socket)?));
        }
        if direct_slot >= 0 {
            config = config.direct_slot(direct_slot as u32);
        }
        Ok(match config.register() {
            Ok(worker) => {
                WORKER.with(|w| *w.borrow_mut() = Some(worker));
                0
            }
            Err(err) => fail(err),
        })
    })
    .resolve::<ThrowRuntimeExAndDefault>()
}

fn slot_of_current() -> Option<u32> {
    WORKER.with(|w| w.borrow().as_ref().and_then(Worker::slot))
}

/// Validate a region without registering (spec/SCB.md §1.3, writing nothing): 0 for a region a worker
/// can attach to, 1 for none (`region` empty, or discovery found none), or the first failed check.
/// `region` null discovers as registration does.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_checkRegion<'caller>(
    mut env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    region: JByteArray<'caller>,
) -> jint {
    env.with_env(|env| -> Result<jint, jni::errors::Error> {
        let checked = if region.is_null() {
            morpheus::region::discover().map(|found| match found {
                Discovered::Attached(_) => 0,
                Discovered::Detached(_) => 1,
            })
        } else {
            let region = env.convert_byte_array(&region)?;
            if region.is_empty() {
                return Ok(1);
            }
            // The mapping is dropped here: a check keeps nothing mapped.
            Region::open(path(region)).map(|_| 0)
        };
        Ok(checked.unwrap_or_else(fail))
    })
    .resolve::<ThrowRuntimeExAndDefault>()
}

/// Shut the calling thread's worker down (QUIESCING, DEAD, the slot released).
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_unregister(_env: *mut jni::sys::JNIEnv, _class: jni::sys::jclass) -> jint {
    match WORKER.with(|w| w.borrow_mut().take()) {
        Some(worker) => status(worker.shutdown()),
        None => fail_with(ErrorCode::NotRegistered, "unregister: the calling thread holds no worker".into()),
    }
}

/// A direct buffer over the u64 the calling thread's fast-path state (`RawWorker`, the core's) names as
/// `preempt_seq`: the slot's field while attached, a static zero when detached, or whatever the core
/// points a waiting worker at (a lost worker waits on a wake sequence, SCB.md §6.1). The Java fast path
/// reads it as the C inline checkpoint does, so it follows every state the core puts the worker in;
/// the memory outlives the buffer's use because Java reads it only from the owning thread and fetches a
/// new buffer whenever the slow path reports that the pointer moved.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_preemptSeq<'caller>(
    mut env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
) -> JByteBuffer<'caller> {
    env.with_env(|env| -> Result<JByteBuffer<'caller>, jni::errors::Error> {
        // SAFETY: the calling thread's own state; preempt_seq always names 8 readable bytes.
        let ptr = unsafe { (*morpheus::raw::current_raw()).preempt_seq } as *mut u8;
        // SAFETY: see above; Java only reads through the buffer.
        unsafe { env.new_direct_byte_buffer(ptr, std::mem::size_of::<u64>()) }
    })
    .resolve::<ThrowRuntimeExAndDefault>()
}

/// The value the Java fast path compares `preempt_seq` with: the core's `cached_ack` (the acknowledged
/// sequence, `FORCE_SLOW_PATH` in the modes that always take the slow path, 0 when detached).
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_cachedAck(_env: *mut jni::sys::JNIEnv, _class: jni::sys::jclass) -> jlong {
    // SAFETY: the calling thread's own state.
    unsafe { (*morpheus::raw::current_raw()).cached_ack as jlong }
}

/// The checkpoint's slow path: bit 0 = yield now (acknowledged), bit 1 = the worker is (now) detached,
/// bit 2 = the core pointed `preempt_seq` elsewhere (detached, lost, waiting, registered again): the Java
/// side fetches a new buffer (`preemptSeq`).
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_checkpointSlow(_env: *mut jni::sys::JNIEnv, _class: jni::sys::jclass) -> jint {
    let raw = morpheus::raw::current_raw();
    // SAFETY: the calling thread's own state.
    let before = unsafe { (*raw).preempt_seq };
    let result = WORKER.with(|w| match w.borrow().as_ref() {
        Some(worker) => worker.checkpoint_sync() as jint | if worker.is_attached() { 0 } else { 2 },
        None => 2,
    });
    // SAFETY: as above (the slow path may have replaced the thread's state).
    let moved = unsafe { (*morpheus::raw::current_raw()).preempt_seq } != before;
    result | if moved { 4 } else { 0 }
}

/// Enter a critical section on the calling thread with or without a worker (the depth is the
/// thread's, SCB.md §5.3); returns the new depth.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_threadCriticalEnter(_env: *mut jni::sys::JNIEnv, _class: jni::sys::jclass) -> jint {
    let raw = morpheus::raw::current_raw();
    // SAFETY: the calling thread's own state.
    unsafe {
        morpheus::raw::critical_enter_raw(raw);
        (*raw).critical_depth as jint
    }
}

/// Exit a thread-level critical section; the new depth, or `-NOT_IN_CRITICAL` (writing nothing).
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_threadCriticalExit(_env: *mut jni::sys::JNIEnv, _class: jni::sys::jclass) -> jint {
    let raw = morpheus::raw::current_raw();
    // SAFETY: the calling thread's own state.
    unsafe {
        match morpheus::raw::critical_exit_raw(raw) {
            Ok(()) => (*raw).critical_depth as jint,
            Err(err) => fail(err),
        }
    }
}

/// The calling thread's critical depth, worker or not.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_threadCriticalDepth(_env: *mut jni::sys::JNIEnv, _class: jni::sys::jclass) -> jint {
    // SAFETY: the calling thread's own state.
    unsafe { (*morpheus::raw::current_raw()).critical_depth as jint }
}

/// Enter a critical section; returns the new depth.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_criticalEnter(_env: *mut jni::sys::JNIEnv, _class: jni::sys::jclass) -> jint {
    with_worker("critical enter", |worker| {
        worker.critical_enter();
        worker.critical_depth() as jint
    })
}

/// Exit a critical section; returns the new depth, or `-NOT_IN_CRITICAL` (writing nothing).
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_criticalExit(_env: *mut jni::sys::JNIEnv, _class: jni::sys::jclass) -> jint {
    with_worker("critical exit", |worker| match worker.critical_exit() {
        Ok(()) => worker.critical_depth() as jint,
        Err(err) => fail(err),
    })
}

/// The calling thread's critical nesting depth.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_criticalDepth(_env: *mut jni::sys::JNIEnv, _class: jni::sys::jclass) -> jint {
    with_worker("critical depth", |worker| worker.critical_depth() as jint)
}

#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_setEscapable(
    _env: *mut jni::sys::JNIEnv,
    _class: jni::sys::jclass,
    escapable: jboolean,
) -> jint {
    with_worker("set_escapable", |worker| status(worker.set_escapable(escapable)))
}

/// 1 or 0: whether the worker accepts escalation, as the SDK believes it.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_escapable(_env: *mut jni::sys::JNIEnv, _class: jni::sys::jclass) -> jint {
    with_worker("escapable", |worker| worker.escapable() as jint)
}

#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_setPriority(
    _env: *mut jni::sys::JNIEnv,
    _class: jni::sys::jclass,
    priority: jint,
) -> jint {
    with_worker("set_priority", |worker| status(worker.set_priority(priority)))
}

/// The advisory priority (the caller has a worker; see `criticalDepth` for how it checks).
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_priority(_env: *mut jni::sys::JNIEnv, _class: jni::sys::jclass) -> jint {
    WORKER.with(|w| w.borrow().as_ref().map_or(0, Worker::priority))
}

/// Slot index, or -1 when detached.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_slot(_env: *mut jni::sys::JNIEnv, _class: jni::sys::jclass) -> jlong {
    slot_of_current().map_or(-1, jlong::from)
}

/// 0 while attached to a live region, else `-DETACHED`, `-GENERATION_CHANGED` or `-NOT_REGISTERED`.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_status(_env: *mut jni::sys::JNIEnv, _class: jni::sys::jclass) -> jint {
    with_worker("status", |worker| status(worker.status()))
}

/// Yields performed for any reason.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_yieldCount(_env: *mut jni::sys::JNIEnv, _class: jni::sys::jclass) -> jlong {
    WORKER.with(|w| w.borrow().as_ref().map_or(0, |w| w.yield_counts().total() as jlong))
}

/// The worker's `runtime_mode` value.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_runtimeMode(_env: *mut jni::sys::JNIEnv, _class: jni::sys::jclass) -> jint {
    WORKER.with(|w| w.borrow().as_ref().map_or(0, |w| w.runtime_mode().raw() as jint))
}

/// The calling thread's last failure, naming what was expected and what was found.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_lastError<'caller>(
    mut env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
) -> JString<'caller> {
    env.with_env(|env| -> Result<JString<'caller>, jni::errors::Error> {
        let text = LAST_ERROR.with(|e| e.borrow().clone());
        JString::from_str(env, text)
    })
    .resolve::<ThrowRuntimeExAndDefault>()
}

/// Does nothing: the empty JNI call the benchmarks compare the checkpoint with.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_nop(_env: *mut jni::sys::JNIEnv, _class: jni::sys::jclass) {}
