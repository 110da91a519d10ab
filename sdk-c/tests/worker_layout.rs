// SPDX-License-Identifier: Apache-2.0 OR MIT
//! `struct morpheus_worker` is the Rust `RawWorker` seen through cbindgen, and compiled C programs read
//! its fields inline. This test holds three views of it together, failing by field name:
//! * Rust's layout (`offset_of!`) against the entry of `worker_layout.lock` for `WORKER_LAYOUT_VERSION`
//!   (a reordered, resized or added field fails until the version is bumped and a new entry added);
//! * the lock's entries against the library's soname (a new layout needs a new soname);
//! * the committed `include/morpheus.h`, compiled by the C compiler, against Rust's layout.

use std::{collections::BTreeMap, mem::offset_of, path::Path, process::Command};

use morpheus::raw::{RawWorker, WORKER_LAYOUT_VERSION};

type Layout = BTreeMap<String, (usize, usize)>;

macro_rules! fields {
    ($($field:ident),* $(,)?) => {{
        let mut out = Layout::new();
        $(
            let size = {
                fn size_of_field<T>(_: fn(&RawWorker) -> &T) -> usize {
                    std::mem::size_of::<T>()
                }
                size_of_field(|w: &RawWorker| &w.$field)
            };
            out.insert(stringify!($field).to_owned(), (offset_of!(RawWorker, $field), size));
        )*
        out
    }};
}

/// Rust's layout. Listing a field that does not exist fails to compile; a new field shows in the size.
fn rust_layout() -> (usize, Layout) {
    let fields = fields!(
        preempt_seq,
        cached_ack,
        critical_depth,
        reserved,
        in_critical,
        generation,
        attached_generation,
        inner
    );
    (std::mem::size_of::<RawWorker>(), fields)
}

struct Entry {
    version: u32,
    soname: String,
    size: usize,
    fields: Layout,
}

fn lock() -> Vec<Entry> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("worker_layout.lock");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut entries: Vec<Entry> = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        if let Some(version) = line.strip_prefix("[layout ").and_then(|l| l.strip_suffix(']')) {
            let version = version.parse().unwrap_or_else(|_| panic!("worker_layout.lock: bad section {line}"));
            entries.push(Entry { version, soname: String::new(), size: 0, fields: Layout::new() });
            continue;
        }
        let entry = entries.last_mut().unwrap_or_else(|| panic!("worker_layout.lock: {line} outside a [layout N]"));
        let (key, value) = line.split_once('=').unwrap_or_else(|| panic!("worker_layout.lock: bad line {line}"));
        match key.trim() {
            "soname" => entry.soname = value.trim().to_owned(),
            "size" => entry.size = value.trim().parse().expect("size"),
            "fields" => {
                for field in value.split_whitespace() {
                    let (name, rest) = field.split_once('@').expect("name@offset+size");
                    let (offset, size) = rest.split_once('+').expect("name@offset+size");
                    entry.fields.insert(name.to_owned(), (offset.parse().unwrap(), size.parse().unwrap()));
                }
            }
            other => panic!("worker_layout.lock: unknown key {other}"),
        }
    }
    entries
}

/// Differences between two layouts, one line per field.
fn differences(what: &str, expected_name: &str, expected: &(usize, Layout), found: &(usize, Layout)) -> Vec<String> {
    let mut out = Vec::new();
    if expected.0 != found.0 {
        out.push(format!("sizeof(struct morpheus_worker): {expected_name} says {}, {what} has {}", expected.0, found.0));
    }
    for name in expected.1.keys().chain(found.1.keys()).collect::<std::collections::BTreeSet<_>>() {
        match (expected.1.get(name), found.1.get(name)) {
            (Some(e), Some(f)) if e == f => {}
            (Some((eo, es)), Some((fo, fs))) => out.push(format!(
                "{name}: {expected_name} has it at offset {eo} ({es} bytes), {what} at offset {fo} ({fs} bytes)"
            )),
            (Some(_), None) => out.push(format!("{name}: in {expected_name}, missing from {what}")),
            (None, Some(_)) => out.push(format!("{name}: in {what}, not in {expected_name}")),
            (None, None) => unreachable!(),
        }
    }
    out
}

#[test]
fn raw_worker_matches_the_locked_layout_of_its_version() {
    let entries = lock();
    let entry = entries.iter().find(|e| e.version == WORKER_LAYOUT_VERSION).unwrap_or_else(|| {
        panic!("sdk-c/worker_layout.lock has no [layout {WORKER_LAYOUT_VERSION}] for WORKER_LAYOUT_VERSION")
    });
    let problems = differences("RawWorker", &format!("[layout {WORKER_LAYOUT_VERSION}]"), &(entry.size, entry.fields.clone()), &rust_layout());
    assert!(
        problems.is_empty(),
        "struct morpheus_worker changed under a released layout version:\n  {}\nA layout is never changed in \
         place: bump WORKER_LAYOUT_VERSION (sdk-rust/src/raw.rs) and MORPHEUS_WORKER_LAYOUT_VERSION \
         (sdk-c/src/lib.rs, morpheus_inline.h), append a [layout N] entry to sdk-c/worker_layout.lock, and \
         give the library a new soname (sdk-c/README.md).",
        problems.join("\n  ")
    );
}

#[test]
fn every_layout_has_its_own_soname_and_the_library_carries_the_current_one() {
    let entries = lock();
    let mut seen = BTreeMap::new();
    for e in &entries {
        if let Some(other) = seen.insert(e.soname.clone(), e.version) {
            panic!("layouts {other} and {} share the soname {}: a new layout needs a new soname", e.version, e.soname);
        }
    }
    let current = entries.iter().find(|e| e.version == WORKER_LAYOUT_VERSION).expect("current layout in the lock");
    assert_eq!(
        env!("MORPHEUS_SONAME"),
        current.soname,
        "build.rs gives the library a soname other than the one worker_layout.lock names for layout {WORKER_LAYOUT_VERSION}"
    );
}

#[test]
fn the_committed_c_header_lays_out_struct_morpheus_worker_as_rust_does() {
    let sdk_c = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("morpheus-worker-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (_, rust) = rust_layout();
    let mut program = String::from("#include <stddef.h>\n#include <stdio.h>\n#include \"morpheus.h\"\nint main(void)\n{\n");
    program += "\tprintf(\"sizeof %zu\\n\", sizeof(struct morpheus_worker));\n";
    for name in rust.keys() {
        program += &format!(
            "\tprintf(\"{name} %zu %zu\\n\", offsetof(struct morpheus_worker, {name}), sizeof(((struct morpheus_worker *)0)->{name}));\n"
        );
    }
    program += "\treturn 0;\n}\n";
    let source = dir.join("layout.c");
    std::fs::write(&source, program).unwrap();
    let binary = dir.join("layout");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let compiled = Command::new(&cc)
        .arg(format!("-I{}", sdk_c.join("include").display()))
        .arg(format!("-I{}", sdk_c.join("../abi/c").display()))
        .arg(&source)
        .arg("-o")
        .arg(&binary)
        .output()
        .unwrap_or_else(|e| panic!("running {cc}: {e}"));
    assert!(
        compiled.status.success(),
        "{cc} could not compile a program naming every RawWorker field in include/morpheus.h (a field \
         missing from the header?):\n{}",
        String::from_utf8_lossy(&compiled.stderr)
    );
    let out = Command::new(&binary).output().unwrap();
    let mut size = 0;
    let mut c = Layout::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts[..] {
            ["sizeof", s] => size = s.parse().unwrap(),
            [name, offset, field_size] => {
                c.insert(name.to_owned(), (offset.parse().unwrap(), field_size.parse().unwrap()));
            }
            _ => panic!("unexpected line {line}"),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let problems = differences("include/morpheus.h", "RawWorker", &rust_layout(), &(size, c));
    assert!(
        problems.is_empty(),
        "the committed morpheus.h disagrees with RawWorker (run `make -C sdk-c header`):\n  {}",
        problems.join("\n  ")
    );
}
