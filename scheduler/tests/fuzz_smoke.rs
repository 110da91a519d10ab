// SPDX-License-Identifier: GPL-2.0-only
//! The fuzz targets (src/fuzzing.rs) on the stable toolchain, deterministically: every seed of the
//! committed corpus (fuzz/corpus/<target>/), then mutants of them from a fixed-seed generator (bit
//! flips, interesting 32-bit values at aligned offsets, truncation, extension, splices). A few seconds;
//! the long run is cargo-fuzz (fuzz/README.md). `MORPHEUS_FUZZ_MUTANTS` sets mutants per seed.

use std::path::Path;

use scx_morpheus::fuzzing;

/// xorshift64*: a fixed sequence, the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const INTERESTING: [u32; 10] = [0, 1, 0x7F, 0x80, 0xFF, 0xFFFF, 0x8000_0000, 0xFFFF_FFFE, 0xFFFF_FFFF, 4097];

fn mutate(rng: &mut Rng, seed: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut data = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] ^= 1 << rng.below(8);
            }
            1 if data.len() >= 4 => {
                let at = rng.below(data.len() / 4) * 4;
                data[at..at + 4].copy_from_slice(&INTERESTING[rng.below(INTERESTING.len())].to_le_bytes());
            }
            2 => data.truncate(rng.below(data.len() + 1)),
            3 => {
                let extra = rng.below(64);
                data.extend((0..extra).map(|_| if rng.below(2) == 0 { 0 } else { rng.next() as u8 }));
            }
            4 => {
                let other = &corpus[rng.below(corpus.len())];
                let cut = rng.below(data.len() + 1);
                data.truncate(cut);
                data.extend_from_slice(&other[rng.below(other.len() + 1)..]);
            }
            _ if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] = rng.next() as u8;
            }
            _ => {}
        }
    }
    data
}

fn run(target: &str, body: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut names: Vec<_> = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten().map(|e| e.path()).collect();
    names.sort();
    let corpus: Vec<Vec<u8>> = names.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert!(!corpus.is_empty(), "{target}: no seeds in {}", dir.display());
    let per_seed: usize = std::env::var("MORPHEUS_FUZZ_MUTANTS").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ target.len() as u64);
    let started = std::time::Instant::now();
    let mut executions = 0u64;
    for seed in &corpus {
        body(seed);
        executions += 1;
        for _ in 0..per_seed {
            body(&mutate(&mut rng, seed, &corpus));
            executions += 1;
        }
    }
    eprintln!("{target}: {executions} executions, 0 findings, {:.1} s", started.elapsed().as_secs_f64());
}

#[test]
fn reg_request() {
    run("reg_request", fuzzing::reg_request);
}

#[test]
fn agent_handler() {
    run("agent_handler", fuzzing::agent_handler);
}

#[test]
fn region_parser() {
    run("region_parser", fuzzing::region_parser);
}
