// SPDX-License-Identifier: GPL-2.0-only
//! The fuzz targets' bodies: fuzz/fuzz_targets/*.rs (cargo-fuzz, libFuzzer) call these, and so does
//! tests/fuzz_smoke.rs (a stable-toolchain run over the committed corpus plus fixed-seed mutants), so
//! both exercise exactly the same code. Each one panics on a broken invariant; anything else an input
//! can do is an error value.

use std::io::Write;
use std::mem::size_of;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use morpheus_abi as abi;
use morpheus_abi::{RegReply, RegRequest, RegStatus};

use crate::domains::{Domains, Workers};
use crate::region::RegionParams;
use crate::identity::Peer;
use crate::registry::{self, Limits, Shared};

/// In a fuzzed request, this tid stands for the calling thread (so REGISTER can succeed).
pub const CALLING_THREAD: u32 = 0xFFFF_FFFE;

/// The SDK's region parser (spec/SCB.md §1.3): `data` as a region an agent handed over (a memfd),
/// mapped and validated by `morpheus::Region::from_agent_fd`. A region it accepts is then used: every
/// slot it hands out is read (a slot outside the mapping faults), the one past the end is refused, and
/// the pressure record is read (a reader that spun on an odd seq would hang the target).
pub fn region_parser(data: &[u8]) {
    // SAFETY: a new memfd we own.
    let raw = unsafe { libc::memfd_create(c"fuzz-region".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(raw >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: as above.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut file = std::fs::File::from(fd);
    file.write_all(data).expect("write the region image");
    match morpheus::Region::from_agent_fd(OwnedFd::from(file), Path::new("fuzz")) {
        Ok(region) => {
            // Touch the first and last byte of every slot it hands out: a validation that let a slot
            // past the mapping through faults here.
            for slot in 0..region.scb_count().min(4096) {
                let p = region.scb_ptr(slot).expect("a slot below scb_count") as *const u8;
                // SAFETY: what is under test: the SDK promises the slot lies inside the mapping.
                unsafe {
                    std::ptr::read_volatile(p);
                    std::ptr::read_volatile(p.add(size_of::<abi::Scb>() - 1));
                }
            }
            assert!(region.scb_ptr(region.scb_count()).is_err(), "the slot past the end must be refused");
            // The pressure reader is bounded (SEQLOCK_MAX_RETRIES): an odd seq in the image must not hang it.
            let _ = region.pressure();
        }
        Err(e) => drop(e.to_string()),
    }
}

/// The registration-message parser: any bytes. What it accepts has the sizes, magic, version,
/// zero reserved bytes and in-range fields the spec requires (§4.1, §9).
pub fn reg_request(data: &[u8]) {
    let size = registry::request_size(data);
    match registry::parse_request(data) {
        Ok(request) => {
            assert_eq!(size.as_ref().ok(), Some(&data.len()), "accepted a request whose size field disagrees");
            let f = request.fields;
            assert_eq!(f.magic, abi::REG_MAGIC);
            assert_eq!(f.abi_major, abi::ABI_MAJOR);
            assert!(abi::RegOp::try_from(f.op).is_ok());
            assert!((abi::PRIORITY_MIN..=abi::PRIORITY_MAX).contains(&f.priority));
            assert!(data.len() <= abi::REG_MESSAGE_MAX as usize);
            assert!(data[size_of::<RegRequest>().min(data.len())..].iter().all(|&b| b == 0), "accepted nonzero unknown bytes");
        }
        Err(status) => assert!(matches!(status, RegStatus::Malformed | RegStatus::AbiMajorMismatch | RegStatus::InvalidArgument)),
    }
}

/// The agent's request handler, on a fresh per-uid placement (4 slots a uid), fed `data` cut into
/// messages the way the socket reader cuts them (prefix, then its size), all from this process.
pub fn agent_handler(data: &[u8]) {
    let params = RegionParams::enforced_with_defaults(4, abi::Backend::Sim);
    let domains = Arc::new(Domains::new(params, 1, None, crate::domains::DomainLimits { total: 4, per_user: 4 }));
    let workers = Workers::new(8);
    let limits = Limits { per_process: 3, per_uid: 4, slice_ns: abi::DEFAULT_SLICE_NS };
    let shared = Shared::new(domains, Arc::clone(&workers), None, None, limits);
    let caller = Peer::this_process().expect("pin this process");
    // SAFETY: no preconditions.
    let me = unsafe { libc::gettid() } as u32;
    let mut rest = data;
    while rest.len() >= registry::REQUEST_PREFIX {
        let Ok(size) = registry::request_size(rest) else { break };
        if size > rest.len() {
            break;
        }
        let mut message = rest[..size].to_vec();
        rest = &rest[size..];
        let tid_at = std::mem::offset_of!(RegRequest, tid);
        if message[tid_at..tid_at + 4] == CALLING_THREAD.to_le_bytes() {
            message[tid_at..tid_at + 4].copy_from_slice(&me.to_le_bytes());
        }
        let (reply, domain): (RegReply, _) = registry::handle(&shared, &caller, &message);
        assert_eq!(reply.magic, abi::REG_MAGIC);
        let status = RegStatus::try_from(reply.status).expect("a known reg_status");
        if let (RegStatus::Ok, Some(domain)) = (status, domain) {
            assert!(reply.slot < domain.region.scb_count(), "slot {} outside the region", reply.slot);
            assert_ne!(reply.slot_generation, 0);
        }
        let held = workers.lock().iter().flatten().count() as u32;
        assert!(held <= limits.per_process, "{held} slots held by one process");
    }
}
