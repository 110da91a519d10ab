// SPDX-License-Identifier: Apache-2.0 OR MIT
package example;

import dev.morpheus.Morpheus;
import dev.morpheus.Options;
import dev.morpheus.Worker;

/**
 * A work loop that checkpoints: registers the main thread (region discovered: MORPHEUS_REGION), works,
 * and yields when the scheduler asks, until it has yielded {@code --yields} times or {@code --seconds} pass.
 * Usage: WorkerLoop --slot N --yields K --seconds S
 */
public final class WorkerLoop {
    public static void main(String[] args) {
        int slot = Integer.parseInt(arg(args, "--slot", "0"));
        int yields = Integer.parseInt(arg(args, "--yields", "1"));
        long deadline = System.nanoTime() + Long.parseLong(arg(args, "--seconds", "30")) * 1_000_000_000L;
        int yielded = 0;
        try (Worker worker = Morpheus.register(Options.defaults().directSlot(slot))) {
            System.out.println("registered, slot " + slot + (worker.isAttached() ? " (attached)" : " (detached)")
                    + ", backend " + worker.backend() + ", JDK " + Runtime.version().feature());
            long work = 0;
            while (yielded < yields && System.nanoTime() < deadline) {
                for (int i = 0; i < 1000; i++) {
                    work += i * 31L; // a unit of work
                }
                if (worker.checkpoint()) {
                    yielded++;
                    System.out.println("checkpoint yielded, acknowledged preempt_seq " + worker.cachedAck());
                    Thread.yield();
                }
            }
            System.out.println("done after " + yielded + " yield(s) (" + work + ")");
        }
        System.exit(yielded == yields ? 0 : 1);
    }

    private static String arg(String[] args, String name, String fallback) {
        for (int i = 0; i + 1 < args.length; i++) {
            if (args[i].equals(name)) {
                return args[i + 1];
            }
        }
        return fallback;
    }
}
