// SPDX-License-Identifier: GPL-2.0-only
//! Compiles src/policy/policy.c (out-of-line copies of the policy header's inline functions) and
//! generates the Rust declarations from the same header with bindgen, so no rule or layout of the
//! policy is written twice.

use std::{env, path::PathBuf};

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let policy_dir = manifest.join("../src/policy");
    let abi_dir = manifest.join("../../abi/c");
    for file in ["policy.c", "policy_ffi.h", "morpheus_policy.h"] {
        println!("cargo:rerun-if-changed={}", policy_dir.join(file).display());
    }
    println!("cargo:rerun-if-changed={}", abi_dir.join("morpheus_abi.h").display());

    cc::Build::new()
        .file(policy_dir.join("policy.c"))
        .include(&policy_dir)
        .include(&abi_dir)
        .flag_if_supported("-std=c11")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("morpheus_policy");

    let header = policy_dir.join("policy_ffi.h");
    let bindings = bindgen::Builder::default()
        .header(header.to_str().expect("header path is UTF-8"))
        .clang_arg(format!("-I{}", abi_dir.display()))
        .allowlist_function("morpheus_ffi_.*")
        .allowlist_type("morpheus_gate_config|morpheus_gate_input|morpheus_gate_verdict|morpheus_hint_decision|morpheus_escalation|morpheus_escalation_step|morpheus_yield_point|morpheus_verdict_tally")
        .allowlist_var("MORPHEUS_GATE_.*|MORPHEUS_HINT_.*|MORPHEUS_STEP_.*|MORPHEUS_YIELD_POINT_.*")
        .blocklist_type("morpheus_u(8|16|32|64)|morpheus_s(32|64)|morpheus_scb|morpheus_region_header|morpheus_pressure")
        .raw_line("use morpheus_abi::raw::{morpheus_scb, morpheus_u32, morpheus_u64};")
        .rustified_enum("morpheus_gate_verdict|morpheus_hint_decision|morpheus_escalation_step|morpheus_yield_point")
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(false)
        .use_core()
        .generate()
        .unwrap_or_else(|e| panic!("bindgen failed on {}: {e}", header.display()));
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("policy_bindings.rs");
    bindings.write_to_file(&out).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
}
