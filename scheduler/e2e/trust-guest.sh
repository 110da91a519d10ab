# SPDX-License-Identifier: GPL-2.0-only
# Trust checks of the kernel backend (spec/SCB.md §10), sourced by guest.sh (its check/start_agent/
# stop_agent helpers): the pin directory is root-only, workers get the region through the agent, and
# a cgroup cap in force when the agent is SIGKILLed is undone by the next start (the effect journal),
# and a header a runtime forges changes nothing (the BPF side's configuration is its own).

if start_agent /tmp/trust-pin.log --mode observer; then
	mode=$(stat -c %a /sys/fs/bpf/morpheus)
	check "pin directory is root-only (mode $mode)" test "$mode" = 700
	stop_agent /tmp/trust-pin.log
else
	bad "scx_morpheus (trust: pin directory) did not start"
fi

TCG=/sys/fs/cgroup/e2e-trust
if echo +cpu >/sys/fs/cgroup/cgroup.subtree_control && mkdir -p "$TCG"; then
	before=$(cat "$TCG/cpu.max")
	if start_agent /tmp/trust-kill.log --mode enforced --policy throttle; then
		morpheus-e2e-worker --cgroup "$TCG" --seconds 8 spin >/tmp/trust-kill.out 2>&1 &
		wpid=$!
		i=0
		while [ "$(cat "$TCG/cpu.max")" = "$before" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
		check "the spinner's cgroup is capped ($(cat "$TCG/cpu.max"))" test "$(cat "$TCG/cpu.max")" != "$before"
		kill -KILL "$agent_pid"
		wait "$agent_pid" 2>/dev/null
		check "the SIGKILLed agent left its cap in force ($(cat "$TCG/cpu.max"))" test "$(cat "$TCG/cpu.max")" != "$before"
		if start_agent /tmp/trust-restart.log --mode observer; then
			check "the next start restored cpu.max from the journal ($(cat "$TCG/cpu.max"))" test "$(cat "$TCG/cpu.max")" = "$before"
			grep -q "capped by the previous instance" /tmp/trust-restart.log
			check "the next start says what it restored" test $? -eq 0
			stop_agent /tmp/trust-restart.log
		else
			bad "scx_morpheus (trust: restart after SIGKILL) did not start"
		fi
		wait "$wpid"
	else
		bad "scx_morpheus (trust: throttle) did not start"
	fi
else
	bad "cannot make the cgroup $TCG with the cpu controller"
fi

# S4 (SCB.md §10): the BPF side decides with its own configuration, never the header's. A worker
# writes scheduler_mode = ENFORCED (policy kick, grace 0) into the header it maps while the scheduler
# runs in observer mode: the write is visible to it, and the spinner (escapable, never acknowledging)
# is still never escalated. Counts, not timings: the gate counted it blocked by observer mode.
if start_agent /tmp/trust-forge.log --mode observer; then
	morpheus-e2e-worker --forge-header --seconds "$WORKER_SECONDS" spin >/tmp/trust-forge.out 2>&1
	check "the forging worker ran (exit $?)" test $? -eq 0
	cat /tmp/trust-forge.out
	check "the client sees its forged header (header_mode=$(field spin header_mode /tmp/trust-forge.out), ENFORCED is 1)" \
		test "$(field spin header_mode /tmp/trust-forge.out)" = 1
	check "the spinner was hinted ($(field spin preempt_seq_start /tmp/trust-forge.out) -> $(field spin preempt_seq /tmp/trust-forge.out))" \
		test "$(field spin preempt_seq /tmp/trust-forge.out)" -gt "$(field spin preempt_seq_start /tmp/trust-forge.out)"
	check "the spinner was never escalated under a forged ENFORCED header (escalations=$(field spin escalations /tmp/trust-forge.out))" \
		test "$(field spin escalations /tmp/trust-forge.out)" = 0
	# The BPF gate's own view, from the agent's stats.
	blocked_mode=$(agent_stat /gate_verdicts/mode)
	escalate=$(agent_stat /gate_verdicts/escalate)
	kicks=$(agent_stat /backend_counters/kicks)
	stop_agent /tmp/trust-forge.log
	echo "e2e: forged header: gate verdicts mode=$blocked_mode escalate=$escalate, kicks=$kicks"
	check "the BPF gate judged the spinner by its own mode (BLOCKED_MODE=$blocked_mode)" test "${blocked_mode:-0}" -gt 0
	check "the BPF gate never said ESCALATE (ESCALATE=$escalate) nor kicked (kicks=$kicks)" \
		test "${escalate:-x}" = 0 -a "${kicks:-x}" = 0
else
	bad "scx_morpheus (trust: forged header) did not start"
fi
