#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# Mutation check of the loom model (tests/loom.rs): for every fence and memory order spec/SCB.md
# documents (§2.1, §3.1, §4, §5.1, §5.3, §5.6) on the runtime's side (src/protocol.rs) and on the
# scheduler's and registrars' side as tests/loom.rs models it, weaken exactly that one order in a
# scratch copy of the crate and run the loom test that protects it. PASS: loom caught the weakening
# (the test failed); SURVIVED: it did not. Exits non-zero if any mutation survived or could not be
# applied or built. Never edits the source tree.
#
#   bash tests/loom_mutations.sh            # every mutation (about 10 minutes on a loaded 2-core host)
#   bash tests/loom_mutations.sh NAME...    # only these mutations
#   bazel run //sdk-rust:loom_mutations
#
# Left out on purpose: weakened by hand, each one leaves the whole suite green, because no property
# depends on it. The acknowledgement CAS's acquire on success exists because C11 forbids a failure order
# (acquire, needed) stronger than the success order. A claim's release half has no reader, because
# nobody acquires CLAIMED for data. A claim's failure acquire has no reader either: a failed claim
# reads nothing. The registrar's acquire load of preempt_seq is not an order the spec documents.
set -euo pipefail
cd "$(dirname "$0")/.."
crate="$PWD"
root="$(cd .. && pwd)"

# The loom target directory of tests/loom.sh, so registry crates (loom, criterion, ...) are reused.
base="${CARGO_TARGET_DIR:-$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')}"
export CARGO_TARGET_DIR="$base/loom"
export RUSTFLAGS="--cfg loom"

# The scratch workspace keeps the tree's layout under one more directory (m/): cargo names a path
# crate's artifacts by its path relative to the workspace root, so the mutants get artifacts of their
# own and never overwrite (or pass for fresh) the real crate's in the shared target directory.
scratch="$(mktemp -d "${TMPDIR:-/tmp}/loom-mutations.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
logs="$scratch/logs"
mkdir -p "$logs" "$scratch/m/abi/c"
cp -a "$root/abi/rust" "$scratch/m/abi/rust"
cp -a "$root/abi/c/morpheus_abi.h" "$scratch/m/abi/c/"
cp "$root/Cargo.lock" "$scratch/"
python3 - "$root/Cargo.toml" "$scratch/Cargo.toml" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
text, n = re.subn(r"members = \[[^\]]*\]", 'members = ["m/abi/rust", "m/sdk-rust"]', text)
if n != 1:
    sys.exit(f"{sys.argv[1]}: expected one 'members = [...]', found {n}")
open(sys.argv[2], "w").write(text)
EOF

names=() files=() tests=() olds=() news=()
# mutation NAME FILE TEST OLD NEW: in FILE (relative to sdk-rust/), replace OLD, which must occur
# exactly once, by NEW; TEST is the loom test expected to fail.
mutation() {
  names+=("$1") files+=("$2") tests+=("$3") olds+=("$4") news+=("$5")
}

hint=checkpoint_sees_the_hint_of_the_request_it_acknowledges
ack_release=the_scheduler_that_sees_an_acknowledgement_sees_the_yield_before_it
ack_acquire=a_checkpoint_that_takes_another_paths_acknowledgement_never_sees_preempt_seq_below_it
gate=a_gate_that_reads_not_critical_is_seen_by_the_section_that_follows
section_end=a_gate_that_sees_the_section_end_sees_its_work
assign=a_free_slot_is_assigned_once_and_published_whole
reclaim=a_reclaimed_slot_is_reused_clean_and_never_cleared_under_its_new_owner
running=a_gate_that_sees_running_sees_the_fields_published_before_it
seqlock=the_seqlock_reader_never_returns_a_torn_snapshot
published=a_runtime_that_sees_the_generation_sees_the_whole_header

# --- src/protocol.rs, the SDK's own code: the runtime's side, and the seqlock and region-publication
# writers the agent (scheduler/src/region.rs) and the test fixtures call ---
mutation checkpoint-load-relaxed src/protocol.rs "$hint" \
  'preempt_seq.load(Acquire)' 'preempt_seq.load(Relaxed)'
mutation ack-cas-success-no-release src/protocol.rs "$ack_release" \
  'compare_exchange(current, seq, AcqRel, Acquire)' 'compare_exchange(current, seq, Acquire, Acquire)'
mutation ack-cas-relaxed src/protocol.rs "$ack_release" \
  'compare_exchange(current, seq, AcqRel, Acquire)' 'compare_exchange(current, seq, Relaxed, Relaxed)'
mutation ack-first-load-relaxed src/protocol.rs "$ack_acquire" \
  'let mut current = last_ack_seq.load(Acquire);' 'let mut current = last_ack_seq.load(Relaxed);'
mutation ack-cas-failure-relaxed src/protocol.rs "$ack_acquire" \
  'compare_exchange(current, seq, AcqRel, Acquire)' 'compare_exchange(current, seq, AcqRel, Relaxed)'
mutation critical-enter-no-fence src/protocol.rs "$gate" \
  $'in_critical.store(1, Relaxed);\n    A::fence(SeqCst);' 'in_critical.store(1, Relaxed);'
mutation critical-enter-acqrel-fence src/protocol.rs "$gate" \
  $'in_critical.store(1, Relaxed);\n    A::fence(SeqCst);' $'in_critical.store(1, Relaxed);\n    A::fence(AcqRel);'
mutation critical-enter-seqcst-store-no-fence src/protocol.rs "$gate" \
  $'in_critical.store(1, Relaxed);\n    A::fence(SeqCst);' 'in_critical.store(1, SeqCst);'
mutation critical-exit-relaxed src/protocol.rs "$section_end" \
  'in_critical.store(0, Release)' 'in_critical.store(0, Relaxed)'
mutation claim-no-acquire src/protocol.rs "$reclaim" \
  'WorkerState::Claimed.raw(), AcqRel, Acquire)' 'WorkerState::Claimed.raw(), Release, Relaxed)'
mutation claim-relaxed src/protocol.rs "$reclaim" \
  'WorkerState::Claimed.raw(), AcqRel, Acquire)' 'WorkerState::Claimed.raw(), Relaxed, Relaxed)'
mutation publish-state-relaxed src/protocol.rs "$assign" \
  'worker_state.store(state.raw(), Release)' 'worker_state.store(state.raw(), Relaxed)'
mutation publish-running-relaxed src/protocol.rs "$running" \
  'worker_state.store(state.raw(), Release)' 'worker_state.store(state.raw(), Relaxed)'
mutation seqlock-read-first-load-relaxed src/protocol.rs "$seqlock" \
  'let before = seq.load(Acquire);' 'let before = seq.load(Relaxed);'
mutation seqlock-read-no-fence src/protocol.rs "$seqlock" \
  $'let value = read();\n        A::fence(Acquire);' 'let value = read();'
mutation seqlock-write-no-fence src/protocol.rs "$seqlock" \
  $'    seq.store(odd, Relaxed);\n    A::fence(Release);' '    seq.store(odd, Relaxed);'
mutation seqlock-write-even-relaxed src/protocol.rs "$seqlock" \
  'seq.store(even, Release);' 'seq.store(even, Relaxed);'
mutation publish-region-generation-relaxed src/protocol.rs "$published" \
  'generation_field.store(generation, Release);' 'generation_field.store(generation, Relaxed);'

# --- the scheduler's and registrars' side, as tests/loom.rs models spec/SCB.md ---
mutation request-increment-relaxed tests/loom.rs "$hint" \
  'scb.preempt_seq.fetch_add(1, Release)' 'scb.preempt_seq.fetch_add(1, Relaxed)'
mutation request-hint-after-signal tests/loom.rs "$hint" \
  $'    scb.last_hint_ns.store(hint_ns, Relaxed);\n    scb.budget_remaining_ns.store(0, Relaxed);\n    scb.preempt_seq.fetch_add(1, Release) + 1' \
  $'    let seq = scb.preempt_seq.fetch_add(1, Release) + 1;\n    scb.last_hint_ns.store(hint_ns, Relaxed);\n    scb.budget_remaining_ns.store(0, Relaxed);\n    seq'
mutation scheduler-ack-load-relaxed tests/loom.rs "$ack_release" \
  'if scb.last_ack_seq.load(Acquire) == 1 {' 'if scb.last_ack_seq.load(Relaxed) == 1 {'
mutation gate-no-barrier tests/loom.rs "$gate" \
  'fence(SeqCst); // the kernel side'\''s full barrier before the gate'\''s load' '// (mutant: no barrier)'
mutation gate-section-end-load-relaxed tests/loom.rs "$section_end" \
  'let second = scb.in_critical.load(Acquire);' 'let second = scb.in_critical.load(Relaxed);'
mutation gate-running-load-relaxed tests/loom.rs "$running" \
  'if scb.worker_state.load(Acquire) == WorkerState::Running.raw() {' \
  'if scb.worker_state.load(Relaxed) == WorkerState::Running.raw() {'
mutation observer-registered-load-relaxed tests/loom.rs "$assign" \
  'if scb.worker_state.load(Acquire) == WorkerState::Registered.raw() {' \
  'if scb.worker_state.load(Relaxed) == WorkerState::Registered.raw() {'

selected=("$@")
wanted() {
  [[ ${#selected[@]} -eq 0 ]] && return 0
  local name
  for name in "${selected[@]}"; do [[ "$name" == "$1" ]] && return 0; done
  return 1
}
for name in "${selected[@]}"; do
  found=0
  for known in "${names[@]}"; do [[ "$known" == "$name" ]] && found=1; done
  [[ $found -eq 1 ]] || { echo "loom_mutations: no mutation named '$name' (known: ${names[*]})" >&2; exit 2; }
done

# A fresh copy of the crate (fresh timestamps: cargo must rebuild it, never take a previous mutant's
# artifacts for fresh), with OLD replaced by NEW in FILE; fails unless OLD occurs exactly once.
prepare() {
  rm -rf "$scratch/m/sdk-rust"
  cp -r "$crate" "$scratch/m/sdk-rust"
  rm -rf "$scratch/m/sdk-rust/target"
  [[ $# -eq 0 ]] && return 0
  python3 - "$scratch/m/sdk-rust/$1" "$2" "$3" <<'EOF'
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
count = text.count(old)
if count != 1:
    sys.exit(f"{path}: the pattern to mutate occurs {count} times, not once:\n{old}")
open(path, "w").write(text.replace(old, new))
EOF
}

# run_loom LOG TEST...: the loom tests of the scratch copy; 0 if they ran and passed.
run_loom() {
  local log="$1"
  shift
  local filter=()
  [[ $# -gt 0 ]] && filter=(-- --exact "$@")
  (cd "$scratch" && cargo test --offline --release -p morpheus --test loom "${filter[@]}") >"$log" 2>&1
}

# The unmutated copy must build and pass every test the mutations rely on, or no verdict means anything.
echo "loom_mutations: baseline (the unmutated copy)"
prepare
if ! run_loom "$logs/baseline.log"; then
  cat "$logs/baseline.log" >&2
  echo "loom_mutations: the unmutated copy fails its loom tests; no mutation verdict would mean anything" >&2
  exit 1
fi
for test in "${tests[@]}"; do
  grep -q "^test $test \.\.\. ok$" "$logs/baseline.log" ||
    { echo "loom_mutations: test $test did not run and pass in the baseline" >&2; exit 1; }
done

verdicts=() reasons=()
status=0
for i in "${!names[@]}"; do
  name="${names[$i]}"
  wanted "$name" || continue
  log="$logs/$name.log"
  echo "loom_mutations: $name (${files[$i]}) -> ${tests[$i]}"
  if ! prepare "${files[$i]}" "${olds[$i]}" "${news[$i]}" 2>"$log"; then
    cat "$log" >&2
    verdicts+=("ERROR") reasons+=("pattern not found exactly once")
    status=1
    continue
  fi
  if run_loom "$log" "${tests[$i]}"; then
    if grep -q "^test ${tests[$i]} \.\.\. ok$" "$log"; then
      verdicts+=("SURVIVED") reasons+=("the test passed")
    else
      verdicts+=("ERROR") reasons+=("the test did not run")
    fi
    status=1
  elif grep -q "^test ${tests[$i]} \.\.\. FAILED$" "$log"; then
    # The first assertion message of the failing execution, to check it is the property expected.
    reason="$(grep -m1 -A1 "panicked at" "$log" | tail -n1 | cut -c1-110)"
    verdicts+=("PASS") reasons+=("$reason")
  else
    tail -n 30 "$log" >&2
    verdicts+=("ERROR") reasons+=("did not build or crashed (log above)")
    status=1
  fi
  echo "  ${verdicts[-1]}: ${reasons[-1]}"
done

echo
printf '%-38s %-86s %s\n' "mutation" "loom test" "verdict"
j=0
for i in "${!names[@]}"; do
  wanted "${names[$i]}" || continue
  printf '%-38s %-86s %s\n' "${names[$i]}" "${tests[$i]}" "${verdicts[$j]}"
  j=$((j + 1))
done
if [[ $status -ne 0 ]]; then
  echo "loom_mutations: some mutation survived or could not be run (see above)" >&2
fi
exit "$status"
