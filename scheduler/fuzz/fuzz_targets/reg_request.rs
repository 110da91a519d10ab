// SPDX-License-Identifier: GPL-2.0-only
//! libFuzzer target: scx_morpheus::fuzzing::reg_request (see src/fuzzing.rs for what it checks).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| scx_morpheus::fuzzing::reg_request(data));
