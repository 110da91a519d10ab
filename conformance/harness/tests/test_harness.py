# SPDX-License-Identifier: Apache-2.0 OR MIT
"""The harness's own tests: it must judge bytes, survive broken agents and broken scenario files,
and turn exactly the expected cells red when a rule is broken on purpose."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import unittest
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HARNESS))

import cli  # noqa: E402
import matrix as matrix_mod  # noqa: E402
from abi import REPO_ROOT, m  # noqa: E402
from region import Region, RegionSpec  # noqa: E402
from runner import AgentSpec, CellRun  # noqa: E402
from scenario import ScenarioError, load, load_dir  # noqa: E402

SCENARIOS = REPO_ROOT / "conformance" / "scenarios"
FAULTY = str(HARNESS / "tests" / "fakes" / "faulty_agent.py")
REFERENCE = ["python3", "conformance/agents/reference/agent.py"]


def reference(env=None, name="reference"):
    return AgentSpec(name, "sdk", REFERENCE, str(REPO_ROOT), env=env or {})


def faulty(fault, op="checkpoint", timeout=None):
    return AgentSpec(f"faulty-{fault}", "sdk", ["python3", FAULTY, fault, op], str(REPO_ROOT), timeout=timeout)


# The per-request hang detector of these runs: generous, since a verdict must not depend on how loaded
# the machine is (an agent that starts slowly under load is not a hung one); the tests of the detector
# itself give their own, short timeout to the faulty agent alone (AgentSpec.timeout), never to the
# reference agent beside it.
def run(agents, names, timeout=60.0, scenarios_dir=SCENARIOS, build=False):
    scenarios, broken = load_dir(scenarios_dir)
    scenarios = [s for s in scenarios if s.name in names] if names else scenarios
    results = cli.run_matrix(agents, scenarios, timeout, jobs=2, build=build)
    return results, scenarios, broken


class RegionTest(unittest.TestCase):
    def test_layout_comes_from_the_generated_abi(self):
        with tempfile.TemporaryDirectory() as tmp:
            region = Region(os.path.join(tmp, "r"), RegionSpec(scb_count=3))
            self.assertEqual(region.size, m.RegionHeader.SIZE + 3 * m.Scb.SIZE)
            self.assertEqual(region.read_header("magic"), m.REGION_MAGIC)
            region.write_scb(2, "worker_state", "RUNNING")
            self.assertEqual(region.read_scb(2, "worker_state"), m.WorkerState.RUNNING)
            off = region.scb_offset(2) + m.Scb.WORKER_STATE.offset
            self.assertEqual(region.locate(off + 1), "scb[2].worker_state+1")
            self.assertEqual(region.locate(m.RegionHeader.GENERATION.offset), "header.generation+0")
            region.close()

    def test_expressions_in_region_tables(self):
        with tempfile.TemporaryDirectory() as tmp:
            spec = RegionSpec.from_table({"header": {"abi_major": "ABI_MAJOR + 1"},
                                          "size": "header_size + scb_count * scb_stride - 64"})
            region = Region(os.path.join(tmp, "r"), spec)
            self.assertEqual(region.read_header("abi_major"), m.ABI_MAJOR + 1)
            self.assertEqual(os.path.getsize(region.path), region.full_size - 64)
            region.close()


class ScenarioFilesTest(unittest.TestCase):
    def test_every_shipped_scenario_loads_and_states_its_intent(self):
        scenarios, broken = load_dir(SCENARIOS)
        self.assertEqual(broken, [])
        self.assertGreaterEqual(len(scenarios), 30)
        for sc in scenarios:
            self.assertTrue(sc.intent.endswith("."), sc.name)

    def test_malformed_files_are_named_with_what_is_wrong(self):
        cases = {
            "not_toml": ("intent = 'x\n", "not valid TOML"),
            "no_intent": ("[[step]]\nagent = 'state'\n", "`intent`"),
            "bad_op": ("intent = 'x.'\n[[step]]\nagent = 'teleport'\n", "agent op 'teleport'"),
            "bad_field": ("intent = 'x.'\n[[step]]\nwrite = { preempt_sequence = 1 }\n", "'preempt_sequence' is not a scb field"),
            "two_kinds": ("intent = 'x.'\n[[step]]\nbump = 1\nagent = 'state'\n", "exactly one of"),
            "bad_expect": ("intent = 'x.'\n[[step]]\nagent = 'state'\nexpect.scbb = {}\n", "unknown keys ['scbb']"),
            "no_steps": ("intent = 'x.'\n", "no [[step]]"),
            "escalate_no_now": ("intent = 'x.'\ntarget = 'gate'\n[[step]]\nagent = 'escalate'\nruntime_ns = 1\n",
                                "escalate needs ['now_ns']"),
            "callbacks_zero": ("intent = 'x.'\n[[step]]\nagent = 'tasks'\ncount = 1\ncheckpoints = 1\ncallbacks = 0\n",
                               "callbacks must be a positive integer"),
            "tick_late": ("intent = 'x.'\n[[step]]\nagent = 'tasks'\ncount = 1\ncheckpoints = 1\n"
                          "[[step]]\nagent = 'tasks'\ncount = 1\ncheckpoints = 1\ntick_ns = 1\n",
                          "tick_ns belongs to the scenario's first `tasks` op only"),
            "tick_zero": ("intent = 'x.'\n[[step]]\nagent = 'tasks'\ncount = 2\ncheckpoints = 1\ntick_ns = 0\n",
                          "tick_ns must be a positive integer"),
            "mode_clock_negative": ("intent = 'x.'\n[[step]]\nagent = 'mode_clock'\nns = -1\n", "mode_clock needs an integer ns >= 0"),
            "mode_clock_missing": ("intent = 'x.'\n[[step]]\nagent = 'mode_clock'\n", "mode_clock needs an integer ns >= 0"),
            "mode_clock_text": ("intent = 'x.'\n[[step]]\nagent = 'mode_clock'\nns = '5'\n", "mode_clock needs an integer ns >= 0"),
        }
        with tempfile.TemporaryDirectory() as tmp:
            for name, (text, why) in cases.items():
                path = Path(tmp) / f"{name}.toml"
                path.write_text(text)
                with self.assertRaises(ScenarioError) as ctx:
                    load(path)
                self.assertIn(name, str(ctx.exception))
                self.assertIn(why, str(ctx.exception))

    def test_a_broken_file_fails_its_row_and_the_rest_of_the_matrix_runs(self):
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copy(SCENARIOS / "checkpoint_idle_no_write.toml", tmp)
            (Path(tmp) / "zz_broken.toml").write_text("intent = 'x.'\n[[step]]\nagent = 'fly'\n")
            results, scenarios, broken = run([reference()], None, scenarios_dir=Path(tmp))
            mx = matrix_mod.build(results, ["reference"], scenarios, broken)
            self.assertEqual(mx["rows"]["zz_broken"]["cells"]["reference"]["status"], "fail")
            self.assertIn("agent op 'fly'", mx["rows"]["zz_broken"]["cells"]["reference"]["message"])
            self.assertEqual(mx["rows"]["checkpoint_idle_no_write[sync]"]["cells"]["reference"]["status"], "pass")


class ReferenceAgentTest(unittest.TestCase):
    def test_reference_agent_conforms_to_every_sdk_scenario(self):
        results, _, _ = run([reference()], None)
        failed = [(r.row, r.message) for r in results if r.status not in ("pass", "skip")]
        self.assertEqual(failed, [])
        for r in results:
            if r.status == "skip":  # only a check this host cannot make, and it says which
                self.assertIn("expect.", r.message, r)
        self.assertGreaterEqual(len(results), 40)


class BrokenRuleTest(unittest.TestCase):
    """Acknowledging before yielding must turn red exactly the async cells that yield."""

    EXPECTED_RED = {
        "ack_monotonic_concurrent[async]", "ack_never_decreases[async]", "async_yield_before_ack[async]",
        "checkpoint_coalesces_bumps[async]", "checkpoint_pending_yields_once[async]",
        "checkpoint_idle_no_store[async]",
        "critical_blocks_yield[async]", "critical_nesting_outermost_only[async]",
        "critical_no_mode_evaluation[async]", "mode_defensive_leave_without_snapshot[async]",
        "mode_unknown_pressure_level_not_high[async]",
        "discovery_env_region[async]", "region_newer_minor_larger_layout[async]",
        "mode_defensive_baseline[async]", "mode_defensive_enter_and_leave[async]",
        "mode_defensive_over_pressured[async]", "mode_pressure_seqlock_parked[async]",
        "mode_pressured_budget_yield[async]", "mode_pressured_leave[async]",
        "reclaim_clear_whole_stride[async]", "region_unknown_optional_features_ignored[async]",
        "register_inside_critical[async]", "restart_during_async_yield[async]", "restart_reregister[async]",
        "explicit_yield_acknowledges[async]", "mode_yield_request_during_suspension[async]",
        "channel_register_request[async]", "watcher_reregister_after_restart[async]",
        "explicit_yield_restarts_mode_clocks[async]", "mode_decided_before_evaluation[async]",
        "mode_slice_loaded_at_each_checkpoint[async]",
    }

    def test_ack_before_yield_turns_exactly_the_expected_cells_red(self):
        agent = reference({"MORPHEUS_CONFORMANCE_BREAK": "ack_before_yield"}, name="broken")
        results, _, _ = run([agent], None)
        red = {r.row for r in results if r.status == "fail"}
        self.assertEqual(red, self.EXPECTED_RED)
        for r in results:
            if r.status == "fail":
                self.assertIn("while the task was suspended", r.message)
                self.assertEqual(r.first_diff["field"].split(".")[1], "last_ack_seq")


class RefusalOrderTest(unittest.TestCase):
    """The multi-fault registration scenarios tell SCB.md §4's check order from another: an agent that
    looks at the slot and the held worker before its own arguments turns exactly them red."""

    def test_refusals_in_the_wrong_order_fail(self):
        results, _, _ = run([reference({"MORPHEUS_CONFORMANCE_BREAK": "refusal_order"}, name="broken")], None)
        red = {r.row: r for r in results if r.status == "fail"}
        self.assertEqual(set(red), {"register_refusal_order_invalid_argument_first",
                                    "register_refusal_order_already_registered_before_slot"})
        self.assertIn("error SLOT_OUT_OF_RANGE, expected INVALID_ARGUMENT",
                      red["register_refusal_order_invalid_argument_first"].message)
        self.assertIn("error SLOT_OUT_OF_RANGE, expected ALREADY_REGISTERED",
                      red["register_refusal_order_already_registered_before_slot"].message)


class HintPendingTest(unittest.TestCase):
    """SCB.md §5.2 (1.5): a rate-limited hint decision with the worker's request pending counts nothing.
    The policy agent that takes every rate-limited decision for a dropped hint (the 1.4 reading) turns
    exactly that scenario red; the real one passes it."""

    def test_pending_request_counted_as_dropped_fails(self):
        import dataclasses
        spec = cli.load_agents()["sim-policy"]
        self.assertIsNone(cli.build_agent(spec))
        broken = dataclasses.replace(spec, name="broken", env={**spec.env, "MORPHEUS_CONFORMANCE_BREAK": "hint_pending_dropped"})
        results, scenarios, _ = run([spec, broken], None)
        self.assertIn("hint_rate_limited_request_pending", {s.name for s in scenarios})
        red = {(r.agent, r.row): r for r in results if r.status == "fail"}
        self.assertEqual(set(red), {("broken", "hint_rate_limited_request_pending")})
        self.assertIn("reply hint = 'RATE_LIMITED', expected 'PENDING'",
                      red[("broken", "hint_rate_limited_request_pending")].message)


class StoreTracingTest(unittest.TestCase):
    """expect.stores sees every store, equal values included, whatever the timing (hardware watchpoints):
    a registrar that never stores REGISTERED, and a fast path that re-stores an unchanged value, each turn
    exactly their cells red; where the host cannot trace, the cell is a skip with the reason, never a pass."""

    def red(self, brk):
        results, _, _ = run([reference({"MORPHEUS_CONFORMANCE_BREAK": brk}, name="broken")], None)
        skipped = [r for r in results if r.status == "skip" and "expect.stores" in r.message]
        if skipped:
            self.skipTest(f"store tracing unavailable on this host: {skipped[0].message}")
        return {r.row: r for r in results if r.status == "fail"}

    def test_a_registrar_that_skips_registered_fails(self):
        red = self.red("skip_registered")
        self.assertEqual(set(red), {"lifecycle_register_publishes_registered",
                                    "register_escapable_priority_at_registration"})
        for r in red.values():
            self.assertIn("stored scb[1].worker_state = [CLAIMED, RUNNING]", r.message)
            self.assertIn("expected [CLAIMED, REGISTERED, RUNNING]", r.message)

    def test_a_fast_path_that_restores_an_unchanged_value_fails(self):
        red = self.red("restore_on_fast_path")
        red = {row: r for row, r in red.items() if not row.startswith("checkpoint_idle_untouched_pages")}
        self.assertEqual(set(red), {"checkpoint_idle_no_store[sync]", "checkpoint_idle_no_store[async]"})
        for r in red.values():
            self.assertEqual(r.step, 3)  # the first idle checkpoint; the bytes never changed
            self.assertRegex(r.message, r"stored scb\[1\]\.last_ack_seq = \[0\] .*expected \[\]")

    def test_unavailable_tracing_is_a_skip_with_the_reason(self):
        import stores
        from unittest import mock
        with mock.patch.object(stores.platform, "machine", return_value="aarch64"):
            results, _, _ = run([reference()], {"checkpoint_idle_no_store"})
        self.assertTrue(results)
        for r in results:
            self.assertEqual(r.status, "skip", r)
            self.assertIn("x86-64 debug registers; this host is aarch64", r.message)
        mx = matrix_mod.build(results, ["reference"], load_dir(SCENARIOS)[0], [])
        self.assertEqual(matrix_mod.failures(mx), [])
        self.assertIn("Skipped (a check this host cannot make; not a pass)", matrix_mod.markdown(mx))


class SoftDirtyTest(unittest.TestCase):
    """expect.untouched (soft-dirty page bits): a fast path that re-stores an unchanged value is red where
    the kernel tracks soft-dirty bits; where it does not, the cell is a skip naming CONFIG_MEM_SOFT_DIRTY."""

    ROWS = {"checkpoint_idle_untouched_pages[sync]", "checkpoint_idle_untouched_pages[async]"}

    def test_a_fast_path_that_restores_an_unchanged_value_dirties_its_page(self):
        import softdirty
        why = softdirty.available()
        if why:
            self.skipTest(f"soft-dirty unavailable on this host: {why}")
        results, _, _ = run([reference({"MORPHEUS_CONFORMANCE_BREAK": "restore_on_fast_path"})],
                            {"checkpoint_idle_untouched_pages"})
        self.assertEqual({r.row for r in results if r.status == "fail"}, self.ROWS)
        for r in results:
            self.assertEqual(r.step, 3, r)
            self.assertIn("soft-dirty bit is set", r.message)
        results, _, _ = run([reference()], {"checkpoint_idle_untouched_pages"})
        self.assertEqual({r.status for r in results}, {"pass"})

    def test_without_soft_dirty_tracking_the_cell_is_a_skip_with_the_reason(self):
        import softdirty
        from unittest import mock
        with mock.patch.object(softdirty, "available", return_value="CONFIG_MEM_SOFT_DIRTY is off (test)"):
            results, _, _ = run([reference()], {"checkpoint_idle_untouched_pages"})
        self.assertEqual({r.row for r in results}, self.ROWS)
        for r in results:
            self.assertEqual(r.status, "skip", r)
            self.assertIn("expect.untouched: CONFIG_MEM_SOFT_DIRTY is off (test)", r.message)


class OtherBrokenRulesTest(unittest.TestCase):
    """Each 1.3 capability of the harness can fail: expect.at_store (data in place when REGISTERED is stored),
    fill + expect.reclaimed (the clear covers the whole stride) and the pressure.* header fields (modes)."""

    def red(self, brk):
        results, _, _ = run([reference({"MORPHEUS_CONFORMANCE_BREAK": brk}, name="broken")], None)
        self.assertFalse([r for r in results if r.status == "skip" and "expect.untouched" not in r.message])
        return {r.row: r for r in results if r.status == "fail"}

    def test_escapable_written_after_registered(self):
        red = self.red("late_escapable")
        self.assertEqual(set(red), {"register_escapable_priority_at_registration"})
        self.assertIn("when the agent stored worker_state = REGISTERED, scb[1].escapable held 0, expected 1",
                      red["register_escapable_priority_at_registration"].message)

    def test_reclaim_clear_of_only_128_bytes(self):
        red = self.red("reclaim_128")
        self.assertEqual(set(red), {"reclaim_clear_whole_stride[sync]", "reclaim_clear_whole_stride[async]"})
        for r in red.values():
            self.assertIn("(scb[1] padding +0) is 165, expected 0", r.message)

    def test_no_runtime_modes(self):
        red = self.red("no_modes")
        self.assertEqual(set(red), {f"{name}[{v}]" for v in ("sync", "async") for name in (
            "mode_pressured_budget_yield", "mode_pressured_leave", "mode_defensive_enter_and_leave",
            "mode_defensive_over_pressured", "critical_no_mode_evaluation", "mode_unknown_pressure_level_not_high",
            "mode_defensive_leave_without_snapshot", "explicit_yield_restarts_mode_clocks", "mode_decided_before_evaluation",
            "mode_slice_loaded_at_each_checkpoint")} | {"mode_yield_request_during_suspension[async]"})
        for r in red.values():
            self.assertEqual(r.first_diff["field"], "scb[1].runtime_mode")


class DecidedPlacesTest(unittest.TestCase):
    """Each rule SCB.md 1.4 (draft) states where 1.3 allowed another reading (SCB.md Appendix A) has a
    scenario that the other reading fails: the reference agent, switched to that reading, turns exactly
    that scenario red, at the step that tells the readings apart."""

    def red(self, brk):
        results, _, _ = run([reference({"MORPHEUS_CONFORMANCE_BREAK": brk}, name="broken")], None)
        return {r.row: r for r in results if r.status == "fail"}

    def both(self, name):
        return {f"{name}[sync]", f"{name}[async]"}

    def test_a_loss_only_status_saw_is_a_latch(self):
        red = self.red("status_unlatched")
        self.assertEqual(set(red), self.both("restart_status_latches_loss"))
        for r in red.values():
            self.assertIn("lost: a plain no-yield", r.message)

    def test_no_mode_evaluation_inside_a_critical_section(self):
        red = self.red("modes_in_critical")
        self.assertEqual(set(red), self.both("critical_no_mode_evaluation"))
        for r in red.values():
            self.assertEqual(r.first_diff["field"], "scb[1].runtime_mode")

    def test_an_unknown_pressure_level_is_not_high(self):
        red = self.red("unknown_level_keeps")
        self.assertEqual(set(red), self.both("mode_unknown_pressure_level_not_high"))
        for r in red.values():
            self.assertEqual(r.first_diff["field"], "scb[1].runtime_mode")

    def test_a_retired_region_named_by_the_environment_is_not_ready(self):
        red = self.red("env_retired_detaches")
        self.assertEqual(set(red), {"discovery_env_region_retired"})
        self.assertIn("NOT_READY", red["discovery_env_region_retired"].message)

    def test_no_snapshot_ever_is_not_high(self):
        red = self.red("no_snapshot_keeps_mode")
        self.assertEqual(set(red), self.both("mode_defensive_leave_without_snapshot"))
        for r in red.values():
            self.assertEqual(r.first_diff["field"], "scb[1].runtime_mode")


class RegistrationChannelTest(unittest.TestCase):
    """The registration channel (SCB.md §4.1) and the watcher (§6.1), reached with the harness playing the
    agent on the socket (`listen`, `agent_gone`, `restart`, `until_registered`, `expect.requests`): the
    reference agent, switched to the other reading, turns exactly the scenarios that pin the rule red, at
    the step that tells the readings apart."""

    def red(self, brk):
        results, _, _ = run([reference({"MORPHEUS_CONFORMANCE_BREAK": brk}, name="broken")], None)
        return {r.row: r for r in results if r.status == "fail"}

    def both(self, name):
        return {f"{name}[sync]", f"{name}[async]"}

    def test_the_request_carries_its_size_and_the_options(self):
        red = self.red("channel_legacy_request")
        self.assertEqual(set(red), self.both("channel_register_request") | {"channel_register_options"}
                         | self.both("watcher_reregister_after_restart"))
        for name in self.both("channel_register_request") | {"channel_register_options"}:
            self.assertIn("has message_size = 0, expected 40", red[name].message)

    def test_a_refusal_is_an_error_not_a_detached_worker(self):
        red = self.red("channel_refusal_detaches")
        self.assertEqual(set(red), {"channel_refusal_is_error"})
        self.assertIn("succeeded, expected error REGISTRATION_REFUSED", red["channel_refusal_is_error"].message)

    def test_a_leftover_socket_is_the_schedulers_absence(self):
        red = self.red("leftover_socket_errors")
        self.assertEqual(set(red), self.both("channel_leftover_socket_detaches"))
        for r in red.values():
            self.assertIn("failed with IO", r.message)

    def test_registering_again_keeps_the_original_options(self):
        red = self.red("reregister_defaults")
        self.assertEqual(set(red), self.both("watcher_reregister_after_restart"))
        for r in red.values():
            self.assertIn("checkpoints until the SDK registers again", r.message)
            self.assertIn("has escapable = 0, expected 1 (NO)", r.message)

    def test_status_reports_the_loss_and_never_registers(self):
        red = self.red("status_reregisters")
        self.assertEqual(set(red), self.both("watcher_reregister_after_restart"))
        for r in red.values():
            self.assertIn("status reports the loss", r.message)
            self.assertIn("expected error GENERATION_CHANGED", r.message)

    def test_the_harness_checks_the_channel_and_the_retired_region(self):
        """Two checks of the harness itself, each shown failing (both broken agents in one matrix): a
        request with a nonzero reserved byte is MALFORMED and fails every cell that registers through the
        agent, and a lost worker's store into the region retired by a restart fails the watcher cells at
        the step that notices the loss, though the current region is unchanged."""
        reserved = reference({"MORPHEUS_CONFORMANCE_BREAK": "request_reserved_set"}, name="reserved")
        retired = reference({"MORPHEUS_CONFORMANCE_BREAK": "lost_writes_retired"}, name="retired")
        results, _, _ = run([reserved, retired], None)
        red = {(r.agent, r.row): r for r in results if r.status == "fail"}
        by_reserved = {row: r for (agent, row), r in red.items() if agent == "reserved"}
        by_retired = {row: r for (agent, row), r in red.items() if agent == "retired"}
        self.assertEqual(set(by_reserved), self.both("channel_register_request") | {"channel_register_options", "channel_refusal_is_error"}
                         | self.both("channel_leftover_socket_detaches") | self.both("watcher_reregister_after_restart")
                         | self.both("watcher_no_reregister_in_critical"))
        for r in by_reserved.values():
            self.assertRegex(r.message, r"the agent refused: MALFORMED|malformed registration request \(nonzero reserved bytes\)")
        self.assertEqual(set(by_retired), self.both("watcher_reregister_after_restart") | self.both("watcher_no_reregister_in_critical"))
        for r in by_retired.values():
            self.assertIn("the retired region", r.message)
            self.assertIn("worker_state: expected 2, found 4", r.message)

    def test_no_registration_inside_a_critical_section(self):
        red = self.red("reregister_in_critical")
        self.assertEqual(set(red), self.both("watcher_no_reregister_in_critical"))
        for r in red.values():
            self.assertIn("the SDK sent 1 registration request(s) ['REGISTER'], expected 0", r.message)


class Protocol14Test(unittest.TestCase):
    """The rules of SCB.md 1.4 reached through the ops added with it (`explicit_yield`, `tasks`) and the
    places Appendix A decides that the scenarios before 1.4 did not tell apart: the reference agent,
    switched to the other reading, turns exactly the scenario that pins the rule red, at the step that
    tells the readings apart. Agents that lack an optional op are n/a there, never red."""

    def red(self, brk, names=None):
        results, _, _ = run([reference({"MORPHEUS_CONFORMANCE_BREAK": brk}, name="broken")], names)
        return {r.row: r for r in results if r.status == "fail"}

    def both(self, name):
        return {f"{name}[sync]", f"{name}[async]"}

    def test_the_explicit_yield_acknowledges(self):
        red = self.red("explicit_no_ack")
        self.assertEqual(set(red), self.both("explicit_yield_acknowledges") | self.both("explicit_yield_inside_critical"))
        for r in red.values():
            self.assertEqual(r.first_diff["field"], "scb[1].last_ack_seq")

    def test_the_explicit_yield_stores_its_reason_and_count(self):
        red = self.red("explicit_no_reason")
        self.assertEqual(set(red), self.both("explicit_yield_acknowledges") | self.both("explicit_yield_inside_critical")
                         | self.both("explicit_yield_restarts_mode_clocks"))
        for name in self.both("explicit_yield_acknowledges"):
            self.assertEqual(red[name].step, 3)  # with nothing pending, before any request
            self.assertEqual(red[name].first_diff["field"], "scb[1].yield_count")

    def test_the_explicit_yield_is_allowed_in_a_critical_section(self):
        red = self.red("explicit_refused_in_critical")
        self.assertEqual(set(red), self.both("explicit_yield_inside_critical"))
        for r in red.values():
            self.assertEqual(r.first_diff["field"], "scb[1].last_ack_seq")

    def test_the_explicit_yield_restarts_the_mode_clocks(self):
        """Appendix A 17d, on the agent's mode clock (`mode_clock`): the other reading yields DEFENSIVE a
        slice after the request's yield, at the check 0.6 slice after the explicit one."""
        red = self.red("explicit_keeps_mode_clocks")
        self.assertEqual(set(red), self.both("explicit_yield_restarts_mode_clocks"))
        for r in red.values():
            self.assertEqual(r.step, 12)
            self.assertIn("reply yielded = True, expected False", r.message)

    def test_status_loads_the_generation_again(self):
        """Appendix A 8b: the status call that re-reads nothing reports a worker the scheduler's restart
        lost as attached, wherever only status sees the change."""
        red = self.red("status_no_reread")
        self.assertEqual(set(red), self.both("restart_status_latches_loss") | self.both("watcher_reregister_after_restart")
                         | self.both("watcher_no_reregister_in_critical"))
        for r in red.values():
            self.assertIn("succeeded, expected error GENERATION_CHANGED", r.message)

    def test_the_pending_test_uses_the_acknowledged_sequence(self):
        """Appendix A 7a: a pending test against the fast path's comparand (the placeholder outside
        DETERMINISTIC) takes every mode check for a request: each scenario that decides a mode yield or
        a quiet check outside DETERMINISTIC turns red."""
        red = self.red("pending_by_comparand")
        modes = ("mode_defensive_enter_and_leave", "mode_defensive_leave_without_snapshot", "mode_defensive_over_pressured",
                 "mode_pressured_budget_yield", "mode_pressured_leave", "mode_unknown_pressure_level_not_high",
                 "explicit_yield_restarts_mode_clocks", "mode_decided_before_evaluation", "mode_slice_loaded_at_each_checkpoint")
        self.assertEqual(set(red), set().union(*(self.both(n) for n in modes)) | {"mode_yield_request_during_suspension[async]"})

    def test_an_absent_socket_is_the_schedulers_absence(self):
        """Appendix A 15b: MORPHEUS_SOCKET naming no socket is detached mode, not the error IO."""
        red = self.red("absent_socket_errors")
        self.assertEqual(set(red), self.both("channel_absent_socket_detaches"))
        for r in red.values():
            self.assertEqual(r.step, 1)
            self.assertIn("failed with IO", r.message)

    def test_a_checkpoint_decides_from_its_mode_before_evaluating(self):
        """Appendix A 21a: evaluating first turns the pinning scenario red at the BUDGET yield, and with it
        the older mode scenarios whose yield and evaluation fall at one checkpoint."""
        red = self.red("evaluate_before_deciding")
        self.assertEqual(set(red), self.both("mode_decided_before_evaluation") | self.both("mode_defensive_enter_and_leave")
                         | self.both("mode_defensive_leave_without_snapshot") | self.both("mode_unknown_pressure_level_not_high"))
        for name in self.both("mode_decided_before_evaluation"):
            self.assertIn("reply yielded = False, expected True", red[name].message)

    def test_the_slice_is_loaded_at_each_checkpoint(self):
        """Appendix A 21b, on the agent's mode clock: a slice cached from the first read misses the
        header's shorter slice."""
        red = self.red("slice_cached")
        self.assertEqual(set(red), self.both("mode_slice_loaded_at_each_checkpoint"))
        for r in red.values():
            self.assertEqual(r.step, 11)

    def test_a_lost_workers_explicit_yield_is_no_error(self):
        red = self.red("explicit_lost_errors")
        self.assertEqual(set(red), self.both("explicit_yield_lost_writes_nothing"))
        for r in red.values():
            self.assertIn("failed with GENERATION_CHANGED", r.message)

    def test_a_mode_yield_acknowledges_no_request_that_arrived_while_suspended(self):
        red = self.red("mode_yield_acks_late")
        self.assertEqual(set(red), {"mode_yield_request_during_suspension[async]"})
        self.assertEqual(red["mode_yield_request_during_suspension[async]"].first_diff["field"], "scb[1].last_ack_seq")

    def test_state_reports_the_acknowledged_sequence_not_the_placeholder(self):
        red = self.red("state_placeholder")
        self.assertEqual(set(red), {"mode_yield_request_during_suspension[async]"})
        self.assertIn("reply cached_ack = 18446744073709551615, expected 1",
                      red["mode_yield_request_during_suspension[async]"].message)

    def test_one_yielder_per_request_on_an_event_loop(self):
        red = self.red("every_task_yields")
        self.assertEqual(set(red), {"rotation_one_yielder_per_request", "rotation_turn_end_writes_nothing",
                                    "rotation_critical_section_holds", "rotation_turn_lasts_its_slice"})
        for r in red.values():
            self.assertEqual(r.first_diff["field"], "scb[1].yield_count")

    def test_a_turn_ended_by_the_clock_writes_nothing(self):
        red = self.red("turn_end_counted")
        # rotation_turn_lasts_its_slice's turns end on the (agent's) clock too, with its request pending.
        self.assertEqual(set(red), {"rotation_turn_end_writes_nothing", "rotation_turn_lasts_its_slice"})
        self.assertEqual(red["rotation_turn_lasts_its_slice"].first_diff["field"], "scb[1].yield_count")
        self.assertEqual(red["rotation_turn_end_writes_nothing"].step, 3)  # nothing pending: nothing may be written

    def test_a_waiter_ends_a_turn_once_its_slice_is_over(self):
        """SCB.md §5.7 (1.5), timed by the agent's clock (`tick_ns`): a waiter that ends a turn at a look
        within the slice, and one that never ends it, each turn exactly rotation_turn_lasts_its_slice red,
        at its turn count; both broken agents run in one matrix (one run's time)."""
        at_look = reference({"MORPHEUS_CONFORMANCE_BREAK": "waiter_at_look"}, name="at_look")
        never = reference({"MORPHEUS_CONFORMANCE_BREAK": "waiter_never"}, name="never")
        results, _, _ = run([at_look, never], None)
        red = {(r.agent, r.row): r for r in results if r.status == "fail"}
        self.assertEqual(set(red), {("at_look", "rotation_turn_lasts_its_slice"), ("never", "rotation_turn_lasts_its_slice")})
        for r in red.values():
            self.assertEqual(r.step, 4)
        self.assertIn("check failed: reply.turns <= 14 (with reply.turns=41)", red[("at_look", "rotation_turn_lasts_its_slice")].message)
        self.assertIn("check failed: reply.turns >= 8 (with reply.turns=3)", red[("never", "rotation_turn_lasts_its_slice")].message)

    def test_the_loops_own_work_ends_a_turn(self):
        """SCB.md §5.7, timed by the agent's clock: the loop's own work that never ends a timed turn lets a
        lone CPU-bound task hold the loop; exactly rotation_loop_work_ends_turn turns red."""
        red = self.red("loop_work_ignored")
        self.assertEqual(set(red), {"rotation_loop_work_ends_turn"})
        self.assertEqual(red["rotation_loop_work_ends_turn"].step, 4)
        self.assertIn("check failed: reply.longest_run <= 8 (with reply.longest_run=39)", red["rotation_loop_work_ends_turn"].message)

    def test_an_agent_without_the_turn_clock_is_not_applicable(self):
        names = {"rotation_turn_lasts_its_slice", "rotation_loop_work_ends_turn", "rotation_one_yielder_per_request"}
        results, _, _ = run([faulty("no_turn_clock", "none")], names)
        by = {r.row: r for r in results}
        self.assertEqual(by["rotation_one_yielder_per_request"].status, "pass", by)
        for name in ("rotation_turn_lasts_its_slice", "rotation_loop_work_ends_turn"):
            self.assertEqual(by[name].status, "n/a", by)
            self.assertIn("no clock the harness controls", by[name].message)

    def test_a_critical_section_holds_the_rotation(self):
        red = self.red("rotation_ignores_critical")
        self.assertEqual(set(red), {"rotation_critical_section_holds"})
        self.assertEqual(red["rotation_critical_section_holds"].step, 5)  # inside the section
        self.assertEqual(red["rotation_critical_section_holds"].first_diff["field"], "scb[1].last_ack_seq")

    def test_registering_on_a_retired_region_is_an_error(self):
        red = self.red("register_retired_detaches")
        self.assertEqual(set(red), {"register_region_retired_since_attach"})
        self.assertIn("expected error GENERATION_CHANGED", red["register_region_retired_since_attach"].message)

    def test_the_generation_is_checked_before_the_slot(self):
        red = self.red("register_busy_first")
        self.assertEqual(set(red), {"register_region_retired_since_attach"})
        self.assertIn("error SLOT_BUSY, expected GENERATION_CHANGED", red["register_region_retired_since_attach"].message)

    def test_a_refused_attach_changes_nothing(self):
        red = self.red("refused_attach_drops")
        self.assertEqual(set(red), {"attach_refused_keeps_region"})
        self.assertIn("reply attached = False, expected True", red["attach_refused_keeps_region"].message)

    def test_an_agent_without_an_optional_op_is_not_applicable(self):
        names = {"explicit_yield_acknowledges", "rotation_one_yielder_per_request", "register_region_retired_since_attach"}
        results, _, _ = run([faulty("narrow_hello", "none")], names)
        by = {r.row: r for r in results}
        self.assertEqual(len(by), 4, by)
        for row in self.both("explicit_yield_acknowledges"):
            self.assertEqual(by[row].status, "n/a", by[row])
            self.assertIn("no explicit yield", by[row].message)
        self.assertEqual(by["rotation_one_yielder_per_request"].status, "n/a")
        self.assertIn("no event loop", by["rotation_one_yielder_per_request"].message)
        self.assertEqual(by["register_region_retired_since_attach"].status, "n/a")
        self.assertIn("maps it again", by["register_region_retired_since_attach"].message)


class FaultyAgentTest(unittest.TestCase):
    def check(self, fault, expect_in, op="checkpoint", scenario="checkpoint_pending_yields_once", timeout=3.0):
        # `timeout` is the faulty agent's own; the reference agent in the same run keeps run()'s generous
        # one, so its cells pass however slowly a loaded machine starts it.
        start = time.monotonic()
        results, _, _ = run([faulty(fault, op, timeout), reference()], {scenario, "checkpoint_idle_no_write"})
        elapsed = time.monotonic() - start
        by = {(r.agent, r.row): r for r in results}
        bad = by[(f"faulty-{fault}", f"{scenario}[sync]")]
        self.assertEqual(bad.status, "fail", bad)
        self.assertIn(expect_in, bad.message)
        # The rest of the matrix ran and passed.
        for (agent, row), r in by.items():
            if agent == "reference":
                self.assertEqual(r.status, "pass", r)
        return bad, elapsed

    def test_crash(self):
        bad, _ = self.check("crash", "killed by signal 11")
        self.assertEqual(bad.step, 4)  # attach, register, bump, checkpoint

    def test_exit(self):
        self.check("exit", "exit status 3")

    def test_hang_is_killed_after_the_timeout(self):
        bad, elapsed = self.check("hang", "did not answer", timeout=2.0)
        self.assertIn("killed", bad.message)
        self.assertLess(elapsed, 60)

    def test_garbage(self):
        self.check("garbage", "not JSON")

    def test_wrong_id(self):
        self.check("wrong_id", "carries id")

    def test_reply_without_ok(self):
        self.check("no_ok", "no boolean 'ok'")

    def test_error_name_outside_the_abi(self):
        self.check("bad_error", "'OOPS' is not an error_code name")

    def test_no_hello(self):
        bad, _ = self.check("no_hello", "not JSON", op="-")
        self.assertIsNone(bad.step)
        self.assertIn("start-up", bad.message)

    def test_silent_agent_is_killed(self):
        bad, _ = self.check("silent", "did not answer at start-up", op="-", timeout=2.0)

    def test_a_short_timeout_is_the_faulty_agents_alone(self):
        # A reference agent that takes 3 s to start, beside a silent agent given 1 s: the silent one is
        # killed, the reference (under the run's timeout) passes, as a slow start on a loaded machine must.
        slow = AgentSpec("slow-reference", "sdk", ["sh", "-c", 'sleep 3; exec "$0" "$@"'] + REFERENCE, str(REPO_ROOT))
        results, _, _ = run([faulty("silent", "-", timeout=1.0), slow], {"checkpoint_idle_no_write"})
        by = {(r.agent, r.row): r for r in results}
        self.assertEqual(len(by), 4, by)
        for (agent, row), r in by.items():
            self.assertEqual(r.status, "fail" if agent == "faulty-silent" else "pass", r)
        self.assertIn("within 1s", by[("faulty-silent", "checkpoint_idle_no_write[sync]")].message)


class WatcherTest(unittest.TestCase):
    def judge(self, seen, order):
        from runner import StepFailure, _Watcher
        from scenario import Step
        w = _Watcher.__new__(_Watcher)
        w.orders = {"worker_state": [int(m.WorkerState[v]) for v in order]}
        w.seen = {"worker_state": [int(m.WorkerState[v]) for v in seen]}
        try:
            w.judge(Step(index=1, kind="agent", label="register"))
            return None
        except StepFailure as err:
            return str(err)

    def test_order(self):
        spec = ["INIT", "REGISTERED", "RUNNING"]
        self.assertIsNone(self.judge(["INIT", "RUNNING"], spec))  # a missed sample is fine
        self.assertIsNone(self.judge(["INIT", "REGISTERED", "RUNNING"], spec))
        self.assertIn("in this order", self.judge(["INIT", "RUNNING", "REGISTERED", "RUNNING"], spec))
        self.assertIn("expected to start at", self.judge(["REGISTERED", "RUNNING"], spec))
        self.assertIn("in this order", self.judge(["INIT", "DEAD", "RUNNING"], spec))


class GateCasesTest(unittest.TestCase):
    """The kernel column's path: export the gate scenarios as cases, replay them (here with the sim
    policy agent's --replay), import the answers as a column."""

    def test_export_replay_import(self):
        import gatecases
        import json
        import subprocess
        spec = cli.load_agents()["sim-policy"]
        self.assertIsNone(cli.build_agent(spec))
        scenarios, _ = load_dir(SCENARIOS)
        cases = gatecases.export_cases(scenarios)
        self.assertEqual({c["scenario"] for c in cases}, {s.name for s in scenarios if s.target == "gate"})
        feed = "".join(json.dumps(c) + "\n" for c in cases)
        out = subprocess.run([str(REPO_ROOT / spec.command[0]), "--replay"], input=feed, text=True,
                             capture_output=True, check=True).stdout.splitlines()
        column = gatecases.import_answers(cases, out, "kernel")
        self.assertTrue(all(c["status"] == "pass" for c in column["rows"].values()), column)
        # A gate that escalates a worker inside a critical section turns exactly that row red.
        tampered = [line.replace('"escalate":false,"verdict":"BLOCKED_CRITICAL"',
                                 '"escalate":true,"verdict":"ESCALATE"') for line in out]
        column = gatecases.import_answers(cases, tampered, "kernel")
        red = {row: c for row, c in column["rows"].items() if c["status"] == "fail"}
        self.assertEqual(set(red), {"gate_critical_blocks"})
        self.assertIn("escalate = True, expected False", red["gate_critical_blocks"]["message"])
        # The state machine's cases: in order, with a reset on each scenario's first.
        escalate = [c for c in cases if c["op"] == "escalate"]
        self.assertTrue(escalate)
        firsts = {}
        for c in escalate:
            firsts.setdefault(c["scenario"], c["case"])
            self.assertEqual(c["reset"], firsts[c["scenario"]] == c["case"], c["case"])
        # A backend that repeats HYBRID's kick instead of throttling turns exactly that row red.
        tampered = [line.replace('"step":"THROTTLE","escalated":true,"steps":2',
                                 '"step":"KICK","escalated":true,"steps":2') for line in out]
        red = {row for row, c in gatecases.import_answers(cases, tampered, "kernel")["rows"].items()
               if c["status"] == "fail"}
        self.assertEqual(red, {"gate_repeat_hybrid_kick_then_throttle"})
        # A backend that counts a rate-limited decision with a request pending as a dropped hint (the
        # 1.4 reading of SCB.md §5.2) turns exactly that row red.
        tampered = [line.replace('"hint":"PENDING","dropped":false', '"hint":"RATE_LIMITED","dropped":true')
                    for line in out]
        self.assertNotEqual(tampered, out)
        red = {row for row, c in gatecases.import_answers(cases, tampered, "kernel")["rows"].items()
               if c["status"] == "fail"}
        self.assertEqual(red, {"hint_rate_limited_request_pending"})
        # Answered without the episode kept between cases (every case replayed on its own), the
        # state-machine rows fail: the replay of a scenario depends on its order.
        alone = []
        for c in cases:
            single = subprocess.run([str(REPO_ROOT / spec.command[0]), "--replay"],
                                    input=json.dumps({**c, "reset": True}) + "\n", text=True,
                                    capture_output=True, check=True).stdout.splitlines()
            alone += single
        column = gatecases.import_answers(cases, alone, "kernel")
        self.assertEqual(column["rows"]["gate_repeat_per_policy"]["status"], "fail")
        self.assertEqual(column["rows"]["gate_critical_blocks"]["status"], "pass")
        # A missing answer is a failure, not a pass.
        column = gatecases.import_answers(cases, out[1:], "kernel")
        self.assertEqual(column["rows"][cases[0]["scenario"]]["status"], "fail")
        # A case the replayer refused fails its row with the replayer's reason.
        refused = [json.dumps({"case": cases[0]["case"], "error": "BAD_LAYOUT", "message": "scb_stride 512"})] + out[1:]
        row = gatecases.import_answers(cases, refused, "kernel")["rows"][cases[0]["scenario"]]
        self.assertEqual(row["status"], "fail")
        self.assertIn("refused the case: BAD_LAYOUT: scb_stride 512", row["message"])


class GateCommandTest(unittest.TestCase):
    """`cli.py gate NAME` is what each SDK's Bazel target runs: its exit status is the release gate."""

    def gate(self, *extra, env=None):
        import contextlib
        import io
        old = dict(os.environ)
        os.environ.update(env or {})
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                return cli.main(["gate", "reference", "--no-build", "--scenario", "checkpoint_pending*", *extra])
        finally:
            os.environ.clear()
            os.environ.update(old)

    def test_clean_sdk_passes_the_gate(self):
        self.assertEqual(self.gate(), 0)

    def test_one_deviation_fails_the_gate(self):
        self.assertEqual(self.gate(env={"MORPHEUS_CONFORMANCE_BREAK": "ack_before_yield"}), 1)

    def test_a_failing_build_fails_every_cell_of_its_column(self):
        with tempfile.TemporaryDirectory() as tmp:
            agent_dir = Path(tmp) / "broken-build"
            agent_dir.mkdir()
            (agent_dir / "agent.toml").write_text(
                'target = "sdk"\nbuild = [["false"]]\ncommand = ["true"]\n')
            spec = cli.load_agents(Path(tmp))["broken-build"]
            results, _, _ = run([spec], {"checkpoint_idle_no_write"}, build=True)
            self.assertTrue(results)
            for r in results:
                self.assertEqual(r.status, "fail")
                self.assertIn("build command false failed", r.message)


class StateFieldsTest(unittest.TestCase):
    """state's optional escapable/priority: required once declared, and checked against the SCB."""

    def cell(self, fault):
        results, _, _ = run([faulty(fault, "state")], {"escapable_priority_override"})
        (r,) = results
        return r

    def test_a_declared_field_missing_from_state_fails(self):
        r = self.cell("state_drop")
        self.assertEqual(r.status, "fail", r)
        self.assertIn("declares state field 'escapable'", r.message)

    def test_a_reported_value_that_is_not_in_the_scb_fails(self):
        r = self.cell("state_lie")
        self.assertEqual(r.status, "fail", r)
        self.assertIn("state reports escapable = True, scb[1].escapable holds 0", r.message)


class MatrixTest(unittest.TestCase):
    def test_markdown_and_merged_kernel_column(self):
        results, scenarios, broken = run([reference()], {"checkpoint_idle_no_write"})
        merged = {"kernel": {"gate_critical_blocks": {"status": "pass"}}}
        mx = matrix_mod.build(results, ["reference"], scenarios, broken, merged)
        text = matrix_mod.markdown(mx)
        self.assertIn("| scenario | reference | kernel |", text)
        self.assertIn("| checkpoint_idle_no_write[sync] | pass | - |", text)
        self.assertIn("| gate_critical_blocks | - | pass |", text)

    def test_a_failed_cell_names_the_first_differing_byte(self):
        with tempfile.TemporaryDirectory() as tmp:
            text = (SCENARIOS / "checkpoint_pending_yields_once.toml").read_text()
            # Claim the ack should not move: the reference agent (correctly) moves it.
            text = text.replace('last_ack_seq = "preempt_seq", yield_count = "prev + 1", '
                                'last_yield_reason = "PREEMPT_REQUEST"',
                                'yield_count = "prev + 1", last_yield_reason = "PREEMPT_REQUEST"', 1)
            (Path(tmp) / "wrong.toml").write_text(text)
            results, _, _ = run([reference()], None, scenarios_dir=Path(tmp))
            r = [x for x in results if x.variant == "sync"][0]
            self.assertEqual(r.status, "fail")
            self.assertEqual(r.step, 4)
            self.assertEqual(r.first_diff["field"], "scb[1].last_ack_seq")
            self.assertEqual((r.first_diff["expected_value"], r.first_diff["actual_value"]), (0, 1))


if __name__ == "__main__":
    unittest.main()
