// SPDX-License-Identifier: Apache-2.0 OR MIT
// The example JVM service of deploy/ (image localhost/morpheus/jvm-service, built by
// deploy/images/build.sh): the same roles as the Node example (deploy/examples/node-service/service.js),
// one platform thread each, registered with the agent through dev.morpheus (the socket:
// MORPHEUS_SOCKET, default /run/morpheus/agent.sock). Prints one line per thread when it registers or
// runs detached (with the reason), and when it is registered again after an agent restart.
//
//     java -cp morpheus.jar:. Service ROLE[,ROLE...]     roles: cooperative, hog, unescapable, critical

import dev.morpheus.Morpheus;
import dev.morpheus.MorpheusException;
import dev.morpheus.Options;
import dev.morpheus.Worker;

import java.util.List;

public final class Service {
    private static final List<String> ROLES = List.of("cooperative", "hog", "unescapable", "critical");
    /** A hog's and an unescapable worker's burst between checkpoints (HOG_BURST_MS; default 250). */
    private static final long BURST_NS = burstMs() * 1_000_000L;
    private static volatile long sink;

    private static long burstMs() {
        try {
            long ms = Long.parseLong(System.getenv().getOrDefault("HOG_BURST_MS", "250"));
            return ms > 0 ? ms : 250;
        } catch (NumberFormatException e) {
            return 250;
        }
    }

    /** Work the JIT cannot remove. */
    private static void burn(int iterations) {
        long x = 0x9e3779b9L;
        for (int i = 0; i < iterations; i++) {
            x = x * 31 + i;
        }
        sink += x;
    }

    private static void burnFor(long nanos) {
        long until = System.nanoTime() + nanos;
        while (System.nanoTime() < until) {
            burn(5000);
        }
    }

    private static String describe(String role, Worker worker) {
        return worker.isAttached()
                ? "service: role=" + role + " registered slot=" + worker.slot().orElse(-1) + " backend=" + worker.backend()
                : "service: role=" + role + " detached (" + worker + ")";
    }

    private static void run(String role) {
        boolean escapable = !role.equals("unescapable");
        if (role.equals("critical")) {
            Morpheus.criticalEnter(); // before registering: the SCB says in_critical from the start
        }
        Worker worker;
        try {
            worker = Morpheus.register(Options.defaults().escapable(escapable));
        } catch (MorpheusException e) {
            System.out.println("service: role=" + role + " refused by the agent, running detached: " + e.getMessage());
            worker = Morpheus.register(Options.defaults().detached().escapable(escapable));
        }
        String last = describe(role, worker);
        System.out.println(last);
        for (;;) {
            if (role.equals("critical")) {
                burn(1 << 20); // in the section for good: no checkpoint
                continue;
            }
            if (role.equals("cooperative")) {
                burn(20000);
            } else {
                burnFor(BURST_NS);
            }
            if (worker.checkpoint()) {
                Thread.yield();
            }
            String now = describe(role, worker);
            if (!now.equals(last)) {
                System.out.println(now);
                last = now;
            }
        }
    }

    public static void main(String[] args) throws InterruptedException {
        List<String> roles = args.length == 1 ? List.of(args[0].split(",")) : List.of();
        if (roles.isEmpty() || !ROLES.containsAll(roles)) {
            System.err.println("service: usage: java Service ROLE[,ROLE...] (" + String.join(", ", ROLES) + ")");
            System.exit(2);
        }
        for (String role : roles) {
            Thread thread = new Thread(() -> run(role), "morpheus-" + role);
            thread.start();
        }
        Thread.currentThread().join();
    }
}
