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

/// One eBPF instruction (linux/bpf.h `struct bpf_insn`).
#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    regs: u8, // dst in the low nibble, src in the high nibble
    off: i16,
    imm: i32,
}

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn { code, regs: dst | (src << 4), off, imm }
}

fn bpf(cmd: libc::c_long, attr: &mut [u64; 16]) -> libc::c_long {
    // SAFETY: a zeroed bpf_attr-sized buffer with the command's fields set.
    unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), std::mem::size_of_val(attr)) }
}

/// A socket-filter program that publishes `hint` into the ring buffer `ring_fd` with
/// bpf_ringbuf_output, run once through BPF_PROG_TEST_RUN: the kernel is the producer.
fn produce_hint_with_bpf(ring_fd: i32, hint: &morpheus_abi::Hint) {
    const BPF_ST_MEM_W: u8 = 0x62;
    const BPF_LD_IMM64: u8 = 0x18;
    const BPF_MOV64_X: u8 = 0xbf;
    const BPF_MOV64_K: u8 = 0xb7;
    const BPF_ADD64_K: u8 = 0x07;
    const BPF_CALL: u8 = 0x85;
    const BPF_EXIT: u8 = 0x95;
    const BPF_FUNC_RINGBUF_OUTPUT: i32 = 130;
    const BPF_PSEUDO_MAP_FD: u8 = 1;
    let size = std::mem::size_of::<morpheus_abi::Hint>();
    // SAFETY: Hint is plain integers.
    let bytes = unsafe { std::slice::from_raw_parts(hint as *const _ as *const u8, size) };
    let mut prog: Vec<Insn> = bytes
        .chunks(4)
        .enumerate()
        .map(|(i, w)| insn(BPF_ST_MEM_W, 10, 0, -(size as i16) + 4 * i as i16, i32::from_le_bytes(w.try_into().unwrap())))
        .collect();
    prog.extend([
        insn(BPF_LD_IMM64, 1, BPF_PSEUDO_MAP_FD, 0, ring_fd),
        insn(0, 0, 0, 0, 0),
        insn(BPF_MOV64_X, 2, 10, 0, 0),
        insn(BPF_ADD64_K, 2, 0, 0, -(size as i32)),
        insn(BPF_MOV64_K, 3, 0, 0, size as i32),
        insn(BPF_MOV64_K, 4, 0, 0, 0),
        insn(BPF_CALL, 0, 0, 0, BPF_FUNC_RINGBUF_OUTPUT),
        insn(BPF_MOV64_K, 0, 0, 0, 0),
        insn(BPF_EXIT, 0, 0, 0, 0),
    ]);
    let license = c"GPL";
    let mut log = vec![0u8; 65536];
    let mut attr = [0u64; 16];
    attr[0] = 1 | ((prog.len() as u64) << 32); // BPF_PROG_TYPE_SOCKET_FILTER, insn_cnt
    attr[1] = prog.as_ptr() as u64;
    attr[2] = license.as_ptr() as u64;
    attr[3] = 1 | ((log.len() as u64) << 32); // log_level, log_size
    attr[4] = log.as_mut_ptr() as u64;
    let prog_fd = bpf(5, &mut attr); // BPF_PROG_LOAD
    let verifier = String::from_utf8_lossy(&log[..log.iter().position(|&b| b == 0).unwrap_or(0)]).into_owned();
    assert!(prog_fd >= 0, "BPF_PROG_LOAD: {}\n{verifier}", std::io::Error::last_os_error());
    let packet = [0u8; 64];
    let mut attr = [0u64; 16];
    attr[0] = prog_fd as u64; // prog_fd, retval
    attr[1] = packet.len() as u64; // data_size_in, data_size_out
    attr[2] = packet.as_ptr() as u64; // data_in
    attr[4] = 1; // repeat
    assert_eq!(bpf(10, &mut attr), 0, "BPF_PROG_TEST_RUN: {}", std::io::Error::last_os_error()); // BPF_PROG_TEST_RUN
    // SAFETY: our fd.
    unsafe { libc::close(prog_fd as i32) };
}

#[test]
#[ignore = "needs root and bpf(2): run with --ignored (//sdk-rust:pinned_map_test does)"]
fn hints_published_by_a_bpf_program_are_consumed_from_the_pinned_ring() {
    use std::os::fd::AsRawFd;
    const BPF_MAP_TYPE_RINGBUF: u32 = 27;
    let mount = BpfMount::new().expect(NEEDS);
    let ring = bpf_map_create(BPF_MAP_TYPE_RINGBUF, 0, 0, 4096, 0).expect(NEEDS);
    let pin = mount.dir.join(morpheus::hints::default_pinned_path().file_name().unwrap());
    bpf_obj_pin(&ring, &pin).unwrap();
    let mut hints = morpheus::hints::HintRing::open_pinned(&pin).unwrap();
    assert_eq!(hints.poll(|_| panic!("empty ring")).hints, 0);

    for seq in 1..=3u64 {
        let hint = morpheus_abi::Hint {
            timestamp_ns: 1000 * seq,
            preempt_seq: seq,
            slot: 2,
            tid: 4242,
            reason: morpheus_abi::HintReason::SliceOverrun.raw(),
            overrun_ns: 500,
            ..Default::default()
        };
        produce_hint_with_bpf(ring.as_raw_fd(), &hint);
    }
    let mut seen = Vec::new();
    let stats = hints.poll(|h| seen.push((h.preempt_seq, h.slot, h.tid, h.overrun_ns)));
    assert_eq!(stats.hints, 3);
    assert_eq!(seen, vec![(1, 2, 4242, 500), (2, 2, 4242, 500), (3, 2, 4242, 500)]);
    assert_eq!(hints.poll(|_| panic!("consumed already")).hints, 0);

    // A pinned map that is not a ring buffer is refused, naming what was expected.
    let array = bpf_map_create(BPF_MAP_TYPE_ARRAY, 4, 8, 1, 0).unwrap();
    let wrong = mount.dir.join("not-a-ring");
    bpf_obj_pin(&array, &wrong).unwrap();
    let err = morpheus::hints::HintRing::open_pinned(&wrong).unwrap_err();
    assert!(err.to_string().contains("expected a ring buffer"), "{err}");
}
