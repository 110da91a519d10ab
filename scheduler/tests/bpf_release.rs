// SPDX-License-Identifier: GPL-2.0-only
//! The BPF program's release of a yield request (spec/SCB.md §5.2 "Release in BPF", review A8): the
//! increment of `preempt_seq` must be the fetching atomic add (BPF_ATOMIC with BPF_FETCH), which is
//! fully ordered on every JIT. The non-fetching add (`lock *(u64 *)(..) += ..`), which clang emits
//! for a `__sync_fetch_and_add` whose result is unused, orders nothing on arm64 and is forbidden.
//! The source can look right while the object is wrong, so this reads the object cargo built
//! (scheduler/build.rs, in OUT_DIR) with llvm-objdump and its line table.
//!
//! Also: the worker layer (src/bpf/worker.bpf.c) and the conformance replays (replay.bpf.c) are
//! linked as they are by a program without sched_ext, so their objects must reference nothing of
//! sched_ext's, and the worker layer nothing of its host's beyond the host interface
//! (src/bpf/morpheus.bpf.h).
#![cfg(feature = "kernel")]

use std::process::Command;

const OBJECT: &str = concat!(env!("OUT_DIR"), "/bpf.bpf.o");
const SOURCE: &str = include_str!("../src/bpf/worker.bpf.c");
const SOURCE_NAME: &str = "worker.bpf.c";

/// The lines of worker.bpf.c that change `preempt_seq` with an atomic builtin.
fn increment_lines() -> Vec<usize> {
    SOURCE
        .lines()
        .enumerate()
        .filter(|(_, line)| line.contains("preempt_seq") && (line.contains("__sync_") || line.contains("__atomic_")))
        .map(|(i, _)| i + 1)
        .collect()
}

/// The object's instructions, each with the worker.bpf.c line the line table gives it (if any).
fn disassembly() -> Vec<(Option<usize>, String)> {
    let objdump = std::env::var("LLVM_OBJDUMP").unwrap_or_else(|_| "llvm-objdump-19".to_string());
    let out = Command::new(&objdump)
        .args(["-d", "-l", "--no-show-raw-insn", OBJECT])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {objdump} (tools/setup.sh installs llvm-19; LLVM_OBJDUMP overrides): {e}"));
    assert!(out.status.success(), "{objdump} failed on {OBJECT}: {}", String::from_utf8_lossy(&out.stderr));
    let mut line = None;
    let mut instructions = Vec::new();
    for text in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(location) = text.strip_prefix("; ") {
            line = location
                .rsplit_once(':')
                .filter(|(file, _)| file.ends_with(SOURCE_NAME))
                .and_then(|(_, n)| n.trim().parse().ok());
        } else if text.ends_with(">:") {
            line = None; // a new function: its line comes next
        } else if let Some((addr, insn)) = text.trim_start().split_once(':') {
            if addr.parse::<u64>().is_ok() {
                instructions.push((line, insn.trim().to_string()));
            }
        }
    }
    instructions
}

#[test]
fn preempt_seq_is_incremented_with_the_fetching_atomic_add() {
    let lines = increment_lines();
    assert!(!lines.is_empty(), "no atomic increment of preempt_seq found in {SOURCE_NAME}");
    let instructions = disassembly();
    assert!(instructions.iter().any(|(l, _)| l.is_some()), "{OBJECT} has no line table for {SOURCE_NAME} (built without -g?)");
    for line in lines {
        let at: Vec<&str> = instructions.iter().filter(|(l, _)| *l == Some(line)).map(|(_, i)| i.as_str()).collect();
        assert!(
            at.iter().any(|i| i.contains("atomic_fetch_add((u64 *)")),
            "{SOURCE_NAME}:{line} increments preempt_seq without the fetching atomic add (BPF_FETCH); its instructions: {at:?}"
        );
        assert!(
            !at.iter().any(|i| i.starts_with("lock ")),
            "{SOURCE_NAME}:{line} has a non-fetching atomic add, which is not a release: {at:?}"
        );
    }
}

/// The symbols of one of the per-file objects build.rs leaves in OUT_DIR: (name, undefined).
fn symbols(object: &str) -> Vec<(String, bool)> {
    let path = format!("{}/{object}", env!("OUT_DIR"));
    let objdump = std::env::var("LLVM_OBJDUMP").unwrap_or_else(|_| "llvm-objdump-19".to_string());
    let out = Command::new(&objdump)
        .args(["-t", &path])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {objdump} (tools/setup.sh installs llvm-19; LLVM_OBJDUMP overrides): {e}"));
    assert!(out.status.success(), "{objdump} failed on {path}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|line| line.len() > 17 && line.as_bytes()[..16].iter().all(u8::is_ascii_hexdigit))
        .filter_map(|line| line.split_whitespace().last().map(|name| (name.to_string(), line.contains("*UND*"))))
        .collect()
}

/// Kernel functions any BPF program may call: the open-coded number iterator behind `bpf_for`.
const GENERIC_KFUNCS: [&str; 3] = ["bpf_iter_num_new", "bpf_iter_num_next", "bpf_iter_num_destroy"];

#[test]
fn worker_layer_reaches_its_host_only_through_the_host_interface() {
    let symbols = symbols("worker.bpf.o");
    assert!(symbols.iter().any(|(name, undefined)| name == "worker_running" && !undefined), "worker.bpf.o defines no worker_running: {symbols:?}");
    let sched_ext: Vec<&String> = symbols.iter().map(|(name, _)| name).filter(|name| name.contains("scx")).collect();
    assert!(sched_ext.is_empty(), "worker.bpf.o names sched_ext symbols (a tracing backend could not link it): {sched_ext:?}");
    let outside: Vec<&String> = symbols
        .iter()
        .filter(|(name, undefined)| *undefined && !name.starts_with("morpheus_host_") && !GENERIC_KFUNCS.contains(&name.as_str()))
        .map(|(name, _)| name)
        .collect();
    assert!(outside.is_empty(), "worker.bpf.o needs symbols outside the host interface (morpheus_host_*, src/bpf/morpheus.bpf.h): {outside:?}");
}

#[test]
fn conformance_replay_needs_no_sched_ext() {
    let symbols = symbols("replay.bpf.o");
    assert!(symbols.iter().any(|(name, undefined)| name == "gate_replay" && !undefined), "replay.bpf.o defines no gate_replay: {symbols:?}");
    let sched_ext: Vec<&String> = symbols.iter().map(|(name, _)| name).filter(|name| name.contains("scx")).collect();
    assert!(sched_ext.is_empty(), "replay.bpf.o names sched_ext symbols: {sched_ext:?}");
}

/// The worker layer has one copy: the tracing backend's own file (trace/trace.bpf.o) defines only the
/// host interface and its programs, and every worker_* function it calls is left to the linker (the
/// same worker.bpf.c as the sched_ext program's); its linked object names no sched_ext symbol.
#[test]
fn tracing_backend_links_the_same_worker_layer_and_no_sched_ext() {
    let own = symbols("trace/trace.bpf.o");
    let defined_layer: Vec<&String> = own.iter().filter(|(name, undefined)| !undefined && name.starts_with("worker_")).map(|(name, _)| name).collect();
    assert!(defined_layer.is_empty(), "trace.bpf.c defines worker-layer functions of its own: {defined_layer:?}");
    for needed in ["worker_running", "worker_stopping", "worker_exit", "worker_timer_start"] {
        assert!(own.iter().any(|(name, undefined)| name == needed && *undefined), "trace.bpf.o does not call {needed} from the worker layer: {own:?}");
    }
    for host in ["morpheus_host_kick", "morpheus_host_check"] {
        assert!(own.iter().any(|(name, undefined)| name == host && !undefined), "trace.bpf.o does not define {host}: {own:?}");
    }
    let linked = symbols("trace/bpf.bpf.o");
    let sched_ext: Vec<&String> = linked.iter().map(|(name, _)| name).filter(|name| name.contains("scx")).collect();
    assert!(sched_ext.is_empty(), "the tracing backend's object names sched_ext symbols: {sched_ext:?}");
    let undefined: Vec<&String> = linked.iter().filter(|(name, undefined)| *undefined && !GENERIC_KFUNCS.contains(&name.as_str())).map(|(name, _)| name).collect();
    assert!(undefined.is_empty(), "the tracing backend's object leaves symbols undefined: {undefined:?}");
}

/// The lines of `source` (a BPF source or the policy header) that make an acquire load
/// (`load_acquire`, or the policy header's `MORPHEUS_LOAD_ACQUIRE`), leaving out definitions and comments.
fn acquire_lines(source: &str) -> Vec<usize> {
    source
        .lines()
        .enumerate()
        .filter(|(_, line)| line.contains("load_acquire(") || line.contains("MORPHEUS_LOAD_ACQUIRE("))
        .filter(|(_, line)| !matches!(line.trim_start().chars().next(), Some('#' | '*' | '/')))
        .map(|(i, _)| i + 1)
        .collect()
}

/// A memory access of a BPF instruction as llvm-objdump prints it, other than the stack's (r10).
fn memory_access(insn: &str) -> bool {
    insn.contains("*(") && !insn.contains("(r10 ")
}

/// A fetching BPF atomic (`rX = atomic_fetch_add(...)`, the exchanges): fully ordered in every JIT.
fn fetching_atomic(insn: &str) -> bool {
    insn.contains("= atomic_fetch_") || insn.contains("xchg")
}

/// The target instruction number of a jump numbered `n` (`goto +0x3`, `if w1 == 0x0 goto -0x2 <...>`).
fn jump_target(n: u64, insn: &str) -> Option<u64> {
    let offset = insn.split("goto ").nth(1)?.split_whitespace().next()?;
    let (sign, hex) = offset.split_at(1);
    let off = i64::from_str_radix(hex.trim_start_matches("0x"), 16).ok()?;
    Some((n as i64 + 1 + if sign == "-" { -off } else { off }) as u64)
}

/// Whether every path from instruction `n` of `code` (numbered as llvm-objdump numbers them) reaches a
/// fetching atomic before any non-stack memory access, call (other than bpf_get_smp_processor_id,
/// helper 8, which full_barrier() makes) or exit, within `budget` instructions. On failure, the path.
fn barrier_follows(code: &std::collections::BTreeMap<u64, String>, n: u64, budget: u32, path: &mut Vec<String>) -> bool {
    let Some((&n, insn)) = code.range(n..).next() else { return false };
    path.push(insn.clone());
    if fetching_atomic(insn) {
        return true;
    }
    if budget == 0 || memory_access(insn) || insn == "exit" || (insn.starts_with("call") && insn != "call 0x8") {
        return false;
    }
    let Some(target) = insn.contains("goto ").then(|| jump_target(n, insn)) else {
        return barrier_follows(code, n + 1, budget - 1, path);
    };
    let Some(target) = target else { return false };
    if insn.starts_with("goto ") {
        return barrier_follows(code, target, budget - 1, path);
    }
    let mut taken = path.clone();
    barrier_follows(code, n + 1, budget - 1, path) && barrier_follows(code, target, budget - 1, &mut taken) || {
        path.push(format!("(or, with the jump taken: {taken:?})"));
        false
    }
}

/// Every acquire load of one linked object (`object`, in OUT_DIR): each non-stack load the line table
/// puts on an acquire line (of worker.bpf.c or morpheus_policy.h), with whether a fetching atomic
/// follows it on every path (barrier_follows) and the path that shows it.
fn acquire_loads(object: &str) -> Vec<(String, bool, Vec<String>)> {
    let sources = [("worker.bpf.c", acquire_lines(SOURCE)), ("morpheus_policy.h", acquire_lines(include_str!("../src/policy/morpheus_policy.h")))];
    let path = format!("{}/{object}", env!("OUT_DIR"));
    let objdump = std::env::var("LLVM_OBJDUMP").unwrap_or_else(|_| "llvm-objdump-19".to_string());
    let out = Command::new(&objdump)
        .args(["-d", "-l", "--no-show-raw-insn", &path])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {objdump} (tools/setup.sh installs llvm-19; LLVM_OBJDUMP overrides): {e}"));
    assert!(out.status.success(), "{objdump} failed on {path}: {}", String::from_utf8_lossy(&out.stderr));
    // Each section's instructions by number, and the numbered ones on an acquire line ("file:line").
    let mut sections = Vec::new();
    let mut code = std::collections::BTreeMap::new();
    let mut loads = Vec::new();
    let mut at: Option<String> = None;
    for text in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(location) = text.strip_prefix("; ") {
            at = location.rsplit_once(':').and_then(|(file, n)| {
                let n: usize = n.trim().parse().ok()?;
                let (name, lines) = sources.iter().find(|(name, _)| file.ends_with(name))?;
                lines.contains(&n).then(|| format!("{name}:{n}"))
            });
        } else if text.starts_with("Disassembly of section") {
            sections.push((std::mem::take(&mut code), std::mem::take(&mut loads)));
        } else if text.ends_with(">:") {
            at = None;
        } else if let Some((n, insn)) = text.trim_start().split_once(':') {
            if let Ok(n) = n.parse::<u64>() {
                let insn = insn.trim().to_string();
                if let Some(line) = &at {
                    if memory_access(&insn) && insn.contains(" = *(") && !insn.starts_with('*') {
                        loads.push((n, format!("{line}: {insn}")));
                    }
                }
                code.insert(n, insn);
            }
        }
    }
    sections.push((code, loads));
    let mut found = Vec::new();
    for (code, loads) in &sections {
        for (n, load) in loads {
            let mut path = Vec::new();
            let ordered = barrier_follows(code, n + 1, 64, &mut path);
            found.push((load.clone(), ordered, path));
        }
    }
    found
}

/// An acquire load is a plain load ordered before every later access. On x86-64 (TSO) every load is
/// one; on arm64 the BPF side follows the load with full_barrier(), a fetching atomic the JIT emits
/// fully ordered (src/bpf/morpheus.bpf.h, load_acquire). So in an arm64 object every load on an
/// acquire line of the gate and checkpoint paths (worker.bpf.c, the policy header's gate loads) reaches
/// a fetching atomic on every path before any other non-stack memory access: a load_acquire that lost
/// its barrier fails here. Built for x86-64 (`cargo test`) this checks that the acquire loads are found
/// and that none pays the barrier (x86's load_acquire is a compiler barrier only);
/// `tools/arm64/scx-env.sh cargo test -p scx_morpheus --target aarch64-unknown-linux-gnu --test bpf_release`
/// checks the arm64 object.
#[test]
fn acquire_loads_are_followed_by_a_fetching_atomic_on_arm64() {
    for object in ["bpf.bpf.o", "trace/bpf.bpf.o"] {
        let loads = acquire_loads(object);
        for file in ["worker.bpf.c", "morpheus_policy.h"] {
            assert!(loads.iter().any(|(load, _, _)| load.starts_with(file)), "{object}: no acquire load of {file} found (line table missing?): {loads:?}");
        }
        if cfg!(target_arch = "aarch64") {
            let unordered: Vec<_> = loads.iter().filter(|(_, ordered, _)| !ordered).collect();
            assert!(unordered.is_empty(), "{object}: acquire loads not followed by a fetching atomic (a full barrier) before the next access: {unordered:#?}");
        } else {
            let fenced: Vec<_> = loads.iter().filter(|(load, ordered, _)| *ordered && load.starts_with("worker.bpf.c")).collect();
            assert!(fenced.is_empty(), "{object}: x86-64 acquire loads of worker.bpf.c pay a full barrier (load_acquire should be a compiler barrier there): {fenced:#?}");
        }
    }
}
