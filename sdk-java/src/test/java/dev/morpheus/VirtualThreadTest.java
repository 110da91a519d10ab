// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.morpheus.abi.ErrorCode;
import dev.morpheus.abi.ScbOffsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Virtual threads (JDK 21+; skipped on JDK 17, which has none): they cannot register, and a checkpoint on
 * one is the detached checkpoint, which reads no SCB, even when another thread's worker has a request
 * pending and even through that thread's Worker object.
 */
class VirtualThreadTest {
    @TempDir
    Path dir;

    /** Run {@code body} on a new virtual thread and wait for it; rethrow what it threw. */
    static void onVirtualThread(Runnable body) throws Exception {
        assumeTrue(Runtime.version().feature() >= 21, "virtual threads need JDK 21");
        List<Throwable> failures = new ArrayList<>();
        Runnable guarded = () -> {
            try {
                assertTrue(Morpheus.isVirtual(Thread.currentThread()));
                body.run();
            } catch (Throwable t) {
                synchronized (failures) {
                    failures.add(t);
                }
            }
        };
        Thread thread = (Thread) Thread.class.getMethod("startVirtualThread", Runnable.class).invoke(null, guarded);
        thread.join();
        if (!failures.isEmpty()) {
            throw new AssertionError(failures.get(0));
        }
    }

    @Test
    void aVirtualThreadCannotRegister() throws Exception {
        try (TestRegion region = new TestRegion(dir, 2)) {
            onVirtualThread(() -> {
                MorpheusException e = WorkerTest.expect(ErrorCode.INVALID_ARGUMENT,
                        () -> Morpheus.register(Options.defaults().regionPath(region.pathString()).directSlot(0)));
                assertTrue(e.getMessage().contains("virtual thread"), e.getMessage());
                assertFalse(Morpheus.current().isPresent());
            });
            assertEquals(0, region.load32(0, ScbOffsets.WORKER_STATE), "nothing registered");
        }
    }

    @Test
    void aCheckpointOnAVirtualThreadIsDetachedAndReadsNoOtherSlot() throws Exception {
        try (TestRegion region = new TestRegion(dir, 2); Worker platform = Morpheus.register(
                Options.defaults().regionPath(region.pathString()).directSlot(1))) {
            region.bump(1);
            byte[] before = region.snapshot();
            onVirtualThread(() -> {
                for (int i = 0; i < 10_000; i++) {
                    assertFalse(Morpheus.checkpoint());
                    assertFalse(platform.checkpoint(), "another thread's worker never yields here");
                }
                WorkerTest.expect(ErrorCode.NOT_REGISTERED, platform::criticalEnter);
            });
            org.junit.jupiter.api.Assertions.assertArrayEquals(before, region.snapshot(), "nothing was written");
            assertTrue(platform.checkpoint(), "the request is still the platform worker's to honour");
        }
    }
}
