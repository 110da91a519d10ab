// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The Morpheus Shared Control Block ABI for Rust.
//!
//! * [`raw`] holds the `#[repr(C)]` records, produced by bindgen from `abi/c/morpheus_abi.h` (itself
//!   generated from `spec/abi.toml`), so Rust uses exactly the bytes C and the BPF scheduler use.
//! * The crate root re-exports them under Rust names ([`Scb`], [`RegionHeader`], ...) and holds the
//!   constants and enums, generated from the spec.
//!
//! Meaning of every field, and the memory order each access needs: `spec/SCB.md`.
#![no_std]
#![deny(missing_docs)]

/// The scheduler's publications (spec/abi.toml `[[publication]]`) for tests that play the scheduler;
/// generated, test-only: only the `test-region` feature compiles it.
#[cfg(feature = "test-region")]
pub mod test_region;

/// Raw bindgen output: C names, C layout.
#[allow(non_camel_case_types, non_upper_case_globals, non_snake_case, missing_docs, clippy::all)]
pub mod raw {
    include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
}

/// Where the compiler put one field of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldLayout {
    /// Record name as in the spec.
    pub record: &'static str,
    /// Field name as in the spec.
    pub field: &'static str,
    /// Byte offset in the record.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
}

/// Size and alignment the compiler gave a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordLayout {
    /// Record name as in the spec.
    pub record: &'static str,
    /// `size_of` the record.
    pub size: usize,
    /// `align_of` the record.
    pub align: usize,
}

#[doc(hidden)]
#[macro_export]
macro_rules! field_layout {
    ($ty:ty, $rec:literal, $field:ident) => {
        $crate::FieldLayout {
            record: $rec,
            field: stringify!($field),
            offset: core::mem::offset_of!($ty, $field),
            size: {
                const fn size_of_target<T>(_: fn(&$ty) -> &T) -> usize {
                    core::mem::size_of::<T>()
                }
                size_of_target(|r: &$ty| &r.$field)
            },
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! record_layout {
    ($ty:ty, $rec:literal) => {
        $crate::RecordLayout {
            record: $rec,
            size: core::mem::size_of::<$ty>(),
            align: core::mem::align_of::<$ty>(),
        }
    };
}

/// Shared Control Block of one worker (128 bytes, 64-byte aligned).
pub type Scb = raw::morpheus_scb;
/// Header at the start of every region.
pub type RegionHeader = raw::morpheus_region_header;
/// Global pressure record inside the region header.
pub type Pressure = raw::morpheus_pressure;
/// Hint ring-buffer record.
pub type Hint = raw::morpheus_hint;
/// Escalation event record.
pub type EscalationEvent = raw::morpheus_escalation_event;
/// Registration request message.
pub type RegRequest = raw::morpheus_reg_request;
/// Registration reply message.
pub type RegReply = raw::morpheus_reg_reply;

mod generated;
pub use generated::*;
