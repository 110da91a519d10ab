// SPDX-License-Identifier: GPL-2.0-only
//! Builds the BPF programs and their Rust skeletons with scx_cargo's BpfBuilder when the `kernel`
//! feature is on. The sched_ext program is four files by concern (src/bpf/morpheus.bpf.h lists them),
//! each compiled on its own and joined by libbpf's static linker into one object, `bpf.bpf.o` in
//! OUT_DIR (the per-file objects stay beside it: tests/bpf_release.rs reads the worker layer's). The
//! tracing backend's program (trace.bpf.c with the same worker.bpf.c and replay.bpf.c) is linked the
//! same way into OUT_DIR/trace/bpf.bpf.o. The
//! BPF side includes the generated abi/c/morpheus_abi.h and the shared policy header
//! src/policy/morpheus_policy.h in place (through src/bpf/intf.h), never copies of them.

fn main() {
    build_id();
    #[cfg(feature = "kernel")]
    kernel::build();
}

/// The build id `--version` prints (src/build_id.rs), in the scx_utils build_id shape: the commit
/// (`-dirty` with uncommitted changes) and the target triple. Outside a git checkout (a source
/// tarball) the commit is left out.
fn build_id() {
    use std::process::Command;
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let sha = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_default();
    let dirty = !sha.is_empty() && git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    println!("cargo:rustc-env=MORPHEUS_GIT_SHA={sha}");
    println!("cargo:rustc-env=MORPHEUS_GIT_DIRTY={}", if dirty { "1" } else { "" });
    println!("cargo:rustc-env=MORPHEUS_TARGET={}", std::env::var("TARGET").unwrap_or_default());
    // A new commit changes HEAD (or the ref it points to) and the index.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        let dir = std::path::Path::new(&dir);
        let dir = if dir.is_absolute() { dir.to_owned() } else { std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default()).join(dir) };
        for file in ["HEAD", "index"] {
            println!("cargo:rerun-if-changed={}", dir.join(file).display());
        }
        if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
            if let Some(common) = git(&["rev-parse", "--git-common-dir"]) {
                let common = std::path::Path::new(&common);
                let common = if common.is_absolute() { common.to_owned() } else { std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default()).join(common) };
                println!("cargo:rerun-if-changed={}", common.join(reference).display());
            }
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
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
            .add_source("src/bpf/cpumax.bpf.c")
            .add_source("src/bpf/worker.bpf.c")
            .add_source("src/bpf/replay.bpf.c")
            .compile_link_gen()
            .expect("building the BPF scheduler failed");

        // The tracing backend's object (src/bpf/trace.bpf.c): the same worker layer and replays, linked
        // with the tracing host instead of the sched_ext ops. compile_link_gen names its outputs
        // bpf.bpf.o and bpf_skel.rs in OUT_DIR, so this one is built in OUT_DIR/trace.
        let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
        let trace_out = out.join("trace");
        std::fs::create_dir_all(&trace_out).expect("cannot create OUT_DIR/trace");
        env::set_var("OUT_DIR", &trace_out);
        scx_cargo::BpfBuilder::new()
            .expect("scx_cargo could not set up the BPF build of the tracing backend")
            .enable_skel("src/bpf/trace.bpf.c", "bpf")
            .add_source("src/bpf/worker.bpf.c")
            .add_source("src/bpf/replay.bpf.c")
            .compile_link_gen()
            .expect("building the BPF tracing backend failed");
        env::set_var("OUT_DIR", &out);
    }
}
