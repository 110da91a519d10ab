// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The kernel backing: a region in a pinned `BPF_F_MMAPABLE` array map, created here with bpf(2) on a
//! private bpffs mount, attached through the same path a real pinned region takes. Needs root and
//! bpf(2) (not sched_ext): `cargo test --test pinned_map -- --ignored`; `//sdk-rust:pinned_map_test`.

use morpheus::{
    testing::{bpf_map_create, bpf_obj_pin, BpfMount, SimRegion, SimRegionBuilder, BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_HASH},
    Backing, Config, ErrorCode, Region,
};
use morpheus_abi::WorkerState;

const NEEDS: &str = "needs root and bpf(2): run with --ignored (//sdk-rust:pinned_map_test does)";

#[test]
#[ignore = "needs root and bpf(2): run with --ignored (//sdk-rust:pinned_map_test does)"]
fn a_region_in_a_pinned_map_attaches_and_works_like_a_file() {
    let sim = SimRegion::builder().create_pinned().expect(NEEDS);
    let region = Region::open(sim.path()).unwrap();
    assert_eq!(region.backing(), Backing::PinnedMap);
    assert_eq!(region.scb_count(), SimRegionBuilder::default().scb_count);

    let worker = Config::default().region_path(sim.path()).direct_slot(3).register().unwrap();
    assert_eq!(sim.snapshot(3).worker_state, WorkerState::Running.raw());
    let seq = sim.request_yield(3);
    assert!(worker.checkpoint_sync());
    assert_eq!(sim.snapshot(3).last_ack_seq, seq, "the ack is visible through the map's own mapping");
    {
        let _g = worker.critical_section();
        assert_eq!(sim.snapshot(3).in_critical, 1);
    }
    drop(worker);
    assert_eq!(sim.snapshot(3).worker_state, WorkerState::Init.raw());
}

#[test]
#[ignore = "needs root and bpf(2): run with --ignored (//sdk-rust:pinned_map_test does)"]
fn a_bad_region_in_a_pinned_map_is_refused_like_a_file() {
    let sim = SimRegionBuilder { magic: 7, ..Default::default() }.create_pinned().expect(NEEDS);
    assert_eq!(Region::open(sim.path()).unwrap_err().code(), ErrorCode::BadMagic);
    let sim = SimRegionBuilder { scb_stride: 64, ..Default::default() }.create_pinned().expect(NEEDS);
    assert_eq!(Region::open(sim.path()).unwrap_err().code(), ErrorCode::BadLayout);
}

#[test]
#[ignore = "needs root and bpf(2): run with --ignored (//sdk-rust:pinned_map_test does)"]
fn a_pinned_map_of_the_wrong_kind_is_io_naming_what_was_expected() {
    let mount = BpfMount::new().expect(NEEDS);
    for (name, map_type, flags) in [("plain-array", BPF_MAP_TYPE_ARRAY, 0), ("hash", BPF_MAP_TYPE_HASH, 0)] {
        let fd = bpf_map_create(map_type, 4, 1152, 1, flags).expect(NEEDS);
        let pin = mount.dir.join(name);
        bpf_obj_pin(&fd, &pin).unwrap();
        let err = Region::open(&pin).unwrap_err();
        assert_eq!(err.code(), ErrorCode::Io, "{name}");
        assert!(err.to_string().contains("expected a BPF_F_MMAPABLE array map with 1 entry"), "{err}");
    }
}
