// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Gives the shared library its installed name, so programs linked with `-lmorpheus` record
//! `libmorpheus.so.1` (the ABI major) as their dependency.

fn main() {
    let soname = format!("libmorpheus.so.{}", morpheus_major());
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    // tests/worker_layout.rs holds the soname to sdk-c/worker_layout.lock's entry for the current layout.
    println!("cargo:rustc-env=MORPHEUS_SONAME={soname}");
    println!("cargo:rerun-if-changed=build.rs");
}

/// The SDK's ABI major, from the spec through the abi crate's version-independent constant.
fn morpheus_major() -> u16 {
    // build scripts cannot depend on the crate they build, but may on morpheus-abi as a build-dependency.
    morpheus_abi::ABI_MAJOR
}
