// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * With the real scheduler, {@code scx_morpheus --backend sim --mode observer}: threads register through its
 * agent socket (the region comes with the reply) and a busy thread is asked to yield by the scheduler
 * itself. The pom builds the scheduler before the tests ({@code cargo build --release -p scx_morpheus}) and
 * names it in the system property morpheus.scx; run another way without it, the class is skipped. Nothing waits on a clock except the
 * bounds that turn a hang into a failure.
 */
class SimSchedulerTest {
    private static final long BOUND_NS = TimeUnit.SECONDS.toNanos(60);

    @TempDir
    Path dir;

    private Process scheduler;
    private Path socket;

    @BeforeEach
    void startScheduler() throws Exception {
        String scx = System.getProperty("morpheus.scx", "");
        Assumptions.assumeTrue(!scx.isEmpty() && Files.isExecutable(Path.of(scx)),
                "the scheduler is not built (" + scx + "): cargo build --release -p scx_morpheus");
        socket = dir.resolve("agent.sock");
        scheduler = new ProcessBuilder(scx, "--backend", "sim", "--mode", "observer", "--socket", socket.toString(),
                "--max-workers", "2")
                .redirectErrorStream(true)
                .redirectOutput(dir.resolve("scheduler.log").toFile())
                .start();
        long deadline = System.nanoTime() + BOUND_NS;
        while (!Files.exists(socket)) {
            assertTrue(scheduler.isAlive(), () -> "scx_morpheus exited: " + log());
            assertTrue(System.nanoTime() < deadline, () -> "scx_morpheus did not listen within 60 s: " + log());
            Thread.sleep(20);
        }
    }

    @AfterEach
    void stopScheduler() throws Exception {
        if (scheduler != null) {
            scheduler.destroy();
            if (!scheduler.waitFor(30, TimeUnit.SECONDS)) {
                scheduler.destroyForcibly().waitFor();
            }
        }
    }

    private String log() {
        try {
            return Files.readString(dir.resolve("scheduler.log"));
        } catch (IOException e) {
            return "(no log: " + e + ")";
        }
    }

    @Test
    void aBusyThreadRegisteredThroughTheAgentIsAskedToYieldAndAcknowledges() {
        try (Worker worker = Morpheus.register(Options.defaults().agentSocket(socket.toString()))) {
            assertTrue(worker.isAttached(), "registered through the agent, the worker is attached");
            assertTrue(worker.slot().isPresent());
            long before = worker.cachedAck();
            long deadline = System.nanoTime() + BOUND_NS;
            long state = 1;
            boolean yielded = false;
            while (!yielded && System.nanoTime() < deadline) {
                for (int i = 0; i < 10_000; i++) {
                    state ^= state << 13;
                    state ^= state >>> 7;
                    state ^= state << 17;
                }
                yielded = worker.checkpoint();
            }
            assertTrue(yielded, () -> "no request within 60 s of busy checkpointing (state " + worker + "): " + log());
            assertTrue(worker.yieldCount() >= 1);
            assertTrue(Long.compareUnsigned(worker.cachedAck(), before) > 0,
                    "the acknowledgement moved past the registration's");
        }
    }

    /**
     * One pool thread, a CPU-bound task that runs until a light task queued behind it has run: it can only
     * end if the scheduler asks its thread to yield and the loop returns to the executor.
     */
    @Test
    void aResubmittingLoopLetsTheTaskQueuedBehindItRunWhenTheSchedulerAsks() throws Exception {
        ExecutorService pool = MorpheusExecutors.newFixedThreadPool(1, Options.defaults().agentSocket(socket.toString()));
        try {
            AtomicBoolean attached = new AtomicBoolean();
            pool.submit(() -> attached.set(Morpheus.current().map(Worker::isAttached).orElse(false))).get();
            assertTrue(attached.get(), "the pool thread registered through the agent");

            AtomicBoolean lightRan = new AtomicBoolean();
            CountDownLatch heavyStarted = new CountDownLatch(1);
            CountDownLatch heavyDone = new CountDownLatch(1);
            long deadline = System.nanoTime() + BOUND_NS;
            long[] state = {1};
            pool.execute(MorpheusExecutors.resubmittingLoop(pool, 1, () -> {
                heavyStarted.countDown();
                if (lightRan.get() || System.nanoTime() > deadline) {
                    heavyDone.countDown();
                    return false;
                }
                for (int i = 0; i < 10_000; i++) {
                    state[0] ^= state[0] << 13;
                    state[0] ^= state[0] >>> 7;
                    state[0] ^= state[0] << 17;
                }
                return true;
            }));
            heavyStarted.await();
            pool.execute(() -> lightRan.set(true)); // queued behind the heavy task on the only thread
            assertTrue(heavyDone.await(120, TimeUnit.SECONDS), "the heavy task never ended");
            assertTrue(lightRan.get(), () -> "the light task did not run while the heavy one held the thread "
                    + "(60 s): the scheduler never asked, or the loop did not return to its executor: " + log());
        } finally {
            pool.shutdown();
            assertTrue(pool.awaitTermination(60, TimeUnit.SECONDS));
        }
    }
}
