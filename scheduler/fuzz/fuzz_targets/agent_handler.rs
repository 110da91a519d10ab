// SPDX-License-Identifier: GPL-2.0-only
//! libFuzzer target: scx_morpheus::fuzzing::agent_handler (see src/fuzzing.rs for what it checks).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| scx_morpheus::fuzzing::agent_handler(data));
