// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Random;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.LongAdder;

/**
 * An executor of CPU-bound tasks with light tasks beside them, with the real scheduler running
 * (jmh/executor.sh starts {@code scx_morpheus --backend sim}; results in ../BENCHMARKS.md). Not a JMH
 * benchmark: a cell is seconds of a whole pool, not a call.
 *
 * <p>A pool of {@code --threads} platform threads runs H heavy tasks, each an endless loop of work units
 * (one xorshift64 step each) that checks every {@code --every} units whether the cell is over. Modes:
 * <ul>
 *   <li>{@code blocking}: a plain {@link java.util.concurrent.ThreadPoolExecutor}; heavy tasks never give
 *       their thread back;
 *   <li>{@code yield}: the same pool; heavy tasks call {@link Thread#yield()} every {@code --every} units;
 *   <li>{@code resubmit}: the same pool; every {@code --every} units a heavy task returns to the executor
 *       (submits its rest again, behind the queued tasks);
 *   <li>{@code morpheus}: {@link MorpheusExecutors#newFixedThreadPool} (threads registered through the
 *       scheduler's socket) and {@link MorpheusExecutors#resubmittingLoop}: a checkpoint every
 *       {@code --every} units, and a return to the executor only when the scheduler asked.
 * </ul>
 * A probe thread outside the pool submits a light task (1,000 units) every 5–15 ms (seeded: the same
 * sequence in every cell); each records how long it waited from submission to start. Per cell: heavy units
 * per second, light tasks run within the cell, and their wait's p50/p99. Rounds are the outer loop, so the
 * modes compared in one round see the same machine load; a warm-up round of 1 s cells comes first.
 */
public final class ExecutorThroughput {
    private static final String[] MODES = {"blocking", "yield", "resubmit", "morpheus"};
    private static final int LIGHT_UNITS = 1_000;

    /** Sink for the work's result, so the JIT cannot drop the work. */
    static volatile long sink;

    private final Options options;
    private final int threads;
    private final int every;
    private final double seconds;

    private ExecutorThroughput(Options options, int threads, int every, double seconds) {
        this.options = options;
        this.threads = threads;
        this.every = every;
        this.seconds = seconds;
    }

    /**
     * One xorshift64 step per unit: CPU only, no memory traffic, and a dependent chain the JIT cannot
     * shorten (an LCG step it can: unrolled, (s*a+c)*a+c folds into one multiply per several steps).
     */
    static long work(long state, int units) {
        for (int i = 0; i < units; i++) {
            state ^= state << 13;
            state ^= state >>> 7;
            state ^= state << 17;
        }
        return state;
    }

    /** What one cell measured. */
    record Cell(int round, String mode, int heavy, double seconds, long heavyUnits, int lightSubmitted,
                int lightRun, long[] waitsNs, int registered) {
        String json() {
            long[] sorted = waitsNs.clone();
            Arrays.sort(sorted);
            return String.format(Locale.ROOT,
                    "{\"round\":%d,\"mode\":\"%s\",\"heavy\":%d,\"seconds\":%.4f,\"heavy_units\":%d,"
                            + "\"light_submitted\":%d,\"light_run\":%d,\"wait_p50_ms\":%s,\"wait_p99_ms\":%s,"
                            + "\"registered_threads\":%d}",
                    round, mode, heavy, seconds, heavyUnits, lightSubmitted, lightRun,
                    percentileMs(sorted, 0.50), percentileMs(sorted, 0.99), registered);
        }

        private static String percentileMs(long[] sorted, double p) {
            if (sorted.length == 0) {
                return "null";
            }
            int i = Math.min(sorted.length - 1, (int) Math.ceil(p * sorted.length) - 1);
            return String.format(Locale.ROOT, "%.3f", sorted[Math.max(0, i)] / 1e6);
        }
    }

    Cell run(int round, String mode, int heavy) throws InterruptedException {
        boolean morpheus = mode.equals("morpheus");
        ExecutorService pool = morpheus ? MorpheusExecutors.newFixedThreadPool(threads, options)
                : Executors.newFixedThreadPool(threads);
        // Start every thread (the Morpheus ones register) before the clock starts, and count the
        // registered ones: a morpheus cell without its workers attached would measure nothing.
        AtomicInteger registered = new AtomicInteger();
        CountDownLatch started = new CountDownLatch(threads);
        CountDownLatch release = new CountDownLatch(1);
        for (int i = 0; i < threads; i++) {
            pool.execute(() -> {
                if (Morpheus.current().map(Worker::isAttached).orElse(false)) {
                    registered.incrementAndGet();
                }
                started.countDown();
                awaitQuietly(release);
            });
        }
        started.await();
        release.countDown();
        if (morpheus && registered.get() != threads) {
            pool.shutdownNow();
            throw new IllegalStateException("morpheus cell: expected " + threads
                    + " pool threads attached to the scheduler, found " + registered.get());
        }

        LongAdder units = new LongAdder();
        ConcurrentLinkedQueue<Long> waits = new ConcurrentLinkedQueue<>();
        AtomicInteger lightRun = new AtomicInteger();
        CountDownLatch heavyDone = new CountDownLatch(heavy);
        long start = System.nanoTime();
        long end = start + (long) (seconds * 1e9);
        for (int h = 0; h < heavy; h++) {
            pool.execute(heavyTask(mode, pool, units, end, h + 1, heavyDone));
        }
        int submitted = 0;
        Random random = new Random(42);
        while (true) {
            long sleepNs = TimeUnit.MILLISECONDS.toNanos(5) + (long) (random.nextDouble() * 10e6);
            long wake = System.nanoTime() + sleepNs;
            if (wake >= end) {
                break;
            }
            TimeUnit.NANOSECONDS.sleep(sleepNs);
            long submittedAt = System.nanoTime();
            submitted++;
            pool.execute(() -> {
                long began = System.nanoTime();
                if (began < end) {
                    waits.add(began - submittedAt);
                    sink = work(began, LIGHT_UNITS);
                    lightRun.incrementAndGet();
                }
            });
        }
        long remaining = end - System.nanoTime();
        if (remaining > 0) {
            TimeUnit.NANOSECONDS.sleep(remaining);
        }
        // Every heavy task has seen the end before the pool shuts down (a resubmitting one must not be refused).
        if (!heavyDone.await(60, TimeUnit.SECONDS)) {
            pool.shutdownNow();
            throw new IllegalStateException(mode + " cell: the heavy tasks did not end within 60 s of the cell's end");
        }
        pool.shutdown();
        if (!pool.awaitTermination(60, TimeUnit.SECONDS)) {
            pool.shutdownNow();
            throw new IllegalStateException(mode + " cell: the pool did not finish within 60 s of the cell's end");
        }
        long[] waitsNs = waits.stream().mapToLong(Long::longValue).toArray();
        return new Cell(round, mode, heavy, seconds, units.sum(), submitted, lightRun.get(), waitsNs, registered.get());
    }

    private Runnable heavyTask(String mode, ExecutorService pool, LongAdder units, long end, long seed,
                               CountDownLatch done) {
        switch (mode) {
            case "blocking":
            case "yield": {
                boolean yield = mode.equals("yield");
                return () -> {
                    long state = seed;
                    while (System.nanoTime() < end) {
                        state = work(state, every);
                        units.add(every);
                        if (yield) {
                            Thread.yield();
                        }
                    }
                    sink = state;
                    done.countDown();
                };
            }
            case "resubmit":
                return new Runnable() {
                    long state = seed;

                    @Override
                    public void run() {
                        if (System.nanoTime() >= end) {
                            sink = state;
                            done.countDown();
                            return;
                        }
                        state = work(state, every);
                        units.add(every);
                        pool.execute(this); // back to the executor every `every` units
                    }
                };
            case "morpheus": {
                long[] state = {seed};
                // One step is `every` units: the loop checkpoints after each step and returns to the
                // executor only when the scheduler asked.
                return MorpheusExecutors.resubmittingLoop(pool, 1, () -> {
                    if (System.nanoTime() >= end) {
                        sink = state[0];
                        done.countDown();
                        return false;
                    }
                    state[0] = work(state[0], every);
                    units.add(every);
                    return true;
                });
            }
            default:
                throw new IllegalArgumentException("mode: expected one of " + Arrays.toString(MODES) + ", found " + mode);
        }
    }

    private static void awaitQuietly(CountDownLatch latch) {
        try {
            latch.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    public static void main(String[] args) throws Exception {
        String socket = null;
        Path json = null;
        int threads = 2;
        int every = 10_000;
        int rounds = 3;
        double seconds = 3;
        int[] heavies = {2, 4, 8};
        for (int i = 0; i < args.length; i++) {
            String value = i + 1 < args.length ? args[i + 1] : null;
            switch (args[i]) {
                case "--socket" -> socket = value;
                case "--json" -> json = Path.of(value);
                case "--threads" -> threads = Integer.parseInt(value);
                case "--every" -> every = Integer.parseInt(value);
                case "--rounds" -> rounds = Integer.parseInt(value);
                case "--seconds" -> seconds = Double.parseDouble(value);
                case "--heavy" -> heavies = Arrays.stream(value.split(",")).mapToInt(Integer::parseInt).toArray();
                default -> throw new IllegalArgumentException("unknown option " + args[i]
                        + " (expected --socket, --json, --threads, --every, --rounds, --seconds, --heavy)");
            }
            i++;
        }
        if (socket == null || json == null) {
            throw new IllegalArgumentException("--socket (the scheduler's agent socket) and --json are required");
        }
        ExecutorThroughput bench = new ExecutorThroughput(Options.defaults().agentSocket(socket), threads, every, seconds);
        List<String> cells = new ArrayList<>();
        System.out.printf(Locale.ROOT, "executor: %d threads, heavy tasks %s, every %d units, %.1f s cells, %d rounds, backend %s, JDK %s%n",
                threads, Arrays.toString(heavies), every, seconds, rounds, Morpheus.backendName(), Runtime.version());
        // Warm-up, not recorded: one 1 s cell per mode, so that every mode's loops are compiled before the
        // first recorded cell (the first cell of a cold JVM ran at a fraction of the later speed).
        ExecutorThroughput warmUp = new ExecutorThroughput(Options.defaults().agentSocket(socket), threads, every, 1);
        for (String mode : MODES) {
            warmUp.run(0, mode, heavies[0]);
        }
        for (int round = 1; round <= rounds; round++) {
            for (int heavy : heavies) {
                for (String mode : MODES) {
                    Cell cell = bench.run(round, mode, heavy);
                    System.out.println(cell.json());
                    cells.add(cell.json());
                }
            }
        }
        Files.writeString(json, String.format(Locale.ROOT,
                "{\"threads\":%d,\"every\":%d,\"seconds\":%.3f,\"rounds\":%d,\"backend\":\"%s\",\"jdk\":\"%s\",\"cells\":[%n%s%n]}%n",
                threads, every, seconds, rounds, Morpheus.backendName(), Runtime.version(), String.join(",\n", cells)));
    }
}
