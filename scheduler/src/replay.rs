// SPDX-License-Identifier: GPL-2.0-only
//! `scx_morpheus --replay-gate CASES`: the conformance cases of the escalation gate and its state
//! machine, and of the hint decision (spec/CONFORMANCE.md §2.7, `conformance/harness/cli.py
//! export-gate-cases`), judged by the BPF program.
//!
//! This module reads and checks the case lines and writes the answer lines; the kernel backend
//! (`kernel::replay_gate`) puts each case's region image into the BPF region map and runs the
//! `gate_replay` program (a `gate` case) or `escalation_replay` (an `escalate` case, the episode kept
//! in the BPF program between the cases of a scenario), or `hint_replay` (a `hint` case), which evaluate
//! the same gate, state machine and hint rule, with the same loads, as the live scheduler.
//! Everything here is independent of BPF so that bad input is refused (and tested) on any kernel.

use std::path::Path;

use anyhow::{bail, Context, Result};
use morpheus_abi as abi;
use morpheus_abi::{ErrorCode, RegionHeader};
use morpheus_policy_ffi::{EscalationStep, GateVerdict, HintDecision};

use crate::region::{HEADER_SIZE, SCB_STRIDE};

/// What a case asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaseOp {
    /// The gate's verdict.
    Gate,
    /// One step of the escalation state machine at `now_ns`; `reset`: the scenario's first (a fresh
    /// episode).
    Escalate { now_ns: u64, reset: bool },
    /// The hint decision at `now_ns` (SCB.md §5.2).
    Hint { now_ns: u64 },
}

/// One `export-gate-cases` line: the whole region image at a `gate` or `escalate` step of a scenario.
#[derive(Debug)]
pub struct GateCase {
    pub name: String,
    pub op: CaseOp,
    pub slot: u32,
    pub runtime_ns: u64,
    pub image: Vec<u8>,
}

/// Reads the cases file; a line that is not a case fails the whole run, naming the line.
pub fn read_cases(path: &Path) -> Result<Vec<GateCase>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("--replay-gate {}: cannot read", path.display()))?;
    let mut cases = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let case = parse_case(line).with_context(|| format!("--replay-gate {}: line {}", path.display(), i + 1))?;
        cases.push(case);
    }
    if cases.is_empty() {
        bail!("--replay-gate {}: no cases in the file (make it with `cli.py export-gate-cases`)", path.display());
    }
    Ok(cases)
}

fn parse_case(line: &str) -> Result<GateCase> {
    let value: serde_json::Value = serde_json::from_str(line).context("not JSON")?;
    let field = |key: &str| value.get(key).with_context(|| format!("the case has no \"{key}\""));
    let name = field("case")?.as_str().context("\"case\" is not a string")?.to_owned();
    let slot = field("slot")?.as_u64().context("\"slot\" is not a non-negative integer")?;
    let slot = u32::try_from(slot).with_context(|| format!("\"slot\" {slot} does not fit 32 bits"))?;
    let runtime_ns = field("runtime_ns")?.as_u64().context("\"runtime_ns\" is not a non-negative integer")?;
    let hex = field("region_hex")?.as_str().context("\"region_hex\" is not a string")?;
    let image = decode_hex(hex).context("\"region_hex\"")?;
    let op = match value.get("op").map(|op| op.as_str().context("\"op\" is not a string")).transpose()? {
        None | Some("gate") => CaseOp::Gate,
        Some("escalate") => {
            let now_ns = field("now_ns")?.as_u64().context("\"now_ns\" is not a non-negative integer")?;
            let reset = match value.get("reset") {
                None => false,
                Some(reset) => reset.as_bool().context("\"reset\" is not a boolean")?,
            };
            CaseOp::Escalate { now_ns, reset }
        }
        Some("hint") => CaseOp::Hint { now_ns: field("now_ns")?.as_u64().context("\"now_ns\" is not a non-negative integer")? },
        Some(other) => bail!("\"op\" {other:?} is none of \"gate\", \"escalate\" and \"hint\""),
    };
    Ok(GateCase { name, op, slot, runtime_ns, image })
}

fn decode_hex(hex: &str) -> Result<Vec<u8>> {
    if hex.len() % 2 != 0 {
        bail!("odd number of hex digits ({})", hex.len());
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).with_context(|| format!("not hex at offset {i}")))
        .collect()
}

/// Why the BPF region map cannot hold this case's region, as the error name and a message; None if
/// it can. The BPF program's region is `struct morpheus_region` (src/bpf/intf.h): this build's header
/// followed by SCBs at this build's stride, `map_value_size` bytes in all.
pub fn layout_refusal(case: &GateCase, map_value_size: usize) -> Option<(ErrorCode, String)> {
    let image = &case.image;
    if image.len() < HEADER_SIZE {
        return Some((ErrorCode::RegionTruncated, format!("the image has {} bytes, less than a header ({HEADER_SIZE})", image.len())));
    }
    // SAFETY: at least HEADER_SIZE bytes; RegionHeader is plain integers, read without alignment.
    let h: RegionHeader = unsafe { std::ptr::read_unaligned(image.as_ptr().cast()) };
    let (magic, major) = (h.magic, h.abi_major);
    let (header_size, stride, count) = (h.header_size as usize, h.scb_stride as usize, h.scb_count);
    if magic != abi::REGION_MAGIC {
        return Some((ErrorCode::BadMagic, format!("magic {magic:#x} is not REGION_MAGIC")));
    }
    if major != abi::ABI_MAJOR {
        return Some((ErrorCode::AbiMajorMismatch, format!("ABI major {major}, the BPF program has {}", abi::ABI_MAJOR)));
    }
    if header_size != HEADER_SIZE || stride != SCB_STRIDE {
        return Some((
            ErrorCode::BadLayout,
            format!(
                "header_size {header_size} / scb_stride {stride}: the BPF region map is laid out with header_size \
                 {HEADER_SIZE} and scb_stride {SCB_STRIDE} only"
            ),
        ));
    }
    if image.len() > map_value_size {
        return Some((
            ErrorCode::BadLayout,
            format!("the image has {} bytes, the BPF region map holds {map_value_size}", image.len()),
        ));
    }
    if case.slot >= count {
        return Some((ErrorCode::SlotOutOfRange, format!("slot {} >= scb_count {count}", case.slot)));
    }
    let end = header_size + (case.slot as usize + 1) * stride;
    if end > image.len() {
        return Some((
            ErrorCode::RegionTruncated,
            format!("SCB {} ends at byte {end}, the image has {}", case.slot, image.len()),
        ));
    }
    None
}

/// The verdict's enumerator name without its MORPHEUS_GATE_ prefix, from the policy header (bindgen).
pub fn verdict_name(verdict: GateVerdict) -> String {
    let name = format!("{verdict:?}");
    name.strip_prefix("MORPHEUS_GATE_").unwrap_or(&name).to_owned()
}

/// The verdict a gate_replay return value stands for, if it is one.
pub fn verdict_from_retval(retval: u32) -> Option<GateVerdict> {
    GateVerdict::ALL.get(retval as usize).copied()
}

pub fn answer_line(case: &GateCase, verdict: GateVerdict) -> String {
    serde_json::json!({
        "case": case.name,
        "escalate": verdict == GateVerdict::MORPHEUS_GATE_ESCALATE,
        "verdict": verdict_name(verdict),
    })
    .to_string()
}

/// The step's enumerator name without its MORPHEUS_STEP_ prefix, from the policy header (bindgen).
pub fn step_name(step: EscalationStep) -> String {
    let name = format!("{step:?}");
    name.strip_prefix("MORPHEUS_STEP_").unwrap_or(&name).to_owned()
}

/// The step an escalation_replay result stands for, if it is one.
pub fn step_from_raw(raw: u32) -> Option<EscalationStep> {
    EscalationStep::ALL.get(raw as usize).copied()
}

/// The answer to an `escalate` case: the verdict, the step and the episode after it.
pub fn escalation_answer_line(case: &GateCase, verdict: GateVerdict, step: EscalationStep, escalated: bool, steps: u32) -> String {
    serde_json::json!({
        "case": case.name,
        "verdict": verdict_name(verdict),
        "step": step_name(step),
        "escalated": escalated,
        "steps": steps,
    })
    .to_string()
}

/// The decision a hint_replay return value stands for, if it is one.
pub fn hint_from_retval(retval: u32) -> Option<HintDecision> {
    HintDecision::ALL.get(retval as usize).copied()
}

/// The answer to a `hint` case: the decision's enumerator name without its MORPHEUS_HINT_ prefix, and
/// whether it counts a dropped hint (the policy header's morpheus_hint_dropped).
pub fn hint_answer_line(case: &GateCase, hint: HintDecision) -> String {
    let name = format!("{hint:?}");
    serde_json::json!({
        "case": case.name,
        "hint": name.strip_prefix("MORPHEUS_HINT_").unwrap_or(&name),
        "dropped": morpheus_policy_ffi::hint_dropped(hint),
    })
    .to_string()
}

pub fn refusal_line(case: &GateCase, code: ErrorCode, message: &str) -> String {
    serde_json::json!({"case": case.name, "error": code.name(), "message": message}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use morpheus_policy_ffi::GATE_VERDICTS;
    use std::mem::offset_of;

    /// Bytes the BPF region map's value has (struct morpheus_region in src/bpf/intf.h).
    fn expected_map_value_size() -> usize {
        HEADER_SIZE + abi::MAX_WORKERS as usize * SCB_STRIDE
    }

    fn image(slots: u32) -> Vec<u8> {
        let mut h: RegionHeader = unsafe { std::mem::zeroed() };
        h.magic = abi::REGION_MAGIC;
        h.abi_major = abi::ABI_MAJOR;
        h.header_size = HEADER_SIZE as u32;
        h.scb_stride = SCB_STRIDE as u32;
        h.scb_count = slots;
        let mut bytes = vec![0u8; HEADER_SIZE + slots as usize * SCB_STRIDE];
        // SAFETY: the buffer has room for a header.
        unsafe { std::ptr::write_unaligned(bytes.as_mut_ptr().cast(), h) };
        bytes
    }

    fn case(slot: u32, image: Vec<u8>) -> GateCase {
        GateCase { name: "x#1".into(), op: CaseOp::Gate, slot, runtime_ns: 1, image }
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn a_region_of_this_layout_is_accepted() {
        assert!(layout_refusal(&case(3, image(4)), expected_map_value_size()).is_none());
    }

    #[test]
    fn layouts_the_map_cannot_hold_are_refused_by_name() {
        let size = expected_map_value_size();
        let refused = |c: GateCase| layout_refusal(&c, size).map(|(code, msg)| (code.name(), msg));

        let mut wide = image(4);
        wide[offset_of!(RegionHeader, scb_stride)..][..4].copy_from_slice(&((SCB_STRIDE as u32) * 2).to_ne_bytes());
        let (code, msg) = refused(case(0, wide)).unwrap();
        assert_eq!(code, "BAD_LAYOUT");
        assert!(msg.contains("scb_stride"), "{msg}");

        let mut big_header = image(4);
        big_header[offset_of!(RegionHeader, header_size)..][..4].copy_from_slice(&(HEADER_SIZE as u32 * 2).to_ne_bytes());
        assert_eq!(refused(case(0, big_header)).unwrap().0, "BAD_LAYOUT");

        let too_many = image(abi::MAX_WORKERS + 1);
        let (code, msg) = refused(case(0, too_many)).unwrap();
        assert_eq!(code, "BAD_LAYOUT");
        assert!(msg.contains("holds"), "{msg}");

        assert_eq!(refused(case(4, image(4))).unwrap().0, "SLOT_OUT_OF_RANGE");
        let mut short = image(4);
        short.truncate(HEADER_SIZE + SCB_STRIDE);
        assert_eq!(refused(case(2, short)).unwrap().0, "REGION_TRUNCATED");
        assert_eq!(refused(case(0, vec![0; 10])).unwrap().0, "REGION_TRUNCATED");
        let mut bad_magic = image(1);
        bad_magic[0] ^= 1;
        assert_eq!(refused(case(0, bad_magic)).unwrap().0, "BAD_MAGIC");
    }

    #[test]
    fn case_lines_are_parsed_and_bad_ones_named() {
        let line = format!(r#"{{"case": "gate_x#3", "slot": 1, "runtime_ns": 7000001, "region_hex": "{}"}}"#, hex(&image(2)));
        let c = parse_case(&line).unwrap();
        assert_eq!((c.name.as_str(), c.slot, c.runtime_ns, c.image.len()), ("gate_x#3", 1, 7000001, image(2).len()));

        assert_eq!(c.op, CaseOp::Gate);
        let esc = format!(
            r#"{{"case": "gate_y#4", "op": "escalate", "slot": 0, "runtime_ns": 9, "now_ns": 77, "reset": true, "region_hex": "{}"}}"#,
            hex(&image(1))
        );
        assert_eq!(parse_case(&esc).unwrap().op, CaseOp::Escalate { now_ns: 77, reset: true });
        let hint = format!(r#"{{"case": "hint_z#5", "op": "hint", "slot": 0, "runtime_ns": 9, "now_ns": 78, "region_hex": "{}"}}"#, hex(&image(1)));
        assert_eq!(parse_case(&hint).unwrap().op, CaseOp::Hint { now_ns: 78 });

        for (bad, why) in [
            (r#"{"case": "a", "op": "escalate", "slot": 0, "runtime_ns": 1, "region_hex": ""}"#, "no \"now_ns\""),
            (r#"{"case": "a", "op": "escalate", "slot": 0, "runtime_ns": 1, "now_ns": 1, "reset": 1, "region_hex": ""}"#, "\"reset\""),
            (r#"{"case": "a", "op": "hint", "slot": 0, "runtime_ns": 1, "region_hex": ""}"#, "no \"now_ns\""),
            (r#"{"case": "a", "op": "kick", "slot": 0, "runtime_ns": 1, "region_hex": ""}"#, "none of"),
            (r#"{"case": "a", "op": 3, "slot": 0, "runtime_ns": 1, "region_hex": ""}"#, "\"op\" is not a string"),
            ("not json", "not JSON"),
            (r#"{"slot": 0, "runtime_ns": 1, "region_hex": ""}"#, "no \"case\""),
            (r#"{"case": "a", "slot": -1, "runtime_ns": 1, "region_hex": ""}"#, "\"slot\""),
            (r#"{"case": "a", "slot": 0, "runtime_ns": "x", "region_hex": ""}"#, "\"runtime_ns\""),
            (r#"{"case": "a", "slot": 0, "runtime_ns": 1, "region_hex": "abc"}"#, "odd number"),
            (r#"{"case": "a", "slot": 0, "runtime_ns": 1, "region_hex": "zz"}"#, "not hex"),
        ] {
            let err = format!("{:#}", parse_case(bad).unwrap_err());
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn answers_use_the_policy_headers_names() {
        let c = case(0, image(1));
        let v: serde_json::Value = serde_json::from_str(&answer_line(&c, GateVerdict::MORPHEUS_GATE_BLOCKED_CRITICAL)).unwrap();
        assert_eq!(v, serde_json::json!({"case": "x#1", "escalate": false, "verdict": "BLOCKED_CRITICAL"}));
        let v: serde_json::Value = serde_json::from_str(&answer_line(&c, GateVerdict::MORPHEUS_GATE_ESCALATE)).unwrap();
        assert_eq!(v["escalate"], true);
        assert_eq!(v["verdict"], "ESCALATE");
        assert_eq!(verdict_from_retval(5), Some(GateVerdict::MORPHEUS_GATE_BLOCKED_CRITICAL));
        assert_eq!(verdict_from_retval(GATE_VERDICTS as u32), None);
        assert_eq!(verdict_from_retval(u32::MAX), None);

        let v: serde_json::Value = serde_json::from_str(&escalation_answer_line(
            &c,
            GateVerdict::MORPHEUS_GATE_ESCALATE,
            EscalationStep::MORPHEUS_STEP_LIFT_EXPIRED,
            false,
            0,
        ))
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"case": "x#1", "verdict": "ESCALATE", "step": "LIFT_EXPIRED", "escalated": false, "steps": 0})
        );
        assert_eq!(step_from_raw(2), Some(EscalationStep::MORPHEUS_STEP_THROTTLE));
        assert_eq!(step_from_raw(EscalationStep::ALL.len() as u32), None);

        let v: serde_json::Value = serde_json::from_str(&hint_answer_line(&c, HintDecision::MORPHEUS_HINT_PENDING)).unwrap();
        assert_eq!(v, serde_json::json!({"case": "x#1", "hint": "PENDING", "dropped": false}));
        let v: serde_json::Value = serde_json::from_str(&hint_answer_line(&c, HintDecision::MORPHEUS_HINT_RATE_LIMITED)).unwrap();
        assert_eq!(v, serde_json::json!({"case": "x#1", "hint": "RATE_LIMITED", "dropped": true}));
        assert_eq!(hint_from_retval(3), Some(HintDecision::MORPHEUS_HINT_PENDING));
        assert_eq!(hint_from_retval(HintDecision::ALL.len() as u32), None);
        assert_eq!(hint_from_retval(u32::MAX), None);
    }
}
