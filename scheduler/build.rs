// SPDX-License-Identifier: GPL-2.0-only
//! Builds the sched_ext BPF program (src/bpf/main.bpf.c) and its Rust skeleton with scx_cargo's
//! BpfBuilder when the `kernel` feature is on. The BPF side includes the generated
//! abi/c/morpheus_abi.h and the shared policy header src/policy/morpheus_policy.h in place (through
//! src/bpf/intf.h), never copies of them.

fn main() {
    #[cfg(feature = "kernel")]
    kernel::build();
}

#[cfg(feature = "kernel")]
mod kernel {
    use std::env;
    use std::path::{Path, PathBuf};

    /// Debian ships versioned clang binaries; the BPF code is tested with clang 19.
    const PREFERRED_CLANG: &str = "clang-19";

    fn on_path(program: &str) -> bool {
        env::var_os("PATH")
            .map(|paths| env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
            .unwrap_or(false)
    }

    pub fn build() {
        let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
        // BpfBuilder reads BPF_CLANG; an explicit setting wins, else clang-19 when installed.
        if env::var_os("BPF_CLANG").is_none() && on_path(PREFERRED_CLANG) {
            env::set_var("BPF_CLANG", PREFERRED_CLANG);
        }

        // BpfBuilder only watches src/bpf/*; the headers it includes from elsewhere must rebuild too.
        for header in ["../abi/c/morpheus_abi.h", "src/policy/morpheus_policy.h"] {
            let path = manifest.join(header);
            assert!(Path::new(&path).is_file(), "{} is missing", path.display());
            println!("cargo:rerun-if-changed={}", path.display());
        }

        scx_cargo::BpfBuilder::new()
            .expect("scx_cargo could not set up the BPF build (is clang-19 installed? see tools/setup.sh)")
            .enable_intf("src/bpf/intf.h", "bpf_intf.rs")
            .enable_skel("src/bpf/main.bpf.c", "bpf")
            .build()
            .expect("building the BPF scheduler failed");
    }
}
