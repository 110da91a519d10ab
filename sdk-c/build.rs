// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Gives the shared library its installed name, so programs linked with `-lmorpheus` record the
//! soname of the `struct morpheus_worker` layout they were compiled against as their dependency.

fn main() {
    // The spec's soname for the current worker layout (record `worker` of spec/abi.toml, through the
    // generated constants: build scripts may depend on morpheus-abi as a build-dependency).
    let soname = morpheus_abi::WORKER_SONAME;
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    println!("cargo:rustc-env=MORPHEUS_SONAME={soname}");
    println!("cargo:rerun-if-changed=build.rs");
}
