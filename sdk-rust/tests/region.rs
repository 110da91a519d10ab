// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Attaching to regions: discovery and every header check of spec/SCB.md §1.3, each with its error.

use std::{ffi::OsString, path::Path};

use morpheus::{
    region::{discover_with, Discovered},
    testing::{unique_path, SimRegion, SimRegionBuilder},
    DetachReason, ErrorCode, Region,
};
use morpheus_abi::{ABI_MAJOR, REGION_MAGIC};

fn open_err(builder: SimRegionBuilder) -> morpheus::Error {
    let region = builder.create(unique_path("bad")).unwrap();
    let err = Region::open(region.path()).expect_err("a bad region must be refused");
    // Refusing writes nothing: the file is byte-identical afterwards (checked on the generation word).
    err
}

#[test]
fn a_valid_region_attaches() {
    let sim = SimRegion::temp(4);
    let region = Region::open(sim.path()).unwrap();
    assert_eq!(region.scb_count(), 4);
    assert_eq!(region.attached_generation(), 1);
    assert!(region.is_current());
    assert_eq!(region.backing(), morpheus::Backing::File);
}

#[test]
fn wrong_magic_is_bad_magic_naming_both() {
    let err = open_err(SimRegionBuilder { magic: 0x1234, ..Default::default() });
    assert_eq!(err.code(), ErrorCode::BadMagic);
    let text = err.to_string();
    assert!(text.starts_with("BAD_MAGIC"), "{text}");
    assert!(text.contains(&format!("{REGION_MAGIC:#018x}")) && text.contains("0x0000000000001234"), "{text}");
}

#[test]
fn other_major_is_abi_major_mismatch_naming_both_versions() {
    let err = open_err(SimRegionBuilder { abi_major: ABI_MAJOR + 1, ..Default::default() });
    assert_eq!(err.code(), ErrorCode::AbiMajorMismatch);
    let text = err.to_string();
    assert!(text.contains(&format!("major {ABI_MAJOR}")) && text.contains(&format!("major {}", ABI_MAJOR + 1)), "{text}");
}

#[test]
fn a_newer_minor_is_accepted() {
    let sim = SimRegionBuilder { abi_minor: 99, ..Default::default() }.create(unique_path("minor")).unwrap();
    Region::open(sim.path()).unwrap();
}

#[test]
fn a_file_smaller_than_a_header_is_truncated() {
    for len in [0u64, 1, 127] {
        let err = open_err(SimRegionBuilder { file_len: Some(len), ..Default::default() });
        assert_eq!(err.code(), ErrorCode::RegionTruncated, "len {len}: {err}");
        assert!(err.to_string().contains(&format!("found {len}")), "{err}");
    }
}

#[test]
fn a_file_shorter_than_its_slots_is_truncated() {
    let err = open_err(SimRegionBuilder { scb_count: 4, file_len: Some(128 + 3 * 128), ..Default::default() });
    assert_eq!(err.code(), ErrorCode::RegionTruncated);
    assert!(err.to_string().contains("needed at least 640 bytes, found 512"), "{err}");
}

#[test]
fn a_stride_smaller_than_the_scb_is_bad_layout() {
    let err = open_err(SimRegionBuilder { scb_stride: 64, ..Default::default() });
    assert_eq!(err.code(), ErrorCode::BadLayout);
    assert!(err.to_string().contains("scb_stride >= 128") && err.to_string().contains("found 64"), "{err}");
}

#[test]
fn unaligned_sizes_are_bad_layout() {
    let err = open_err(SimRegionBuilder { header_size: 130, ..Default::default() });
    assert_eq!(err.code(), ErrorCode::BadLayout);
    let err = open_err(SimRegionBuilder { scb_stride: 160, ..Default::default() });
    assert_eq!(err.code(), ErrorCode::BadLayout);
    // Larger, aligned strides (a newer scheduler) are fine.
    let sim = SimRegionBuilder { scb_stride: 192, header_size: 256, ..Default::default() }
        .create(unique_path("stride"))
        .unwrap();
    Region::open(sim.path()).unwrap();
}

#[test]
fn an_unknown_required_feature_is_refused_naming_the_bits() {
    let err = open_err(SimRegionBuilder { required_features: 1 << 40, ..Default::default() });
    assert_eq!(err.code(), ErrorCode::UnknownRequiredFeature);
    assert!(err.to_string().contains("0x10000000000"), "{err}");
}

#[test]
fn known_is_every_feature_value_in_one_namespace_for_both_fields() {
    // An undefined low bit is refused too when required (bits are not split into optional/required halves).
    let err = open_err(SimRegionBuilder { required_features: 1 << 5, ..Default::default() });
    assert_eq!(err.code(), ErrorCode::UnknownRequiredFeature);
    assert!(err.to_string().contains("0x20"), "{err}");
    // Every bit this ABI defines may be required.
    let region = SimRegionBuilder { required_features: morpheus_abi::feature::KNOWN, ..Default::default() }
        .create(unique_path("known"))
        .unwrap();
    Region::open(region.path()).expect("every KNOWN bit is understood");
    // Unknown optional bits are ignored.
    let region = SimRegionBuilder { optional_features: u64::MAX, ..Default::default() }.create(unique_path("opt")).unwrap();
    Region::open(region.path()).expect("optional bits may be ignored");
}

#[test]
fn a_layout_whose_size_overflows_is_truncated_not_wrapped() {
    let err = open_err(SimRegionBuilder {
        scb_count: u32::MAX,
        scb_stride: 0xFFFF_FFC0,
        file_len: Some(4096),
        ..Default::default()
    });
    assert_eq!(err.code(), ErrorCode::RegionTruncated);
    assert!(err.to_string().contains(&format!("{}", 128u64 + u32::MAX as u64 * 0xFFFF_FFC0)), "{err}");
}

#[test]
fn a_not_ready_region_reports_not_ready_even_while_its_layout_is_half_written() {
    // generation is loaded first but checked last: a scheduler still writing the header (generation 0)
    // gives the first failing check's error, as before, and NOT_READY when the layout is whole.
    let err = open_err(SimRegionBuilder { generation: 0, magic: 0, ..Default::default() });
    assert_eq!(err.code(), ErrorCode::BadMagic);
    let err = open_err(SimRegionBuilder { generation: 0, ..Default::default() });
    assert_eq!(err.code(), ErrorCode::NotReady);
}

#[test]
fn generation_zero_is_not_ready() {
    let err = open_err(SimRegionBuilder { generation: 0, ..Default::default() });
    assert_eq!(err.code(), ErrorCode::NotReady);
}

#[test]
fn a_missing_explicit_path_is_io_not_detached() {
    let err = Region::open("/nonexistent/morpheus/region").unwrap_err();
    assert_eq!(err.code(), ErrorCode::Io);
    assert!(err.to_string().contains("/nonexistent/morpheus/region"), "{err}");
}

#[test]
fn discovery_follows_the_spec_order() {
    let missing = Path::new("/nonexistent/morpheus/x");
    let sim = SimRegion::temp(2);
    // Empty env forces detached even when a region exists.
    match discover_with(Some(OsString::new()), sim.path(), sim.path()).unwrap() {
        Discovered::Detached(reason) => assert_eq!(reason, DetachReason::ForcedByEnvironment),
        other => panic!("expected detached, got {other:?}"),
    }
    // Env path wins.
    let Discovered::Attached(r) = discover_with(Some(sim.path().into()), missing, missing).unwrap() else {
        panic!("expected attached")
    };
    assert_eq!(r.path(), sim.path());
    // An env path that does not exist is an error.
    assert_eq!(discover_with(Some(missing.into()), missing, missing).unwrap_err().code(), ErrorCode::Io);
    // Pinned path before the sim path; the sim path when the pinned one is missing.
    let other = SimRegion::temp(3);
    let Discovered::Attached(r) = discover_with(None, other.path(), sim.path()).unwrap() else { panic!() };
    assert_eq!(r.scb_count(), 3);
    let Discovered::Attached(r) = discover_with(None, missing, sim.path()).unwrap() else { panic!() };
    assert_eq!(r.scb_count(), 2);
    // Nothing: detached.
    match discover_with(None, missing, missing).unwrap() {
        Discovered::Detached(reason) => assert_eq!(reason, DetachReason::NoScheduler),
        other => panic!("expected detached, got {other:?}"),
    }
}

#[test]
fn a_mapping_survives_the_scheduler_replacing_the_file() {
    let sim = SimRegion::temp(2);
    let region = Region::open(sim.path()).unwrap();
    let path = sim.path().to_owned();
    drop(sim); // unlinks the file, as a restarting scheduler does
    let replacement = SimRegionBuilder { generation: 7, ..Default::default() }.create(&path).unwrap();
    // The old mapping is still readable memory and still says generation 1.
    assert_eq!(region.current_generation(), 1);
    assert_eq!(Region::open(replacement.path()).unwrap().attached_generation(), 7);
}

#[test]
fn pressure_is_read_under_the_seqlock() {
    let sim = SimRegion::temp(1);
    let region = Region::open(sim.path()).unwrap();
    assert_eq!(region.pressure().unwrap().level, Some(morpheus::PressureLevel::None));
    sim.set_pressure_level(morpheus::PressureLevel::High);
    assert_eq!(region.pressure().unwrap().level, Some(morpheus::PressureLevel::High));
}
