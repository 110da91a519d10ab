// SPDX-License-Identifier: Apache-2.0 OR MIT
//! `struct morpheus_worker` is record `worker` of spec/abi.toml: the generated `morpheus_abi.h` defines it
//! for C, Rust's `RawWorker` is asserted against the spec at compile time, and each released layout is
//! locked in `spec/locks/worker-layout-<N>.lock.json`, which the ABI generator's gate keeps unchanged.
//! This test holds the built artifacts to the lock of the current layout, failing by field name:
//! * the library's soname is the one the lock names for `WORKER_LAYOUT_VERSION`;
//! * the committed `include/morpheus.h`, compiled by the C compiler, lays the struct out as locked.
//!
//! (`RawWorker` is held to the spec at compile time by `assert_worker_layout!`, and the spec to the lock
//! by the gate.)

use std::{collections::BTreeMap, path::Path, process::Command};

use morpheus::raw::WORKER_LAYOUT_VERSION;

/// name -> (offset, size).
type Layout = BTreeMap<String, (usize, usize)>;

/// The released lock of the current layout: (soname, size, fields).
fn locked() -> (String, usize, Layout) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../spec/locks/worker-layout-{WORKER_LAYOUT_VERSION}.lock.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("{}: {e} (layout {WORKER_LAYOUT_VERSION} is not released: run abi/gen/morpheus_abigen.py --release)", path.display())
    });
    let lock: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let number = |v: &serde_json::Value, key: &str| v[key].as_u64().unwrap_or_else(|| panic!("{}: no {key}", path.display())) as usize;
    let fields = lock["fields"].as_array().unwrap_or_else(|| panic!("{}: no fields", path.display()));
    let fields = fields.iter().map(|f| (f["name"].as_str().expect("field name").to_owned(), (number(f, "offset"), number(f, "size"))));
    (lock["soname"].as_str().expect("soname").to_owned(), number(&lock, "size"), fields.collect())
}

/// Differences between the locked layout and another view of it, one line per field.
fn differences(what: &str, locked: (usize, &Layout), found: (usize, &Layout)) -> Vec<String> {
    let lock = format!("layout {WORKER_LAYOUT_VERSION} (spec/locks)");
    let mut out = Vec::new();
    if locked.0 != found.0 {
        out.push(format!("sizeof(struct morpheus_worker): {lock} says {}, {what} has {}", locked.0, found.0));
    }
    for name in locked.1.keys().chain(found.1.keys()).collect::<std::collections::BTreeSet<_>>() {
        match (locked.1.get(name), found.1.get(name)) {
            (Some(e), Some(f)) if e == f => {}
            (Some((eo, es)), Some((fo, fs))) => {
                out.push(format!("{name}: {lock} has it at offset {eo} ({es} bytes), {what} at offset {fo} ({fs} bytes)"))
            }
            (Some(_), None) => out.push(format!("{name}: in {lock}, missing from {what}")),
            (None, Some(_)) => out.push(format!("{name}: in {what}, not in {lock}")),
            (None, None) => unreachable!(),
        }
    }
    out
}

#[test]
fn the_library_carries_the_soname_locked_for_its_layout() {
    let (soname, _, _) = locked();
    assert_eq!(
        env!("MORPHEUS_SONAME"),
        soname,
        "build.rs gives the library a soname other than the one spec/locks names for layout {WORKER_LAYOUT_VERSION}"
    );
}

#[test]
fn the_committed_c_header_lays_out_struct_morpheus_worker_as_locked() {
    let (_, size, fields) = locked();
    let sdk_c = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("morpheus-worker-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut program = String::from("#include <stddef.h>\n#include <stdio.h>\n#include \"morpheus.h\"\nint main(void)\n{\n");
    program += "\tprintf(\"sizeof %zu\\n\", sizeof(struct morpheus_worker));\n";
    for name in fields.keys() {
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
        "{cc} could not compile a program naming every locked field of struct morpheus_worker through \
         include/morpheus.h (a field missing from the header?):\n{}",
        String::from_utf8_lossy(&compiled.stderr)
    );
    let out = Command::new(&binary).output().unwrap();
    let mut c_size = 0;
    let mut c = Layout::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts[..] {
            ["sizeof", s] => c_size = s.parse().unwrap(),
            [name, offset, field_size] => {
                c.insert(name.to_owned(), (offset.parse().unwrap(), field_size.parse().unwrap()));
            }
            _ => panic!("unexpected line {line}"),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let problems = differences("include/morpheus.h compiled by cc", (size, &fields), (c_size, &c));
    assert!(
        problems.is_empty(),
        "struct morpheus_worker as C compiles it disagrees with its released layout (run \
         abi/gen/morpheus_abigen.py and `make -C sdk-c header`):\n  {}",
        problems.join("\n  ")
    );
}
