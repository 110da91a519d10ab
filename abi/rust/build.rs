// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The Rust types of the ABI come from the generated C header through bindgen, so Rust and C (and the
//! BPF scheduler, which includes the same header) can never disagree on a layout.

use std::{env, path::PathBuf};

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let header = manifest.join("morpheus_abi.h");
    println!("cargo:rerun-if-changed={}", header.display());
    // Lets dependents (e.g. sdk-c's build) find the header: DEP_MORPHEUS_ABI_INCLUDE.
    println!("cargo:include={}", header.parent().unwrap().display());

    let bindings = bindgen::Builder::default()
        .header(header.to_str().expect("header path is UTF-8"))
        .allowlist_type("morpheus_.*")
        .derive_default(true)
        .derive_debug(true)
        .derive_copy(true)
        .derive_eq(true)
        .layout_tests(false) // our own layout test checks every offset against spec/abi.toml instead
        .use_core()
        .generate()
        .unwrap_or_else(|e| panic!("bindgen failed on {}: {e}", header.display()));
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("bindings.rs");
    bindings.write_to_file(&out).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
}
