// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import java.util.Objects;
import java.util.concurrent.Executor;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Executors whose platform threads are Morpheus workers: each thread registers when it starts and closes
 * its worker when it ends; and loops that checkpoint every N iterations.
 *
 * <p>A thread whose registration fails (a broken region, a refused registration) logs the error once at
 * WARNING and runs its tasks without a worker: the executor keeps working, it is only not scheduled by
 * Morpheus. With no scheduler at all the workers are detached, which is no failure.
 */
public final class MorpheusExecutors {
    private MorpheusExecutors() {}

    private static final System.Logger LOG = System.getLogger("dev.morpheus");

    /** A factory of platform threads that register with {@code options} on start. */
    public static ThreadFactory threadFactory(String namePrefix, Options options) {
        Objects.requireNonNull(options, "options");
        AtomicInteger next = new AtomicInteger();
        return task -> {
            Thread thread = new Thread(() -> runRegistered(options, task), namePrefix + next.getAndIncrement());
            thread.setDaemon(false);
            return thread;
        };
    }

    /** A fixed pool of {@code threads} registered platform threads. */
    public static ExecutorService newFixedThreadPool(int threads, Options options) {
        return Executors.newFixedThreadPool(threads, threadFactory("morpheus-worker-", options));
    }

    /** A fixed pool of registered platform threads with the default options. */
    public static ExecutorService newFixedThreadPool(int threads) {
        return newFixedThreadPool(threads, Options.defaults());
    }

    private static void runRegistered(Options options, Runnable task) {
        Worker worker = null;
        try {
            worker = Morpheus.register(options);
        } catch (MorpheusException e) {
            LOG.log(System.Logger.Level.WARNING, "morpheus: thread \"" + Thread.currentThread().getName()
                    + "\" runs without a worker: " + e.getMessage());
        }
        try {
            task.run();
        } finally {
            if (worker != null) {
                worker.close();
            }
        }
    }

    /** One step of a long loop; returns false when the loop is done. */
    @FunctionalInterface
    public interface Step {
        boolean next();
    }

    /**
     * A loop that runs {@code step} until it returns false, calling the thread's checkpoint every {@code every}
     * steps and {@link Thread#yield()} when the scheduler asked.
     */
    public static Runnable yieldingLoop(int every, Step step) {
        checkEvery(every);
        Objects.requireNonNull(step, "step");
        return () -> {
            while (true) {
                for (int i = 0; i < every; i++) {
                    if (!step.next()) {
                        return;
                    }
                }
                if (Morpheus.checkpoint()) {
                    Thread.yield();
                }
            }
        };
    }

    /**
     * A loop like {@link #yieldingLoop}, but when the scheduler asks it returns to its executor: the rest of
     * the loop is submitted to {@code executor} again, so the tasks queued behind it run first.
     */
    public static Runnable resubmittingLoop(Executor executor, int every, Step step) {
        checkEvery(every);
        Objects.requireNonNull(executor, "executor");
        Objects.requireNonNull(step, "step");
        return new Runnable() {
            @Override
            public void run() {
                while (true) {
                    for (int i = 0; i < every; i++) {
                        if (!step.next()) {
                            return;
                        }
                    }
                    if (Morpheus.checkpoint()) {
                        executor.execute(this);
                        return;
                    }
                }
            }
        };
    }

    private static void checkEvery(int every) {
        if (every <= 0) {
            throw MorpheusException.of(dev.morpheus.abi.ErrorCode.INVALID_ARGUMENT,
                    "every: expected a number of steps >= 1, found " + every);
        }
    }
}
