// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Conformance agent for sdk-rust (the `morpheus` crate).
//!
//! Speaks the agent protocol of spec/CONFORMANCE.md on stdin/stdout: one JSON request per line in,
//! one JSON reply per line out. Every operation runs on the main thread, which is the worker thread
//! (the SDK's worker state is thread-local). Async checkpoints are polled by a hand-written executor so
//! that the harness can inspect the SCB while the task is suspended.
//!
//! MORPHEUS_CONFORMANCE_BREAK=ack_before_yield breaks one rule on purpose, in this agent only (the SDK
//! is untouched): its async checkpoint acknowledges first (through the synchronous checkpoint) and
//! suspends afterwards. It exists to show which matrix cells a broken SDK turns red.

mod json;

use std::{
    future::Future,
    io::{self, BufRead, Write},
    pin::pin,
    sync::Arc,
    task::{Context, Poll, Waker},
    time::{Duration, Instant},
};

use json::{Obj, Request, Value};
use morpheus::{region, Config, Discovered, Error, Region, RuntimeKind, Worker};

/// What `attach` chose: a region, or detached mode.
enum Attachment {
    Region(Arc<Region>),
    Detached,
}

struct Agent {
    attachment: Option<Attachment>,
    worker: Option<Worker>,
    break_ack_before_yield: bool,
    out: io::Stdout,
    lines: io::Lines<io::StdinLock<'static>>,
}

type Reply = Result<Obj, (String, String)>;

fn sdk_err(e: Error) -> (String, String) {
    (e.code().name().to_string(), e.to_string())
}

fn protocol_err(what: impl Into<String>) -> (String, String) {
    ("BAD_REQUEST".to_string(), what.into())
}

fn gettid() -> i128 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as i128 }
}

fn arg_int(req: &Request, key: &str) -> Result<i128, (String, String)> {
    match req.get(key) {
        Some(Value::Int(v)) => Ok(*v),
        other => Err(protocol_err(format!("{key} must be an integer, got {other:?}"))),
    }
}

/// The options a registration request may carry (SCB.md §4: written before REGISTERED): `escapable`
/// (a boolean, or absent for the SDK's default) and `priority` (an integer, or absent).
fn requested_options(req: &Request, mut config: Config) -> Result<Config, (String, String)> {
    match req.get("escapable") {
        Some(Value::Bool(v)) => config = config.escapable(*v),
        None | Some(Value::Null) => {}
        other => return Err(protocol_err(format!("escapable must be a boolean, got {other:?}"))),
    }
    if let Some(Value::Int(_)) = req.get("priority") {
        let priority = i32::try_from(arg_int(req, "priority")?).map_err(|_| protocol_err("priority out of i32 range"))?;
        config = config.priority(priority);
    }
    Ok(config)
}

impl Agent {
    fn send(&mut self, line: String) {
        let mut out = self.out.lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }

    fn worker(&self, op: &'static str) -> Result<&Worker, (String, String)> {
        self.worker.as_ref().ok_or_else(|| sdk_err(Error::NotRegistered { operation: op }))
    }

    /// The SDK's status call (SCB.md §6): attached, detached, or GENERATION_CHANGED for a lost worker.
    fn status(&self) -> Reply {
        match self.worker("status")?.status() {
            Ok(()) => Ok(Obj::new().bool("attached", true)),
            Err(Error::Detached { .. }) => Ok(Obj::new().bool("attached", false)),
            Err(e) => Err(sdk_err(e)),
        }
    }

    fn depth(&self) -> u32 {
        // SAFETY: the calling thread's own state.
        unsafe { (*morpheus::raw::current_raw()).critical_depth }
    }

    fn attach(&mut self, req: &Request) -> Reply {
        let attachment = match req.get("path") {
            Some(Value::Str(p)) if p.is_empty() => Attachment::Detached,
            Some(Value::Str(p)) => Attachment::Region(Region::open(p).map_err(sdk_err)?),
            None | Some(Value::Null) => match region::discover().map_err(sdk_err)? {
                Discovered::Attached(r) => Attachment::Region(r),
                Discovered::Detached(_) => Attachment::Detached,
            },
            Some(other) => return Err(protocol_err(format!("path must be a string, got {other:?}"))),
        };
        let attached = matches!(attachment, Attachment::Region(_));
        self.attachment = Some(attachment);
        Ok(Obj::new().bool("attached", attached))
    }

    fn register(&mut self, req: &Request) -> Reply {
        let slot = u32::try_from(arg_int(req, "slot")?).map_err(|_| protocol_err("slot out of u32 range"))?;
        let mut config = requested_options(req, Config::default().runtime_kind(RuntimeKind::Rust).direct_slot(slot))?;
        config = match &self.attachment {
            Some(Attachment::Region(r)) => config.region(r.clone()),
            // Not attached (never asked, or the region was refused): a detached worker, SCB.md §7.
            _ => config.detached(),
        };
        self.register_with(config)
    }

    /// Registration through the agent (SCB.md §4.1) by discovery (§1.2): the default configuration,
    /// MORPHEUS_SOCKET naming the harness's socket, no region attached.
    fn register_agent(&mut self, req: &Request) -> Reply {
        let config = requested_options(req, Config::default().runtime_kind(RuntimeKind::Rust))?;
        self.register_with(config)
    }

    /// Register this thread with `config`. A thread that already holds a worker asks the SDK anyway:
    /// the SDK itself must refuse (it knows this thread holds a worker), in its own refusal order.
    fn register_with(&mut self, config: Config) -> Reply {
        if self.worker.is_some() {
            return Err(sdk_err(config.register().err().unwrap_or(Error::AlreadyRegistered { slot: None })));
        }
        let worker = config.register().map_err(sdk_err)?;
        let reply = Obj::new().opt_int("slot", worker.slot()).int("tid", gettid()).bool("attached", worker.is_attached());
        self.worker = Some(worker);
        Ok(reply)
    }

    fn checkpoint_sync(&mut self) -> Result<bool, (String, String)> {
        // A lost worker's checkpoint is a plain no-yield, never an error (SCB.md §6): reported as is.
        Ok(morpheus::checkpoint_sync())
    }

    /// Poll the SDK's checkpoint future by hand; on `Pending`, call `on_suspend` (the task is parked
    /// in the executor) before polling again.
    fn checkpoint_async(&mut self, on_suspend: &mut dyn FnMut(&mut Agent)) -> Result<bool, (String, String)> {
        if self.break_ack_before_yield {
            let acked = morpheus::checkpoint_sync(); // the broken order: acknowledge, then yield
            if acked {
                on_suspend(self);
            }
            return Ok(acked);
        }
        let mut fut = pin!(morpheus::checkpoint());
        let mut cx = Context::from_waker(Waker::noop());
        let mut suspended = false;
        let yielded = loop {
            match fut.as_mut().poll(&mut cx) {
                Poll::Ready(y) => break y,
                Poll::Pending => {
                    if suspended {
                        return Err(protocol_err("the checkpoint future was pending twice"));
                    }
                    suspended = true;
                    on_suspend(self);
                }
            }
        };
        Ok(yielded)
    }

    fn state(&self) -> Reply {
        let mut o = Obj::new()
            .bool("attached", matches!(self.attachment, Some(Attachment::Region(_))))
            .bool("registered", self.worker.is_some())
            .int("depth", self.depth());
        if let Some(w) = &self.worker {
            o = o
                .opt_int("slot", w.slot())
                .int("cached_ack", w.acknowledged_seq())
                .bool("escapable", w.escapable())
                .int("priority", w.priority())
                .str("mode", w.runtime_mode().name())
                .int("yields", w.yield_counts().total());
        }
        Ok(o)
    }

    fn handle(&mut self, id: i128, req: &Request) -> Option<Reply> {
        let op = match req.get("op") {
            Some(Value::Str(op)) => op.clone(),
            _ => return Some(Err(protocol_err("no op"))),
        };
        let reply = match op.as_str() {
            "exit" => return None,
            "attach" => self.attach(req),
            "register" => self.register(req),
            "register_agent" => self.register_agent(req),
            "checkpoint" => match req.get("mode") {
                Some(Value::Str(m)) if m == "sync" => self.checkpoint_sync().map(|y| Obj::new().bool("yielded", y)),
                Some(Value::Str(m)) if m == "async" => {
                    let mut on_suspend = |agent: &mut Agent| {
                        agent.send(Obj::new().int("id", id).str("event", "suspended").render());
                        // Wait for the harness's resume of this request.
                        match agent.lines.next() {
                            Some(Ok(line)) => match json::parse_object(&line) {
                                Ok(r) if r.get("op") == Some(&Value::Str("resume".into()))
                                    && r.get("id") == Some(&Value::Int(id)) => {}
                                _ => {
                                    eprintln!("rust agent: expected resume of {id}, got {line}");
                                    std::process::exit(3)
                                }
                            },
                            _ => std::process::exit(0),
                        }
                    };
                    self.checkpoint_async(&mut on_suspend).map(|y| Obj::new().bool("yielded", y))
                }
                other => Err(protocol_err(format!("mode must be sync or async, got {other:?}"))),
            },
            "checkpoint_loop" => (|| {
                let millis = arg_int(req, "duration_ms")?;
                let asynchronous = req.get("mode") == Some(&Value::Str("async".into()));
                let end = Instant::now() + Duration::from_millis(millis as u64);
                let (mut iterations, mut yields) = (0u64, 0u64);
                while Instant::now() < end {
                    for _ in 0..64 {
                        iterations += 1;
                        let y = if asynchronous {
                            self.checkpoint_async(&mut |_| {})?
                        } else {
                            self.checkpoint_sync()?
                        };
                        yields += y as u64;
                    }
                }
                Ok(Obj::new().int("iterations", iterations).int("yields", yields))
            })(),
            "critical_enter" => {
                match &self.worker {
                    Some(w) => w.critical_enter(),
                    // SAFETY: the calling thread's own state (detached: only counts).
                    None => unsafe { morpheus::raw::critical_enter_raw(morpheus::raw::current_raw()) },
                }
                Ok(Obj::new().int("depth", self.depth()))
            }
            "critical_exit" => {
                let r = match &self.worker {
                    Some(w) => w.critical_exit(),
                    // SAFETY: as above.
                    None => unsafe { morpheus::raw::critical_exit_raw(morpheus::raw::current_raw()) },
                };
                r.map_err(sdk_err).map(|_| Obj::new().int("depth", self.depth()))
            }
            "set_escapable" => match req.get("value") {
                Some(Value::Bool(v)) => {
                    self.worker("set_escapable").and_then(|w| w.set_escapable(*v).map_err(sdk_err)).map(|_| Obj::new())
                }
                _ => Err(protocol_err("value must be a boolean")),
            },
            "set_priority" => arg_int(req, "value").and_then(|v| {
                self.worker("set_priority").and_then(|w| w.set_priority(v as i32).map_err(sdk_err)).map(|_| Obj::new())
            }),
            "explicit_yield" => {
                self.worker("explicit_yield").and_then(|w| w.record_explicit_yield().map_err(sdk_err)).map(|_| Obj::new())
            }
            // The thread's mode clock (kit::set_mode_clock): every op of this agent runs on this thread.
            "mode_clock" => match arg_int(req, "ns").ok().and_then(|ns| u64::try_from(ns).ok()) {
                Some(ns) => {
                    morpheus::kit::set_mode_clock(Some(ns));
                    Ok(Obj::new())
                }
                None => Err(protocol_err("ns must be an integer >= 0")),
            },
            "state" => self.state(),
            "status" => self.status(),
            "shutdown" => match self.worker.take() {
                Some(w) => w.shutdown().map_err(sdk_err).map(|_| Obj::new()),
                None => Err(sdk_err(Error::NotRegistered { operation: "shutdown" })),
            },
            other => Err(("UNSUPPORTED".to_string(), format!("unknown op {other:?}"))),
        };
        Some(reply)
    }
}

fn main() {
    let mut agent = Agent {
        attachment: None,
        worker: None,
        break_ack_before_yield: std::env::var("MORPHEUS_CONFORMANCE_BREAK").as_deref() == Ok("ack_before_yield"),
        out: io::stdout(),
        lines: io::stdin().lock().lines(),
    };
    let hello = Obj::new()
        .str("protocol", "morpheus-conformance")
        .int("version", 1)
        .str("sdk", "rust")
        .str("runtime_kind", RuntimeKind::Rust.name())
        .int("abi_major", morpheus_abi_version().0)
        .int("abi_minor", morpheus_abi_version().1)
        .raw("checkpoint_modes", "[\"sync\",\"async\"]".into())
        .raw("state_fields", "[\"escapable\",\"priority\"]".into())
        // Worker::record_explicit_yield (SCB.md §5.8) and kit::set_mode_clock (§5.4). No `tasks`: the
        // crate drives no event loop (§5.7).
        .raw("ops", "[\"explicit_yield\",\"mode_clock\"]".into())
        .int("pid", std::process::id());
    agent.send(hello.render());
    while let Some(Ok(line)) = agent.lines.next() {
        let req = match json::parse_object(&line) {
            Ok(r) => r,
            Err(e) => {
                let reply = Obj::new().raw("id", "null".into()).bool("ok", false).str("error", "BAD_REQUEST").str("message", &e);
                agent.send(reply.render());
                continue;
            }
        };
        let id = match req.get("id") {
            Some(Value::Int(id)) => *id,
            _ => -1,
        };
        let Some(reply) = agent.handle(id, &req) else { break };
        let base = Obj::new().int("id", id);
        let line = match reply {
            Ok(fields) => base.bool("ok", true).extend(fields).render(),
            Err((code, message)) => base.bool("ok", false).str("error", &code).str("message", &message).render(),
        };
        agent.send(line);
    }
    // Dropping the worker here would shut it down; the harness judges bytes only up to its last request.
    if let Some(w) = agent.worker.take() {
        std::mem::forget(w);
    }
}

fn morpheus_abi_version() -> (u16, u16) {
    (morpheus_abi::ABI_MAJOR, morpheus_abi::ABI_MINOR)
}
