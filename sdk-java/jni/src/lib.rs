// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The JNI backend of the Morpheus Java SDK: the native methods of `dev.morpheus.JniNative`.
//!
//! Nothing of the protocol is written here. Registration, checkpoints and critical sections are the
//! core's; the thread's worker (held by the kit and named by a token), the option rules and the
//! fast-path handshake are the binding kit's (`morpheus::kit`). This crate translates types: Java's
//! ints, longs and byte arrays to the kit's, and the kit's results back.
//!
//! The checkpoint's fast path stays inline in Java: one acquire load through a direct `ByteBuffer`
//! over the word the kit's [`FastPath`] names, compared with [`FastPath::expected`] (one load in each
//! language is the point of the fast path; a JNI call costs several times more, sdk-java/BENCHMARKS.md).
//! When the kit names no word (`AlwaysSlow`, `Detached`), Java loads a zero word of its own.
//!
//! Conventions as libmorpheus: an `int` result is 0 (or a documented non-negative value) or a negated
//! `error_code`, and `lastError()` then describes the failure. A worker is named by the token
//! `register` returned; the Java side calls only from the platform thread that registered it.

use std::{cell::RefCell, ffi::OsStr, os::unix::ffi::OsStrExt, path::PathBuf};

use jni::{
    errors::ThrowRuntimeExAndDefault,
    objects::{JByteArray, JByteBuffer, JClass, JString},
    sys::{jboolean, jint, jlong},
    EnvUnowned,
};
use morpheus::{
    kit::{
        self,
        options::{Options, RegionChoice},
        thread, FastPath,
    },
    Discovered, Error, ErrorCode, Region, RuntimeKind, Worker,
};

type Env = *mut jni::sys::JNIEnv;
type Class = jni::sys::jclass;

thread_local! {
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

/// `f` on registration `token`'s worker (the calling thread's live one), else `-NOT_REGISTERED`
/// naming `operation`.
fn with_worker(token: jlong, operation: &'static str, f: impl FnOnce(&Worker) -> jint) -> jint {
    thread::with(token as u64, operation, f).unwrap_or_else(fail)
}

fn path(bytes: Vec<u8>) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(&bytes))
}

/// Register the calling thread; returns the registration's token (> 0) or a negated error. `region`:
/// null discovers (spec/SCB.md §1.2), empty is detached, otherwise a path; `socket`: null for
/// `MORPHEUS_SOCKET` or the default; `direct_slot` < 0 registers through the agent; `escapable` -1
/// takes the ABI's default for Java (false), 0 or 1 sets it. The kit's option rules apply: a direct
/// slot with a socket is `-INVALID_ARGUMENT` naming both.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_register<'caller>(
    mut env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
    region: JByteArray<'caller>,
    socket: JByteArray<'caller>,
    direct_slot: jint,
    escapable: jint,
    priority: jint,
) -> jlong {
    env.with_env(|env| -> Result<jlong, jni::errors::Error> {
        let region = if region.is_null() { None } else { Some(env.convert_byte_array(&region)?) };
        let socket = if socket.is_null() { None } else { Some(path(env.convert_byte_array(&socket)?)) };
        let options = Options {
            detached: region.as_ref().is_some_and(Vec::is_empty),
            region: region.filter(|r| !r.is_empty()).map(|r| RegionChoice::Path(path(r))),
            slot: (direct_slot >= 0).then_some(i64::from(direct_slot)),
            socket,
            escapable: (escapable >= 0).then_some(escapable != 0),
            priority: Some(i64::from(priority)),
        };
        let registered = match options.config(RuntimeKind::Java) {
            Ok(config) => thread::register(&config).map_err(fail),
            Err(err) => Err(fail_with(err.code(), format!("register: {err}"))),
        };
        Ok(registered.map_or_else(jlong::from, |token| token as jlong))
    })
    .resolve::<ThrowRuntimeExAndDefault>()
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

/// Shut registration `token` down (QUIESCING, DEAD, the slot released).
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_unregister(_env: Env, _class: Class, token: jlong) -> jint {
    match thread::close(token as u64) {
        Ok(true) => 0,
        Ok(false) => fail(Error::NotRegistered { operation: "unregister" }),
        Err(err) => fail(err),
    }
}

/// The token of the calling thread's worker (the kit's thread slot, whoever registered it through this
/// library), or 0 when the thread holds none: the one registry `Morpheus.current()` asks.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_currentToken(_env: Env, _class: Class) -> jlong {
    thread::current().map_or(0, |token| token as jlong)
}

/// A direct buffer over the word the calling thread's fast path loads ([`FastPath::word`]: the slot's
/// `preempt_seq`, or the wake word while the worker waits for a scheduler, SCB.md §6.1), or null when
/// it loads none of the core's (Java then loads its own zero word). Valid until the slow path reports
/// that the word moved; Java reads it only from the owning thread.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_fastPathWord<'caller>(
    mut env: EnvUnowned<'caller>,
    _class: JClass<'caller>,
) -> JByteBuffer<'caller> {
    env.with_env(|env| -> Result<JByteBuffer<'caller>, jni::errors::Error> {
        match FastPath::current().word() {
            // SAFETY: the word is 8 readable bytes until the thread's next slow path; Java only reads.
            Some(word) => unsafe { env.new_direct_byte_buffer(word as *mut u8, std::mem::size_of::<u64>()) },
            None => Ok(JByteBuffer::null()),
        }
    })
    .resolve::<ThrowRuntimeExAndDefault>()
}

/// The value the Java fast path compares its load with ([`FastPath::expected`]: the acknowledged
/// sequence; 2^64 - 1 in the modes that always take the slow path; 0 when detached).
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_fastPathExpected(_env: Env, _class: Class) -> jlong {
    FastPath::current().expected() as jlong
}

/// The checkpoint's slow path ([`kit::checkpoint_slow`]), its [`kit::SlowPath`] as two flags: 1 = yield
/// now (acknowledged), 2 = the fast path's word moved (Java takes a new `fastPathWord`). Java always
/// takes the new `fastPathExpected`.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_checkpointSlow(_env: Env, _class: Class) -> jint {
    let slow = kit::checkpoint_slow();
    jint::from(slow.yield_now) | if slow.word_moved { 2 } else { 0 }
}

/// Enter a critical section on the calling thread with or without a worker (the depth is the
/// thread's, SCB.md §5.3); returns the new depth.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_threadCriticalEnter(_env: Env, _class: Class) -> jint {
    kit::critical_enter() as jint
}

/// Exit a thread-level critical section; the new depth, or `-NOT_IN_CRITICAL` (writing nothing).
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_threadCriticalExit(_env: Env, _class: Class) -> jint {
    kit::critical_exit().map_or_else(fail, |depth| depth as jint)
}

/// The calling thread's critical depth, worker or not.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_threadCriticalDepth(_env: Env, _class: Class) -> jint {
    kit::critical_depth() as jint
}

/// Enter a critical section; returns the new depth.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_criticalEnter(_env: Env, _class: Class, token: jlong) -> jint {
    with_worker(token, "critical enter", |worker| {
        worker.critical_enter();
        worker.critical_depth() as jint
    })
}

/// Exit a critical section; returns the new depth, or `-NOT_IN_CRITICAL` (writing nothing).
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_criticalExit(_env: Env, _class: Class, token: jlong) -> jint {
    with_worker(token, "critical exit", |worker| match worker.critical_exit() {
        Ok(()) => worker.critical_depth() as jint,
        Err(err) => fail(err),
    })
}

/// The calling thread's critical nesting depth.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_criticalDepth(_env: Env, _class: Class, token: jlong) -> jint {
    with_worker(token, "critical depth", |worker| worker.critical_depth() as jint)
}

#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_setEscapable(_env: Env, _class: Class, token: jlong, escapable: jboolean) -> jint {
    with_worker(token, "set_escapable", |worker| status(worker.set_escapable(escapable)))
}

/// 1 or 0: whether the worker accepts escalation, as the SDK believes it.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_escapable(_env: Env, _class: Class, token: jlong) -> jint {
    with_worker(token, "escapable", |worker| worker.escapable() as jint)
}

#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_setPriority(_env: Env, _class: Class, token: jlong, priority: jint) -> jint {
    with_worker(token, "set_priority", |worker| status(worker.set_priority(priority)))
}

/// The advisory priority (0 without the registration; Java checks the owner first).
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_priority(_env: Env, _class: Class, token: jlong) -> jint {
    thread::with(token as u64, "priority", Worker::priority).unwrap_or(0)
}

/// Slot index, or -1 when detached.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_slot(_env: Env, _class: Class, token: jlong) -> jlong {
    thread::with(token as u64, "slot", Worker::slot).ok().flatten().map_or(-1, jlong::from)
}

/// 0 while attached to a live region, else `-DETACHED`, `-GENERATION_CHANGED` or `-NOT_REGISTERED`.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_status(_env: Env, _class: Class, token: jlong) -> jint {
    with_worker(token, "status", |worker| status(worker.status()))
}

/// Yields performed for any reason.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_yieldCount(_env: Env, _class: Class, token: jlong) -> jlong {
    thread::with(token as u64, "yield_count", |w| w.yield_counts().total() as jlong).unwrap_or(0)
}

/// The worker's `runtime_mode` value.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_runtimeMode(_env: Env, _class: Class, token: jlong) -> jint {
    thread::with(token as u64, "runtime_mode", |w| w.runtime_mode().raw() as jint).unwrap_or(0)
}

/// Record a yield the thread made on its own (spec/SCB.md §5.8): 0, also for a detached or lost
/// worker (which writes nothing), or a negated error.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_recordExplicitYield(_env: Env, _class: Class, token: jlong) -> jint {
    with_worker(token, "record_explicit_yield", |worker| status(worker.record_explicit_yield()))
}

/// Tests only: the calling thread's mode clock (`kit::set_mode_clock`); negative: CLOCK_MONOTONIC again.
#[no_mangle]
pub extern "system" fn Java_dev_morpheus_JniNative_setModeClock(_env: Env, _class: Class, nanos: jlong) {
    kit::set_mode_clock(u64::try_from(nanos).ok());
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
pub extern "system" fn Java_dev_morpheus_JniNative_nop(_env: Env, _class: Class) {}
