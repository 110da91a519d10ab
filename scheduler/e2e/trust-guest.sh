# SPDX-License-Identifier: GPL-2.0-only
# Trust checks of the kernel backend (spec/SCB.md §10), sourced by guest.sh (its check/start_agent/
# stop_agent helpers; e2e/trace-host.sh sources it the same way for the tracing backend on the host): the pin directory is root-only, workers get the region through the agent, and
# a cgroup cap in force when the agent is SIGKILLed is undone by the next start (the effect journal),
# a header a runtime forges changes nothing (the BPF side's configuration is its own), and each uid's
# SCBs are in a region map of its own that another unprivileged user can neither reach nor steer.

if start_agent /tmp/trust-pin.log --mode observer; then
	mode=$(stat -c %a /sys/fs/bpf/morpheus)
	check "pin directory is root-only (mode $mode)" test "$mode" = 700
	stop_agent /tmp/trust-pin.log
else
	bad "scx_morpheus (trust: pin directory) did not start"
fi

# The cap must still be in force when the agent is killed, whatever the speed of the VM: the episode's
# bound (--throttle-max-ms) is the longest there is, and the spinner runs until the test stops it, so
# nothing lifts the cap between the two looks at cpu.max (with the default bound an expiry could).
TCG=${TRUST_CGROUP:-/sys/fs/cgroup/e2e-trust}
if ! grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
	# A host whose /sys/fs/cgroup is no cgroup v2 with the cpu controller (e2e/trace-host.sh on a
	# machine with cgroup v1's cpu): there is no cpu.max to cap, so a throttle falls back to demotion
	# and this part has nothing to check.
	echo "e2e: skipped: the cap across SIGKILL (/sys/fs/cgroup is no cgroup v2 with the cpu controller)"
elif echo +cpu >/sys/fs/cgroup/cgroup.subtree_control && mkdir -p "$TCG"; then
	before=$(cat "$TCG/cpu.max")
	rm -f /tmp/trust-kill.stop
	if start_agent /tmp/trust-kill.log --mode enforced --policy throttle --throttle-max-ms 60000; then
		morpheus-e2e-worker --cgroup "$TCG" --until /tmp/trust-kill.stop spin >/tmp/trust-kill.out 2>&1 &
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
		touch /tmp/trust-kill.stop
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

# Trust domains (SCB.md §10): every uid's SCBs are in a BPF region map of its own. User A (uid 1001)
# registers an escapable=0 worker; user B (uid 1002, unprivileged, both in the socket group) registers
# its own and attacks A (e2e/domains_attack.rs): B's region shows no SCB but its own, B reaches no other
# region (pins, map ids, /proc descriptors and mappings all refused), and B forges every other slot of
# its region as a RUNNING escapable worker naming A's thread and a root process, and its own SCB as
# escapable with A's tid. The verdicts are counts: A is never escalated (only escapable = 1 in A's own
# SCB could make it so), every kick names B's registered thread (never a tid written in an SCB), and B,
# registered with escapable = 0, is escalated because of what it wrote in its own SCB (the scheduler
# reads B's SCB in B's map). A runs until the test tells it to stop, so it outlives B's whole attack.
# A's worker is each SDK's own in TRUST_SDKS (e2e/live.sh's sdk_worker; the caller sets it where every
# SDK's worker is built, e2e/trace-host.sh), the Rust one alone by default (the VMs); each reports its
# escalations in its own output. B is always the Rust attacker, one agent run per SDK.
DOMAINS_GROUP=2000
UID_A=1001
UID_B=1002
as_user() { # as_user UID COMMAND...: unprivileged, in the socket group only (util-linux's setpriv:
	# e2e/run.sh ships it at /usr/local/bin; busybox's applet of that name cannot change ids)
	u=$1
	shift
	"${SETPRIV:-/usr/local/bin/setpriv}" --reuid "$u" --regid "$u" --groups "$DOMAINS_GROUP" -- "$@"
}
as_user_a() { as_user "$UID_A" "$@"; }
trust_domains() { # trust_domains SDK: the phase with SDK's worker as user A
	sdk=$1
	if ! start_agent "/tmp/trust-domains-$sdk.log" --mode enforced --policy kick --socket-group "$DOMAINS_GROUP" -v; then
		bad "$sdk: scx_morpheus (trust: domains) did not start"
		return
	fi
	rm -f /tmp/domains-a.ready /tmp/domains-a.stop
	sdk_worker as_user_a "$sdk" --ready /tmp/domains-a.ready --until /tmp/domains-a.stop unescapable \
		>"/tmp/domains-a-$sdk.out" 2>&1 &
	a_pid=$!
	i=0
	while [ ! -f /tmp/domains-a.ready ] && kill -0 "$a_pid" 2>/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
	check "$sdk: user A registered its worker ($(cat /tmp/domains-a.ready 2>/dev/null))" test -f /tmp/domains-a.ready
	a_proc=$(sed -n 's/.*pid=\([0-9]*\).*/\1/p' /tmp/domains-a.ready 2>/dev/null)
	a_tid=$(sed -n 's/.*tid=\([0-9]*\).*/\1/p' /tmp/domains-a.ready 2>/dev/null)
	sh -c 'while :; do :; done' &
	root_pid=$!
	# B runs until told to stop, so both users hold a worker (and so a domain) while the pins are
	# listed; once B's last worker is gone its domain is freed and its pin removed (§10).
	rm -f /tmp/domains-b.ready /tmp/domains-b.stop
	as_user "$UID_B" morpheus-e2e-worker --ready /tmp/domains-b.ready --attack "${a_proc:-0}:${a_tid:-0}:$root_pid:$agent_pid" \
		--until /tmp/domains-b.stop unescapable >"/tmp/domains-b-$sdk.out" 2>&1 &
	b_pid=$!
	i=0
	while [ ! -f /tmp/domains-b.ready ] && kill -0 "$b_pid" 2>/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
	pins=$(ls /sys/fs/bpf/morpheus | tr '\n' ' ')
	sleep "$WORKER_SECONDS"
	touch /tmp/domains-b.stop
	wait "$b_pid"
	b_rc=$?
	i=0
	while [ -e "/sys/fs/bpf/morpheus/region-uid$UID_B" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
	check "$sdk: user B's domain was freed with its last worker (pins now: $(ls /sys/fs/bpf/morpheus | tr '\n' ' '))" \
		test ! -e "/sys/fs/bpf/morpheus/region-uid$UID_B"
	touch /tmp/domains-a.stop
	wait "$a_pid"
	a_rc=$?
	kill "$root_pid"
	wait "$root_pid" 2>/dev/null
	cat "/tmp/domains-a-$sdk.out" "/tmp/domains-b-$sdk.out"
	# The BPF gate's own view (the agent's stats): A's worker is judged NOT_ESCAPABLE from its own SCB
	# (B's too, until its forgery, so this count supports the check on A's escalations, not replaces it).
	not_escapable=$(agent_stat /gate_verdicts/not_escapable)
	stop_agent "/tmp/trust-domains-$sdk.log"
	echo "e2e: trust domains ($sdk): pins: $pins"
	echo "e2e: trust domains ($sdk): B: $(grep '^role=' "/tmp/domains-b-$sdk.out" | cut -d' ' -f2,3,10,16-)"
	check "$sdk: user A's worker ran and unregistered (exit $a_rc)" test "$a_rc" -eq 0
	check "$sdk: user B's attack ran (exit $b_rc)" test "$b_rc" -eq 0
	check "$sdk: uids $UID_A and $UID_B each got a region map of their own (pins: $pins)" \
		sh -c "echo '$pins' | grep -qw region-uid$UID_A && echo '$pins' | grep -qw region-uid$UID_B"
	b() { field unescapable "$1" "/tmp/domains-b-$sdk.out"; }
	check "$sdk: B's region holds no SCB but its own (foreign_slots=$(b foreign_slots) of scb_count=$(b scb_count))" \
		test "$(b foreign_slots)" = 0
	check "$sdk: B cannot open the root's pinned region (pin=$(b pin)) nor list the pin directory (pin_dir=$(b pin_dir))" \
		test "$(b pin)" = denied -a "$(b pin_dir)" = denied
	check "$sdk: B opens no BPF map by id (map_ids_opened=$(b map_ids_opened), map_id_1=$(b map_id_1))" \
		test "$(b map_ids_opened)" = 0 -a "$(b map_id_1)" = denied
	check "$sdk: B cannot reach the agent's or A's descriptors and mappings (agent_fds=$(b agent_fds) victim_fds=$(b victim_fds) victim_map_files=$(b victim_map_files))" \
		test "$(b agent_fds)" = denied -a "$(b victim_fds)" = denied -a "$(b victim_map_files)" = denied
	check "$sdk: B forged every other slot of its region (forged_slots=$(b forged_slots))" test "$(b forged_slots)" -gt 0
	a_esc=$(field unescapable escalations "/tmp/domains-a-$sdk.out")
	check "$sdk: user A's escapable=0 worker was never escalated (escalations=$a_esc)" test "$a_esc" = 0
	b_tid=$(b tid)
	check "$sdk: B's own worker was escalated for what B wrote in its own SCB (escalations=$(b escalations))" test "$(b escalations)" -gt 0
	kicked=$(sed -n 's/.*: kick: slot [0-9]* (tid \([0-9]*\)).*/\1/p' "/tmp/trust-domains-$sdk.log" | sort -u | tr '\n' ' ')
	check "$sdk: every kick named B's registered thread $b_tid, none A's $a_tid or root's $root_pid (kicked tids: $kicked)" \
		test "$kicked" = "$b_tid "
	check "$sdk: the BPF gate judged A by its own SCB (NOT_ESCAPABLE=$not_escapable)" test "${not_escapable:-0}" -gt 0
	check "$sdk: every region pin was removed at exit ($(ls /sys/fs/bpf/morpheus 2>/dev/null | tr '\n' ' '))" \
		test -z "$(ls /sys/fs/bpf/morpheus 2>/dev/null)"
}
for sdk in ${TRUST_SDKS:-rust}; do
	domains_start=$SECONDS
	trust_domains "$sdk"
	echo "e2e: phase time: trust domains with A on $sdk $((SECONDS - domains_start)) s"
done
