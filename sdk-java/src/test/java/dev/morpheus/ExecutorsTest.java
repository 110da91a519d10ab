// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.morpheus.abi.ErrorCode;
import dev.morpheus.abi.ScbOffsets;
import dev.morpheus.abi.WorkerState;
import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class ExecutorsTest {
    @TempDir
    Path dir;

    @Test
    void poolThreadsRegisterOnStartAndReleaseTheSlotOnExit() throws Exception {
        try (TestRegion region = new TestRegion(dir, 4)) {
            ExecutorService pool = Executors.newSingleThreadExecutor(MorpheusExecutors.threadFactory("test-",
                    Options.defaults().regionPath(region.pathString()).directSlot(2)));
            int state = pool.submit(() -> {
                assertTrue(Morpheus.current().isPresent());
                return region.load32(2, ScbOffsets.WORKER_STATE);
            }).get();
            assertEquals(WorkerState.RUNNING.value, state);
            pool.shutdown();
            assertTrue(pool.awaitTermination(60, TimeUnit.SECONDS));
            TestRegion.await("slot 2 released by the exiting pool thread",
                    () -> region.load32(2, ScbOffsets.WORKER_STATE) == WorkerState.INIT.value);
        }
    }

    @Test
    void aThreadWhoseRegistrationFailsStillRunsItsTasks() throws Exception {
        ExecutorService pool = MorpheusExecutors.newFixedThreadPool(1,
                Options.defaults().regionPath(dir.resolve("missing").toString()).directSlot(0));
        try {
            assertEquals(Boolean.FALSE, pool.submit(() -> Morpheus.current().isPresent()).get());
        } finally {
            pool.shutdown();
        }
    }

    @Test
    void aYieldingLoopAcknowledgesAndRunsEveryStepOnce() throws Exception {
        try (TestRegion region = new TestRegion(dir, 4)) {
            ExecutorService pool = Executors.newSingleThreadExecutor(MorpheusExecutors.threadFactory("test-",
                    Options.defaults().regionPath(region.pathString()).directSlot(1)));
            try {
                pool.submit(() -> { }).get(); // the thread is registered
                long seq = region.bump(1);
                AtomicInteger steps = new AtomicInteger();
                pool.submit(MorpheusExecutors.yieldingLoop(10, () -> steps.incrementAndGet() < 1000)).get();
                assertEquals(1000, steps.get());
                assertEquals(seq, region.load64(1, ScbOffsets.LAST_ACK_SEQ));
                assertEquals(1, region.load64(1, ScbOffsets.YIELD_COUNT));
            } finally {
                pool.shutdown();
            }
        }
    }

    @Test
    void aResubmittingLoopReturnsToItsExecutorWhenAsked() throws Exception {
        try (TestRegion region = new TestRegion(dir, 4)) {
            ExecutorService pool = Executors.newSingleThreadExecutor(MorpheusExecutors.threadFactory("test-",
                    Options.defaults().regionPath(region.pathString()).directSlot(3)));
            try {
                pool.submit(() -> { }).get();
                region.bump(3);
                AtomicInteger steps = new AtomicInteger();
                CountDownLatch done = new CountDownLatch(1);
                Runnable loop = MorpheusExecutors.resubmittingLoop(pool, 10, () -> {
                    if (steps.incrementAndGet() < 1000) {
                        return true;
                    }
                    done.countDown();
                    return false;
                });
                pool.execute(loop);
                assertTrue(done.await(60, TimeUnit.SECONDS));
                assertEquals(1000, steps.get());
                assertEquals(1, region.load64(3, ScbOffsets.YIELD_COUNT), "asked once, returned once");
            } finally {
                pool.shutdown();
            }
        }
        WorkerTest.expect(ErrorCode.INVALID_ARGUMENT, () -> MorpheusExecutors.yieldingLoop(0, () -> false));
    }
}
