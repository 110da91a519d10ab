// SPDX-License-Identifier: GPL-2.0-only
import dev.morpheus.Morpheus;
import dev.morpheus.Options;
import dev.morpheus.Worker;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The Java SDK's test worker for the real-kernel test (e2e/guest.sh): the same roles and report lines as
 * worker.rs, one platform thread per role, each registered through the agent by the dev.morpheus jar on the
 * backend {@code -Dmorpheus.backend} names (ffm on JDK 25, jni on JDK 17).
 *
 * <pre>java -Dmorpheus.backend=ffm|jni -cp morpheus.jar:. WorkerJava [--ready FILE] (--seconds S | --until FILE) ROLE...</pre>
 *
 * {@code --ready FILE}: each role, once registered, writes {@code pid=P tid=T} (its process and thread) to FILE.
 * {@code --until FILE}: the roles run until FILE exists, or its directory is gone (the test that owned it has
 * ended without making it), instead of for a time: the test decides when (as worker.rs).
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

    /** How long the roles run: {@code seconds}, or until {@code until} exists (or its directory is gone). */
    private record Span(double seconds, Path until) {
        Span {
            if (until != null && until.toAbsolutePath().getParent() == null) {
                throw new IllegalArgumentException("--until " + until + ": no directory to make it in");
            }
        }
    }

    private static String runRole(String role, Span span, Path ready) throws Exception {
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
            if (ready != null) {
                // This thread's own tid, from the kernel; whole or not at all: written aside, then renamed.
                String tid = Files.readSymbolicLink(Path.of("/proc/thread-self")).getFileName().toString();
                Path tmp = Path.of(ready + ".tmp");
                Files.writeString(tmp, "pid=" + ProcessHandle.current().pid() + " tid=" + tid + "\n");
                Files.move(tmp, ready, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            }
            long deadline = System.nanoTime() + (long) (span.seconds() * 1e9);
            Path untilDir = span.until() == null ? null : span.until().toAbsolutePath().getParent();
            long yields = 0;
            long sink = 0;
            while (span.until() == null ? System.nanoTime() < deadline : !Files.exists(span.until()) && Files.isDirectory(untilDir)) {
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
        String usage = "usage: WorkerJava [--ready FILE] (--seconds S | --until FILE) ROLE...";
        Double seconds = null;
        Path until = null;
        Path ready = null;
        int first = 0;
        for (; first + 1 < args.length && args[first].startsWith("--"); first += 2) {
            switch (args[first]) {
                case "--seconds" -> {
                    seconds = Double.parseDouble(args[first + 1]);
                    if (!(seconds > 0 && seconds <= 3600)) {
                        System.err.println("--seconds " + args[first + 1] + ": expected a number in (0, 3600]");
                        System.exit(2);
                    }
                }
                case "--until" -> until = Path.of(args[first + 1]);
                case "--ready" -> ready = Path.of(args[first + 1]);
                default -> {
                    System.err.println("unknown option '" + args[first] + "'; " + usage);
                    System.exit(2);
                }
            }
        }
        if (first >= args.length || (seconds == null) == (until == null)) {
            System.err.println(usage);
            System.exit(2);
        }
        Span span = new Span(seconds == null ? 0 : seconds, until);
        Path readyFile = ready;
        List<String> roles = List.of(args).subList(first, args.length);
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
                    reports[index] = runRole(role, span, readyFile);
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
