// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Checks that the Rust types (bindgen output of the generated C header) and the generated constants
//! agree with spec/abi.toml, read afresh here: the spec is the truth, not the generator.

use morpheus_abi::{FIELD_LAYOUT, RECORD_LAYOUT};
use toml::Value;

fn spec() -> toml::Table {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../spec/abi.toml");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    text.parse().unwrap_or_else(|e| panic!("parsing {path}: {e}"))
}

fn int(v: &Value) -> u64 {
    v.as_integer().expect("integer") as u64
}

#[test]
fn every_spec_field_is_where_the_spec_says() {
    let spec = spec();
    let mut checked = 0;
    for rec in spec["record"].as_array().unwrap() {
        let rname = rec["name"].as_str().unwrap();
        let layout = RECORD_LAYOUT.iter().find(|r| r.record == rname).unwrap_or_else(|| panic!("record {rname} missing in Rust"));
        assert_eq!(layout.size as u64, int(&rec["size"]), "size of {rname}");
        assert_eq!(layout.align as u64, int(&rec["align"]), "alignment of {rname}");
        for field in rec["fields"].as_array().unwrap() {
            let fname = field["name"].as_str().unwrap();
            let got = FIELD_LAYOUT
                .iter()
                .find(|f| f.record == rname && f.field == fname)
                .unwrap_or_else(|| panic!("field {rname}.{fname} missing in Rust"));
            assert_eq!(got.offset as u64, int(&field["offset"]), "offset of {rname}.{fname}");
            assert_eq!(got.size as u64, int(&field["size"]), "size of {rname}.{fname}");
            checked += 1;
        }
    }
    assert_eq!(checked, FIELD_LAYOUT.len(), "Rust has fields the spec does not");
}

#[test]
fn scb_is_two_cache_lines() {
    assert_eq!(core::mem::size_of::<morpheus_abi::Scb>(), 2 * morpheus_abi::CACHE_LINE_SIZE as usize);
    assert_eq!(core::mem::align_of::<morpheus_abi::Scb>(), morpheus_abi::CACHE_LINE_SIZE as usize);
}

#[test]
fn version_constants_and_enums_match_the_spec() {
    let spec = spec();
    assert_eq!(u64::from(morpheus_abi::ABI_MAJOR), int(&spec["abi"]["major"]));
    assert_eq!(u64::from(morpheus_abi::ABI_MINOR), int(&spec["abi"]["minor"]));
    for c in spec["constant"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let want = &c["value"];
        let ok = match name {
            "REGION_MAGIC" => int(want) == morpheus_abi::REGION_MAGIC,
            "REG_MAGIC" => int(want) == u64::from(morpheus_abi::REG_MAGIC),
            "CACHE_LINE_SIZE" => int(want) == u64::from(morpheus_abi::CACHE_LINE_SIZE),
            "MAX_WORKERS" => int(want) == u64::from(morpheus_abi::MAX_WORKERS),
            "DEFAULT_SLICE_NS" => int(want) == morpheus_abi::DEFAULT_SLICE_NS,
            "DEFAULT_GRACE_NS" => int(want) == morpheus_abi::DEFAULT_GRACE_NS,
            "DEFAULT_HINT_MIN_INTERVAL_NS" => int(want) == morpheus_abi::DEFAULT_HINT_MIN_INTERVAL_NS,
            "DEFAULT_THROTTLE_MAX_NS" => int(want) == morpheus_abi::DEFAULT_THROTTLE_MAX_NS,
            "HINT_RING_BYTES" => int(want) == u64::from(morpheus_abi::HINT_RING_BYTES),
            "REGION_PATH_MAX" => int(want) == u64::from(morpheus_abi::REGION_PATH_MAX),
            "SEQLOCK_MAX_RETRIES" => int(want) == u64::from(morpheus_abi::SEQLOCK_MAX_RETRIES),
            "PRESSURE_LOW_CENTI" => int(want) == u64::from(morpheus_abi::PRESSURE_LOW_CENTI),
            "PRESSURE_MEDIUM_CENTI" => int(want) == u64::from(morpheus_abi::PRESSURE_MEDIUM_CENTI),
            "PRESSURE_HIGH_CENTI" => int(want) == u64::from(morpheus_abi::PRESSURE_HIGH_CENTI),
            "REG_MESSAGE_MAX" => int(want) == u64::from(morpheus_abi::REG_MESSAGE_MAX),
            "PRIORITY_MIN" => want.as_integer() == Some(i64::from(morpheus_abi::PRIORITY_MIN)),
            "PRIORITY_MAX" => want.as_integer() == Some(i64::from(morpheus_abi::PRIORITY_MAX)),
            "ENV_REGION" => want.as_str() == Some(morpheus_abi::ENV_REGION),
            "ENV_SOCKET" => want.as_str() == Some(morpheus_abi::ENV_SOCKET),
            "DEFAULT_SOCKET_PATH" => want.as_str() == Some(morpheus_abi::DEFAULT_SOCKET_PATH),
            "PIN_DIR" => want.as_str() == Some(morpheus_abi::PIN_DIR),
            "PINNED_REGION_PATH" => want.as_str() == Some(morpheus_abi::PINNED_REGION_PATH),
            "PINNED_HINTS_PATH" => want.as_str() == Some(morpheus_abi::PINNED_HINTS_PATH),
            "SIM_REGION_PATH" => want.as_str() == Some(morpheus_abi::SIM_REGION_PATH),
            other => panic!("constant {other} is in the spec but this test does not know it; add it"),
        };
        assert!(ok, "constant {name} differs from the spec");
    }
    // Enums: every spec value decodes to the variant of that name, and back.
    let check = |ename: &str, decode: &dyn Fn(u32) -> Option<(&'static str, u32)>| {
        let e = spec["enum"].as_array().unwrap().iter().find(|e| e["name"].as_str() == Some(ename)).unwrap();
        let values = e["values"].as_array().unwrap();
        for v in values {
            let raw = int(&v["value"]) as u32;
            let (name, back) = decode(raw).unwrap_or_else(|| panic!("{ename} value {raw} unknown to Rust"));
            assert_eq!(name, v["name"].as_str().unwrap(), "{ename} value {raw}");
            assert_eq!(back, raw);
        }
        values.len()
    };
    macro_rules! enum_check {
        ($name:literal, $ty:ty) => {{
            let n = check($name, &|raw| <$ty>::try_from(raw).ok().map(|v| (v.name(), v.raw())));
            assert_eq!(n, <$ty>::ALL.len(), "{} has values the spec does not", $name);
        }};
    }
    enum_check!("scheduler_mode", morpheus_abi::SchedulerMode);
    enum_check!("worker_state", morpheus_abi::WorkerState);
    enum_check!("escalation_policy", morpheus_abi::EscalationPolicy);
    enum_check!("yield_reason", morpheus_abi::YieldReason);
    enum_check!("runtime_mode", morpheus_abi::RuntimeMode);
    enum_check!("hint_reason", morpheus_abi::HintReason);
    enum_check!("escalation_action", morpheus_abi::EscalationAction);
    enum_check!("pressure_level", morpheus_abi::PressureLevel);
    enum_check!("backend", morpheus_abi::Backend);
    enum_check!("runtime_kind", morpheus_abi::RuntimeKind);
    enum_check!("reg_op", morpheus_abi::RegOp);
    enum_check!("reg_status", morpheus_abi::RegStatus);
    enum_check!("reg_escapable", morpheus_abi::RegEscapable);
    enum_check!("error_code", morpheus_abi::ErrorCode);
}

#[test]
fn escapable_defaults_match_the_spec() {
    let spec = spec();
    for (lang, value) in spec["escapable_default"].as_table().unwrap() {
        let kind = morpheus_abi::RuntimeKind::ALL.iter().find(|k| k.name() == lang).unwrap();
        assert_eq!(morpheus_abi::escapable_default(*kind), value.as_bool().unwrap(), "escapable default of {lang}");
    }
}
