# SPDX-License-Identifier: GPL-2.0-only
# Trust checks of the kernel backend (spec/SCB.md §10), sourced by guest.sh (its check/start_agent/
# stop_agent helpers): the pin directory is root-only, workers get the region through the agent, and
# a cgroup cap in force when the agent is SIGKILLed is undone by the next start (the effect journal).

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
