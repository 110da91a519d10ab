// SPDX-License-Identifier: GPL-2.0-only
//! The version `--version` prints and the stats carry, in scx_utils' build_id shape:
//! `<semver>-g<commit>[-dirty] <target>[/debug]`, plus the ABI this agent publishes. build.rs
//! provides the commit and the target.

use std::sync::LazyLock;

use morpheus_abi as abi;

/// e.g. `0.1.0-g1a2b3c4d5e6f x86_64-unknown-linux-gnu/debug (ABI 1.3)`.
pub static FULL_VERSION: LazyLock<String> = LazyLock::new(|| {
    full_version(env!("CARGO_PKG_VERSION"), env!("MORPHEUS_GIT_SHA"), !env!("MORPHEUS_GIT_DIRTY").is_empty(), env!("MORPHEUS_TARGET"))
});

fn full_version(semver: &str, sha: &str, dirty: bool, target: &str) -> String {
    let mut version = semver.to_owned();
    if !sha.is_empty() {
        version.push_str("-g");
        version.push_str(sha);
        if dirty {
            version.push_str("-dirty");
        }
    }
    if !target.is_empty() {
        version.push(' ');
        version.push_str(target);
        if cfg!(debug_assertions) {
            version.push_str("/debug");
        }
    }
    version.push_str(&format!(" (ABI {}.{})", abi::ABI_MAJOR, abi::ABI_MINOR));
    version
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carries_commit_dirty_flag_and_target() {
        let v = full_version("1.2.3", "abcdef012345", true, "x86_64-unknown-linux-gnu");
        assert!(v.starts_with("1.2.3-gabcdef012345-dirty x86_64-unknown-linux-gnu"), "{v}");
        assert!(v.ends_with(&format!("(ABI {}.{})", abi::ABI_MAJOR, abi::ABI_MINOR)), "{v}");
        assert!(full_version("1.2.3", "", false, "t").starts_with("1.2.3 t"));
    }
}
