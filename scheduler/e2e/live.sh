# SPDX-License-Identifier: GPL-2.0-only
# The live phases the VM (e2e/guest.sh, sched_ext: E2E_BACKEND=kernel) and the host (e2e/trace-host.sh,
# the tracing backend: E2E_BACKEND=trace) share, sourced by both (POSIX sh: the guest's shell is
# busybox's): the check helpers, starting and stopping the agent, and every SDK's own workers through the
# observer and enforced (kick) phases (`live_sdks`). The trust phase (e2e/trust-guest.sh) uses the same
# helpers. Every verdict is a count or a state, never a duration: waits are bounded generously and
# only say when to look.
#
# The caller sets, before sourcing:
#   E2E_BACKEND   kernel | trace (`scx_morpheus --backend`);
#   E2E_DIR       where the SDK workers built by e2e/sdk-workers.sh are (py/, node/, java/);
#   PY_BIN PY_HOME PY_LIBS NODE_BIN JAVA25 JAVA17 HOST_LIBS: the interpreters, node and the JDKs' java
#                 (an empty one fails that SDK's rows, naming what is missing);
# and has scx_morpheus, morpheus, morpheus-e2e-worker and morpheus-e2e-worker-c on PATH.

failures=0
ok() { echo "e2e: ok: $*"; }
bad() { echo "e2e: FAIL: $*"; failures=$((failures + 1)); }
check() { # check DESCRIPTION COMMAND...
	d=$1
	shift
	if "$@"; then ok "$d"; else bad "$d"; fi
}
# field ROLE KEY FILE: value of KEY on the worker line of ROLE
field() { awk -v role="role=$1" -v key="$2" '$1 == role { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == key) print kv[2] } }' "$3"; }
# state: sched_ext's state (the kernel backend attaches a sched_ext scheduler; the tracing one none)
state() { cat /sys/kernel/sched_ext/state 2>/dev/null || echo none; }
SOCK=/run/morpheus/agent.sock
# agent_stat POINTER: a field of the running agent's stats, read from its stats socket (morpheus stats)
agent_stat() { timeout 30 morpheus stats --socket "$SOCK" --get "$1"; }
WORKER_SECONDS=${WORKER_SECONDS:-3}
E2E_BACKEND=${E2E_BACKEND:-kernel}
E2E_DIR=${E2E_DIR:-/morpheus}

agent_pid=""
# agent_up: the agent serves its socket (and, on the kernel backend, sched_ext runs its scheduler)
agent_up() { [ -S "$SOCK" ] && { [ "$E2E_BACKEND" != kernel ] || [ "$(state)" = enabled ]; }; }
start_agent() { # start_agent LOG ARGS...
	log=$1
	shift
	rm -f "$SOCK"
	scx_morpheus --backend "$E2E_BACKEND" --stats 1 "$@" >"$log" 2>&1 &
	agent_pid=$!
	i=0
	while [ $i -lt 600 ]; do
		agent_up && return 0
		if ! kill -0 "$agent_pid" 2>/dev/null; then
			echo "e2e: scx_morpheus exited during start-up:"
			cat "$log"
			return 1
		fi
		sleep 0.1
		i=$((i + 1))
	done
	echo "e2e: scx_morpheus did not come up in 60 s:"
	cat "$log"
	return 1
}
stop_agent() { # stop_agent LOG: Ctrl-C, wait, show the agent's output; sets rc to its exit code
	kill -INT "$agent_pid"
	wait "$agent_pid"
	rc=$?
	echo "---- scx_morpheus output ($1) ----"
	cat "$1"
	echo "---- end ----"
	check "scx_morpheus exits 0 after SIGINT (got $rc)" test "$rc" -eq 0
	if [ "$E2E_BACKEND" = kernel ]; then
		i=0
		while [ "$(state)" != disabled ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
		check "sched_ext state back to 'disabled' (is '$(state)')" test "$(state)" = disabled
	fi
	check "pinned region removed" test ! -e /sys/fs/bpf/morpheus/region
	check "no hint ring pinned" test ! -e /sys/fs/bpf/morpheus/hints
}

# --- every SDK's own workers, live ----------------------------------------------------------------
# The observer and enforced (kick) phases once per SDK, with that SDK's own worker: Rust
# (morpheus-e2e-worker), C (morpheus-e2e-worker-c on libmorpheus), Python (worker_py.py on the morpheus
# wheel), Node (worker_node.js on the npm package) and Java (WorkerJava on the jar: java-ffm on JDK 25,
# java-jni on JDK 17). Each check prints an `e2e-live: SDK ROW pass|fail` line (the VM's become each
# SDK's live-kernel column, e2e/live_columns.py).
live() { # live SDK ROW DESCRIPTION COMMAND...
	l_sdk=$1
	l_row=$2
	l_desc=$3
	shift 3
	if "$@"; then ok "$l_sdk: $l_desc"; echo "e2e-live: $l_sdk $l_row pass"; else bad "$l_sdk: $l_desc"; echo "e2e-live: $l_sdk $l_row fail"; fi
}
# sdk_worker RUN SDK ARGS...: SDK's own worker (rust c python node java-ffm java-jni) with ARGS (its
# options, then its roles: Python and Node take one role), the command run by RUN (`command`: as the
# caller; trust-guest.sh runs user A's worker through setpriv). Fails, saying so, where the SDK's
# runtime is missing.
sdk_worker() {
	sw_run=$1
	sw_sdk=$2
	shift 2
	case $sw_sdk in
	rust) $sw_run morpheus-e2e-worker "$@" ;;
	c) $sw_run morpheus-e2e-worker-c "$@" ;;
	python)
		[ -n "${PY_BIN:-}" ] || { echo "no Python interpreter (PY_BIN is empty)"; return 1; }
		$sw_run env PYTHONHOME="$PY_HOME" LD_LIBRARY_PATH="$PY_LIBS" PYTHONPATH="$E2E_DIR/py" PYTHONDONTWRITEBYTECODE=1 \
			"$PY_BIN" "$E2E_DIR/py/worker_py.py" "$@"
		;;
	node)
		[ -n "${NODE_BIN:-}" ] || { echo "no node (NODE_BIN is empty)"; return 1; }
		$sw_run env LD_LIBRARY_PATH="$HOST_LIBS" "$NODE_BIN" "$E2E_DIR/node/worker_node.js" "$@"
		;;
	java-ffm | java-jni) # one JVM, one platform thread per role (C1 only, serial GC: fewer threads and less JIT work under TCG)
		sw_backend=${sw_sdk#java-}
		if [ "$sw_backend" = ffm ]; then sw_java=${JAVA25:-}; else sw_java=${JAVA17:-}; fi
		[ -n "$sw_java" ] || { echo "no JDK for Java's $sw_backend backend"; return 1; }
		sw_flags=""
		[ "$sw_backend" = ffm ] && sw_flags=--enable-native-access=ALL-UNNAMED
		# shellcheck disable=SC2086
		$sw_run env LD_LIBRARY_PATH="$HOST_LIBS" "$sw_java" -Xmx128m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData $sw_flags \
			-Dmorpheus.backend="$sw_backend" -Djava.util.logging.ConsoleHandler.level=WARNING \
			-cp "$E2E_DIR/java/morpheus.jar:$E2E_DIR/java" WorkerJava "$@"
		;;
	*)
		echo "unknown SDK '$sw_sdk' (rust c python node java-ffm java-jni)"
		return 1
		;;
	esac
}
run_rust() { sdk_worker command rust --seconds "$WORKER_SECONDS" "$@"; }
run_c() { sdk_worker command c --seconds "$WORKER_SECONDS" "$@"; }
# per_role TAG COMMAND ROLE...: COMMAND ROLE in one process per role, all at once; prints each one's
# output in role order and fails if any failed.
per_role() {
	pr_tag=$1
	pr_cmd=$2
	shift 2
	pr_pids=""
	for role in "$@"; do
		rm -f "/tmp/$pr_tag-$role.rc"
		(
			$pr_cmd "$role" >"/tmp/$pr_tag-$role.out" 2>&1
			echo $? >"/tmp/$pr_tag-$role.rc"
		) &
		pr_pids="$pr_pids $!"
	done
	for p in $pr_pids; do wait "$p"; done
	pr_rc=0
	for role in "$@"; do
		cat "/tmp/$pr_tag-$role.out"
		[ "$(cat "/tmp/$pr_tag-$role.rc" 2>/dev/null)" = 0 ] || pr_rc=1
	done
	return $pr_rc
}
python_role() { sdk_worker command python --seconds "$WORKER_SECONDS" "$1"; }
node_role() { sdk_worker command node --seconds "$WORKER_SECONDS" "$1"; }
run_python() { # one process per role (threads of one interpreter would take turns on the GIL)
	[ -n "${PY_BIN:-}" ] || { echo "no Python interpreter (PY_BIN is empty)"; return 1; }
	per_role py python_role "$@"
}
run_node() { # one process per role (a Node process runs its JavaScript on one thread)
	[ -n "${NODE_BIN:-}" ] || { echo "no node (NODE_BIN is empty)"; return 1; }
	per_role node node_role "$@"
}
run_java_ffm() { sdk_worker command java-ffm --seconds "$WORKER_SECONDS" "$@"; }
run_java_jni() { sdk_worker command java-jni --seconds "$WORKER_SECONDS" "$@"; }
live_sdks() { # live_sdks SDK...: both phases for each SDK (rust c python node java-ffm java-jni)
	for sdk in "$@"; do
		runner=run_$(echo "$sdk" | tr - _)
		out=/tmp/live-$sdk-observer.out
		if start_agent "/tmp/live-$sdk-observer.log" --mode observer; then
			$runner spin cooperative >"$out" 2>&1
			wrc=$? # not rc: stop_agent sets that one
			cat "$out"
			stop_agent "/tmp/live-$sdk-observer.log"
			live "$sdk" observer_workers_ran "observer workers ran (exit $wrc)" test $wrc -eq 0
			s0=$(field spin preempt_seq_start "$out")
			s1=$(field spin preempt_seq "$out")
			live "$sdk" observer_hints_advance_preempt_seq "spinning worker saw preempt_seq advance ($s0 -> $s1)" test "${s1:-0}" -gt "${s0:-0}"
			y=$(field cooperative yields "$out")
			live "$sdk" observer_cooperative_acknowledges "cooperative worker was asked and acknowledged (yields=$y)" test "${y:-0}" -gt 0
			live "$sdk" observer_never_escalates "nobody escalated in observer mode (spin=$(field spin escalations "$out") cooperative=$(field cooperative escalations "$out"))" \
				test "$(field spin escalations "$out")" = 0 -a "$(field cooperative escalations "$out")" = 0
		else
			live "$sdk" observer_workers_ran "scx_morpheus (observer) started" false
		fi
		out=/tmp/live-$sdk-enforced.out
		if start_agent "/tmp/live-$sdk-enforced.log" --mode enforced --policy kick; then
			$runner spin critical unescapable >"$out" 2>&1
			wrc=$? # not rc: stop_agent sets that one
			cat "$out"
			stop_agent "/tmp/live-$sdk-enforced.log"
			live "$sdk" enforced_workers_ran "enforced workers ran (exit $wrc)" test $wrc -eq 0
			e=$(field spin escalations "$out")
			live "$sdk" enforced_escapable_spinner_escalated "non-acknowledging escapable worker was escalated (escalations=$e)" test "${e:-0}" -gt 0
			live "$sdk" enforced_critical_never_escalated "worker in a critical section was never escalated" test "$(field critical escalations "$out")" = 0
			live "$sdk" enforced_unescapable_never_escalated "worker with escapable=0 was never escalated" test "$(field unescapable escalations "$out")" = 0
		else
			live "$sdk" enforced_workers_ran "scx_morpheus (enforced, kick) started" false
		fi
	done
}
