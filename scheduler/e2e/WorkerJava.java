// SPDX-License-Identifier: GPL-2.0-only
import dev.morpheus.Morpheus;
import dev.morpheus.Options;
import dev.morpheus.Worker;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The Java SDK's test worker for the real-kernel test (e2e/guest.sh): the same roles and report lines as
 * worker.rs, one platform thread per role, each registered through the agent by the dev.morpheus jar on the
 * backend {@code -Dmorpheus.backend} names (ffm on JDK 25, jni on JDK 17).
 *
 * <pre>java -Dmorpheus.backend=ffm|jni -cp morpheus.jar:. WorkerJava --seconds S ROLE...</pre>
 *
 * The SDK's API does not expose the SCB, so its counters are read by {@code morpheus-e2e-worker --scb-of PID
 * SLOT} from this process's own mapping of the region, while the worker is still registered (and the critical
 * role still in its section).
 */
public final class WorkerJava {
    private static final List<String> ROLES = List.of("cooperative", "spin", "critical", "unescapable");

    private WorkerJava() {}

    /** Work the JIT cannot remove. */
    private static long burn(long iterations, long seed) {
        long x = 0x9e3779b97f4a7c15L ^ seed;
        for (long i = 0; i < iterations; i++) {
            x = Long.rotateLeft(x, 7) ^ (i * 0x2545f4914f6cdd1dL);
        }
        return x;
    }

    private static Map<String, String> scbOf(int slot) throws IOException, InterruptedException {
        Process reader = new ProcessBuilder("morpheus-e2e-worker", "--scb-of",
                Long.toString(ProcessHandle.current().pid()), Integer.toString(slot))
                .redirectError(ProcessBuilder.Redirect.INHERIT).start();
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        try (InputStream in = reader.getInputStream()) {
            in.transferTo(out);
        }
        int code = reader.waitFor();
        String line = out.toString(StandardCharsets.UTF_8).trim();
        if (code != 0) {
            throw new IOException("morpheus-e2e-worker --scb-of exited " + code);
        }
        Map<String, String> fields = new HashMap<>();
        for (String kv : line.split("\\s+")) {
            int eq = kv.indexOf('=');
            if (eq > 0) {
                fields.put(kv.substring(0, eq), kv.substring(eq + 1));
            }
        }
        return fields;
    }

    private static String runRole(String role, double seconds) throws Exception {
        // The critical role opens its section before it registers (the depth is the thread's), so the SCB
        // says in_critical from the moment the worker is RUNNING, whatever registration costs under TCG.
        boolean critical = role.equals("critical");
        if (critical) {
            Morpheus.criticalEnter();
        }
        // Java workers are not escapable unless asked (spec/SCB.md §5.5).
        Worker worker = Morpheus.register(Options.defaults().escapable(!role.equals("unescapable")));
        try {
            if (!worker.isAttached() || worker.slot().isEmpty()) {
                throw new IllegalStateException("registered but detached: " + worker);
            }
            int slot = worker.slot().getAsInt();
            Map<String, String> start = scbOf(slot);
            long deadline = System.nanoTime() + (long) (seconds * 1e9);
            long yields = 0;
            long sink = 0;
            while (System.nanoTime() < deadline) {
                sink += burn(20_000, sink);
                if (role.equals("cooperative") && worker.checkpoint()) {
                    yields++;
                    Thread.yield();
                }
            }
            // Taken before the section closes: afterwards the worker, still ignoring requests, may rightly
            // be escalated, and that must not count against the section.
            Map<String, String> scb = scbOf(slot);
            String report = "role=" + role + " sdk=java backend=" + worker.backend() + " slot=" + slot
                    + " preempt_seq_start=" + start.get("preempt_seq") + " preempt_seq=" + scb.get("preempt_seq")
                    + " last_ack_seq=" + scb.get("last_ack_seq") + " escalations=" + scb.get("escalations")
                    + " in_critical=" + scb.get("in_critical") + " yields=" + yields + " sink=" + (sink & 1);
            if (critical) {
                Morpheus.criticalExit();
            }
            return report;
        } finally {
            worker.close();
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 3 || !args[0].equals("--seconds")) {
            System.err.println("usage: WorkerJava --seconds S ROLE...");
            System.exit(2);
        }
        double seconds = Double.parseDouble(args[1]);
        if (!(seconds > 0 && seconds <= 3600)) {
            System.err.println("--seconds " + args[1] + ": expected a number in (0, 3600]");
            System.exit(2);
        }
        List<String> roles = List.of(args).subList(2, args.length);
        for (String role : roles) {
            if (!ROLES.contains(role)) {
                System.err.println("unknown role '" + role + "' (" + String.join(", ", ROLES) + ")");
                System.exit(2);
            }
        }
        String[] reports = new String[roles.size()];
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < roles.size(); i++) {
            int index = i;
            String role = roles.get(i);
            Thread thread = new Thread(() -> {
                try {
                    reports[index] = runRole(role, seconds);
                } catch (Exception e) {
                    reports[index] = "role=" + role + " sdk=java error=" + e;
                }
            }, "morpheus-" + role);
            threads.add(thread);
            thread.start();
        }
        boolean failed = false;
        for (int i = 0; i < threads.size(); i++) {
            threads.get(i).join();
            System.out.println(reports[i]);
            failed |= reports[i].contains(" error=");
        }
        System.exit(failed ? 1 : 0);
    }
}
