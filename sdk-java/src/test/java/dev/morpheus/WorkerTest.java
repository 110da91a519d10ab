// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.morpheus.abi.Abi;
import dev.morpheus.abi.ErrorCode;
import dev.morpheus.abi.RuntimeKind;
import dev.morpheus.abi.RuntimeMode;
import dev.morpheus.abi.ScbOffsets;
import dev.morpheus.abi.WorkerState;
import dev.morpheus.abi.YieldReason;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The API on the backend this JVM chose (the build runs it once per backend, see pom.xml and BUILD.bazel). */
class WorkerTest {
    @TempDir
    Path dir;
    TestRegion region;

    @BeforeEach
    void createRegion() {
        region = new TestRegion(dir, 8);
    }

    @AfterEach
    void leaveNoWorker() {
        Morpheus.current().ifPresent(Worker::close);
        region.close();
    }

    private Worker register(int slot) {
        return Morpheus.register(Options.defaults().regionPath(region.pathString()).directSlot(slot));
    }

    static MorpheusException expect(ErrorCode code, Runnable action) {
        MorpheusException e = assertThrows(MorpheusException.class, action::run);
        assertEquals(code, e.code(), e.getMessage());
        return e;
    }

    @Test
    void theBackendIsTheOneAskedFor() {
        String asked = System.getProperty("morpheus.backend", "");
        String expected = asked.isEmpty() ? (Runtime.version().feature() >= 22 ? "ffm" : "jni") : asked;
        assertEquals(expected, Morpheus.backendName());
        try (Worker worker = Morpheus.register(Options.defaults().detached())) {
            assertEquals(expected, worker.backend());
        }
    }

    @Test
    void registrationWritesTheSlotBeforeRunningAndCloseFreesIt() {
        Worker worker = register(1);
        assertEquals(WorkerState.RUNNING.value, region.load32(1, ScbOffsets.WORKER_STATE));
        assertEquals(RuntimeKind.JAVA.value, region.load32(1, ScbOffsets.RUNTIME_KIND));
        assertEquals(Abi.escapableDefault(RuntimeKind.JAVA) ? 1 : 0, region.load32(1, ScbOffsets.ESCAPABLE));
        assertEquals(0, region.load32(1, ScbOffsets.PRIORITY));
        assertEquals(1, worker.slot().getAsInt());
        assertTrue(worker.isAttached());
        worker.checkStatus();
        assertFalse(worker.escapable());
        worker.close();
        assertEquals(WorkerState.INIT.value, region.load32(1, ScbOffsets.WORKER_STATE));
        assertEquals(0, region.load32(1, ScbOffsets.TID));
        assertFalse(Morpheus.current().isPresent());
        worker.close(); // twice: nothing
        assertFalse(worker.checkpoint());
    }

    @Test
    void escapableAndPriorityFromTheOptionsAreInTheSlotAtRunning() {
        try (Worker worker = Morpheus.register(
                Options.defaults().regionPath(region.pathString()).directSlot(2).escapable(true).priority(-7))) {
            assertEquals(1, region.load32(2, ScbOffsets.ESCAPABLE));
            assertEquals(-7, region.load32(2, ScbOffsets.PRIORITY));
            assertTrue(worker.escapable());
            assertEquals(-7, worker.priority());
            worker.setEscapable(false);
            worker.setPriority(19);
            assertEquals(0, region.load32(2, ScbOffsets.ESCAPABLE));
            assertEquals(19, region.load32(2, ScbOffsets.PRIORITY));
            byte[] before = region.snapshot();
            MorpheusException e = expect(ErrorCode.INVALID_ARGUMENT, () -> worker.setPriority(20));
            // The core's refusal (validate_priority), the only range check.
            assertTrue(e.getMessage().contains("priority in -20..=19, found 20"), e.getMessage());
            assertArrayEquals(before, region.snapshot());
            assertEquals(19, worker.priority());
        }
    }

    @Test
    void anOutOfRangePriorityIsRefusedByTheCoreAtRegisterAndWritesNothing() {
        // Options holds the value; the binding kit's option rules refuse it, under JNI and FFM alike.
        byte[] before = region.snapshot();
        for (int priority : new int[] {-21, 20, Integer.MIN_VALUE}) {
            MorpheusException e = expect(ErrorCode.INVALID_ARGUMENT, () -> Morpheus.register(
                    Options.defaults().regionPath(region.pathString()).directSlot(1).priority(priority)));
            assertTrue(e.getMessage().contains("priority in -20..=19, found " + priority), e.getMessage());
            assertArrayEquals(before, region.snapshot());
            assertFalse(Morpheus.current().isPresent());
        }
    }

    @Test
    void aRegisteredThreadWithAnOutOfRangePriorityIsInvalidArgumentBeforeAlreadyRegistered() {
        // spec/SCB.md §4's refusal order, decided once by the core: the options first, then the thread's worker,
        // then the slot (its own busy slot 1, a free one, one past scb_count 8). Conformance's
        // register_refusal_order_* scenarios pin the same, with a slot another worker holds.
        try (Worker worker = register(1)) {
            byte[] before = region.snapshot();
            for (int slot : new int[] {1, 2, 8}) {
                MorpheusException e = expect(ErrorCode.INVALID_ARGUMENT, () -> Morpheus.register(
                        Options.defaults().regionPath(region.pathString()).directSlot(slot).priority(20)));
                assertTrue(e.getMessage().contains("found 20"), e.getMessage());
                expect(ErrorCode.ALREADY_REGISTERED, () -> Morpheus.register(
                        Options.defaults().regionPath(region.pathString()).directSlot(slot).priority(19)));
            }
            assertArrayEquals(before, region.snapshot());
            assertEquals(Morpheus.current().get(), worker);
            region.bump(1);
            assertTrue(worker.checkpoint(), "the first worker still works");
        }
    }

    @Test
    void aThreadTheCoreRegisteredWithoutTheJavaApiIsTheCurrentWorkerAndRefusesASecond() {
        // The core holds the thread's worker, not Java: a registration made in the native library directly (no
        // Worker object, as another caller of the same library would) is what Morpheus.current() finds, and
        // Morpheus.register is ALREADY_REGISTERED for it.
        Backend backend = Morpheus.backend();
        long handle = backend.registerThread(Options.defaults().regionPath(region.pathString()).directSlot(3));
        assertEquals(handle, backend.currentHandle());
        assertEquals(WorkerState.RUNNING.value, region.load32(3, ScbOffsets.WORKER_STATE));
        Worker found = Morpheus.current().orElseThrow();
        assertEquals(3, found.slot().getAsInt());
        assertEquals(found, Morpheus.current().get(), "one handle object while the registration lives");
        MorpheusException e = expect(ErrorCode.ALREADY_REGISTERED, () -> register(4));
        assertTrue(e.getMessage().contains("slot 3"), e.getMessage());
        assertEquals(WorkerState.INIT.value, region.load32(4, ScbOffsets.WORKER_STATE));
        region.bump(3);
        assertTrue(Morpheus.checkpoint(), "the static checkpoint uses the worker current() found");
        found.close();
        assertEquals(WorkerState.INIT.value, region.load32(3, ScbOffsets.WORKER_STATE));
        assertEquals(0, backend.currentHandle());
        assertFalse(Morpheus.current().isPresent());
        try (Worker again = register(3)) {
            assertEquals(again, Morpheus.current().get());
            assertEquals(again.handle(), backend.currentHandle(), "the Java API's registration is the core's");
        }
    }

    @Test
    void checkpointYieldsOncePerObservationAndAcknowledges() {
        try (Worker worker = register(0)) {
            assertFalse(worker.checkpoint());
            byte[] idle = region.snapshot();
            for (int i = 0; i < 1000; i++) {
                assertFalse(worker.checkpoint());
            }
            assertArrayEquals(idle, region.snapshot(), "an idle checkpoint writes nothing");
            region.bump(0);
            long seq = region.bump(0);
            assertTrue(worker.checkpoint());
            assertEquals(seq, region.load64(0, ScbOffsets.LAST_ACK_SEQ));
            assertEquals(1, region.load64(0, ScbOffsets.YIELD_COUNT));
            assertFalse(worker.checkpoint());
            assertEquals(1, worker.yieldCount());
            assertEquals(seq, worker.cachedAck());
            assertEquals(RuntimeMode.DETERMINISTIC, worker.runtimeMode());
            assertTrue(Morpheus.checkpoint() == false);
            region.bump(0);
            assertTrue(Morpheus.checkpoint(), "the static checkpoint uses the thread's worker");
        }
    }

    @Test
    void anExplicitYieldAcknowledgesCountsAndSuspendsNothing() {
        try (Worker worker = register(0)) {
            worker.recordExplicitYield(); // nothing pending: counted, nothing acknowledged
            assertEquals(1, region.load64(0, ScbOffsets.YIELD_COUNT));
            assertEquals(YieldReason.EXPLICIT.value, region.load32(0, ScbOffsets.LAST_YIELD_REASON));
            assertEquals(0, region.load64(0, ScbOffsets.LAST_ACK_SEQ));
            long seq = region.bump(0);
            try (CriticalSection cs = worker.critical()) {
                worker.recordExplicitYield(); // allowed in a section: it causes no yield (spec/SCB.md §5.8)
            }
            assertEquals(seq, region.load64(0, ScbOffsets.LAST_ACK_SEQ));
            assertEquals(seq, worker.cachedAck(), "the fast path compares with the new acknowledgement");
            assertFalse(worker.checkpoint(), "the request was served by the thread's own yield");
            assertEquals(2, worker.yieldCount());
            region.setGeneration(9); // a scheduler restart: it writes nothing and throws nothing
            region.bump(0);
            byte[] before = region.snapshot();
            worker.recordExplicitYield();
            assertArrayEquals(before, region.snapshot(), "a lost worker writes nothing");
        }
        try (Worker detached = Morpheus.register(Options.defaults().detached())) {
            detached.recordExplicitYield();
            assertEquals(0, detached.yieldCount());
        }
    }

    @Test
    void anExplicitYieldFromAnotherThreadIsRefused() throws InterruptedException {
        try (Worker worker = register(0)) {
            region.bump(0);
            AtomicReference<Throwable> thrown = new AtomicReference<>();
            Thread other = new Thread(() -> thrown.set(assertThrows(MorpheusException.class, worker::recordExplicitYield)));
            other.start();
            other.join();
            assertInstanceOf(MorpheusException.class, thrown.get());
            assertEquals(ErrorCode.NOT_REGISTERED, ((MorpheusException) thrown.get()).code());
            assertEquals(0, region.load64(0, ScbOffsets.YIELD_COUNT));
        }
    }

    @Test
    void theModeClockTimesTheDefensiveYield() {
        long t0 = 1_000_000_000L;
        Morpheus.setModeClockForTesting(t0);
        try (Worker worker = register(0)) {
            long slice = region.sliceNs();
            // A dropped hint, then a request: the yield evaluates the mode, DEFENSIVE (spec/SCB.md §5.4); from
            // then on one yield per slice since the last yield, on the mode clock, which moves only when set.
            region.dropHint(0);
            region.bump(0);
            assertTrue(worker.checkpoint());
            assertEquals(RuntimeMode.DEFENSIVE, worker.runtimeMode());
            region.dropHint(0); // stays DEFENSIVE
            Morpheus.setModeClockForTesting(t0 + slice - 1);
            for (int i = 0; i < 100; i++) {
                assertFalse(worker.checkpoint(), "no slice since the last yield");
            }
            Morpheus.setModeClockForTesting(t0 + slice);
            assertTrue(worker.checkpoint());
            assertEquals(YieldReason.DEFENSIVE.value, region.load32(0, ScbOffsets.LAST_YIELD_REASON));
            Morpheus.setModeClockForTesting(t0 + 2 * slice - 1);
            worker.recordExplicitYield(); // restarts the clocks (§5.8)
            Morpheus.setModeClockForTesting(t0 + 2 * slice);
            assertFalse(worker.checkpoint(), "a slice since the DEFENSIVE yield, not since the explicit one");
        } finally {
            Morpheus.setModeClockForTesting(-1);
        }
    }

    @Test
    void criticalSectionsNestAndDeferTheRequest() {
        try (Worker worker = register(3)) {
            try (CriticalSection outer = worker.critical()) {
                assertEquals(1, region.load32(3, ScbOffsets.IN_CRITICAL));
                try (CriticalSection inner = worker.critical()) {
                    assertEquals(2, worker.criticalDepth());
                    region.bump(3);
                    assertFalse(worker.checkpoint(), "never yields inside a section");
                }
                assertEquals(1, region.load32(3, ScbOffsets.IN_CRITICAL), "only the outermost exit clears it");
                assertFalse(worker.checkpoint());
                outer.close();
                outer.close(); // a guard exits once
                assertEquals(0, worker.criticalDepth());
            }
            assertEquals(0, region.load32(3, ScbOffsets.IN_CRITICAL));
            assertEquals(0, region.load64(3, ScbOffsets.LAST_ACK_SEQ));
            assertTrue(worker.checkpoint(), "the deferred request is honoured after the outermost exit");
        }
    }

    @Test
    void theDepthBelongsToTheThreadAndIsPublishedAtTheNextRegistration() {
        Worker first = register(1);
        first.criticalEnter();
        first.close(); // closed inside the section: the thread keeps its depth (spec/SCB.md §5.3)
        assertEquals(0, region.load32(1, ScbOffsets.IN_CRITICAL), "the released slot is cleared");
        try (Worker second = register(2)) {
            assertEquals(1, second.criticalDepth());
            assertEquals(WorkerState.RUNNING.value, region.load32(2, ScbOffsets.WORKER_STATE));
            assertEquals(1, region.load32(2, ScbOffsets.IN_CRITICAL), "RUNNING is published inside the section");
            region.bump(2);
            assertFalse(second.checkpoint());
            second.criticalExit();
            assertEquals(0, region.load32(2, ScbOffsets.IN_CRITICAL));
            assertTrue(second.checkpoint());
        }
    }

    @Test
    void anUnbalancedExitIsNotInCriticalAndWritesNothing() {
        try (Worker worker = register(4)) {
            byte[] before = region.snapshot();
            MorpheusException e = expect(ErrorCode.NOT_IN_CRITICAL, worker::criticalExit);
            assertInstanceOf(MorpheusException.WorkerStateException.class, e);
            assertArrayEquals(before, region.snapshot());
            assertEquals(0, worker.criticalDepth());
            worker.criticalEnter();
            worker.criticalExit();
            expect(ErrorCode.NOT_IN_CRITICAL, worker::criticalExit);
            assertEquals(0, region.load32(4, ScbOffsets.IN_CRITICAL));
        }
    }

    @Test
    void aSecondRegistrationOnTheThreadIsRefused() {
        try (Worker worker = register(1)) {
            MorpheusException e = expect(ErrorCode.ALREADY_REGISTERED, () -> register(2));
            assertInstanceOf(MorpheusException.RegistrationException.class, e);
            assertEquals(WorkerState.INIT.value, region.load32(2, ScbOffsets.WORKER_STATE));
            region.bump(1);
            assertTrue(worker.checkpoint(), "the first worker still works");
        }
    }

    @Test
    void aBusySlotAndAnOutOfRangeSlotAreRefused() {
        try (Worker worker = register(1)) {
            AtomicReference<Throwable> other = new AtomicReference<>();
            Thread thread = new Thread(() -> other.set(assertThrows(MorpheusException.class, () -> register(1))));
            thread.start();
            join(thread);
            assertEquals(ErrorCode.SLOT_BUSY, ((MorpheusException) other.get()).code());
        }
        MorpheusException e = expect(ErrorCode.SLOT_OUT_OF_RANGE, () -> register(8));
        assertTrue(e.getMessage().contains("8"), e.getMessage());
    }

    @Test
    void aDirectSlotWithASocketIsRefusedNamingBothAndWritesNothing() {
        // Both backends take the binding kit's option rules (morpheus::kit::options): the JNI library and
        // libmorpheus, under the FFM backend.
        byte[] before = region.snapshot();
        MorpheusException e = expect(ErrorCode.INVALID_ARGUMENT, () -> Morpheus.register(Options.defaults()
                .regionPath(region.pathString()).directSlot(0).agentSocket(dir.resolve("agent.sock").toString())));
        assertTrue(e.getMessage().contains("slot or socket"), e.getMessage());
        assertArrayEquals(before, region.snapshot());
        assertFalse(Morpheus.current().isPresent());
    }

    @Test
    void garbageAndTruncatedRegionsAreRefusedByNameAndLeftUntouched() {
        byte[] garbage = new byte[4096];
        new java.util.Random(42).nextBytes(garbage);
        Path bad = dir.resolve("garbage");
        TestRegion.write(bad, garbage);
        MorpheusException e = expect(ErrorCode.BAD_MAGIC,
                () -> Morpheus.register(Options.defaults().regionPath(bad.toString()).directSlot(0)));
        assertInstanceOf(MorpheusException.RegionException.class, e);
        assertTrue(e.getMessage().contains("expected") && e.getMessage().contains("found"), e.getMessage());
        assertArrayEquals(garbage, readAll(bad));

        Path small = dir.resolve("small");
        TestRegion.write(small, Arrays.copyOf(garbage, 10));
        expect(ErrorCode.REGION_TRUNCATED,
                () -> Morpheus.register(Options.defaults().regionPath(small.toString()).directSlot(0)));
        expect(ErrorCode.IO, () -> Morpheus.register(
                Options.defaults().regionPath(dir.resolve("missing").toString()).directSlot(0)));
        assertFalse(Morpheus.current().isPresent());
        expect(ErrorCode.INVALID_ARGUMENT, () -> Options.defaults().regionPath(""));
    }

    @Test
    void checkRegionValidatesWithoutRegisteringOrWriting() {
        byte[] before = region.snapshot();
        assertTrue(Morpheus.checkRegion(region.pathString()));
        assertArrayEquals(before, region.snapshot());
        assertFalse(Morpheus.checkRegion(""), "\"\" is detached mode");
        Path bad = dir.resolve("zeros");
        TestRegion.write(bad, new byte[256]);
        MorpheusException e = expect(ErrorCode.BAD_MAGIC, () -> Morpheus.checkRegion(bad.toString()));
        assertTrue(e.getMessage().contains("found"), e.getMessage());
        assertArrayEquals(new byte[256], readAll(bad));
        assertFalse(Morpheus.current().isPresent());
    }

    @Test
    void detachedWorkersNeverYieldAndOnlyCount() {
        try (Worker worker = Morpheus.register(Options.defaults().detached().priority(3))) {
            assertFalse(worker.checkpoint());
            assertFalse(worker.isAttached());
            assertFalse(worker.slot().isPresent());
            try (CriticalSection cs = worker.critical()) {
                assertEquals(1, worker.criticalDepth());
            }
            expect(ErrorCode.NOT_IN_CRITICAL, worker::criticalExit);
            worker.setEscapable(true);
            assertTrue(worker.escapable());
            assertEquals(3, worker.priority());
            expect(ErrorCode.DETACHED, worker::checkStatus);
        }
    }

    @Test
    void aSchedulerRestartDetachesTheWorkerWhichThenWritesNothing() {
        try (Worker worker = register(5)) {
            region.setGeneration(8);
            region.bump(5);
            byte[] before = region.snapshot();
            assertFalse(worker.checkpoint());
            try (CriticalSection cs = worker.critical()) {
                assertEquals(1, worker.criticalDepth());
            }
            assertArrayEquals(before, region.snapshot(), "a lost worker writes nothing");
            expect(ErrorCode.GENERATION_CHANGED, worker::checkStatus);
            expect(ErrorCode.GENERATION_CHANGED, () -> worker.setEscapable(true));
            assertFalse(worker.isAttached());
            assertFalse(worker.checkpoint());
        }
        assertEquals(WorkerState.RUNNING.value, region.load32(5, ScbOffsets.WORKER_STATE),
                "shutdown of a lost worker writes nothing to the old region");
    }

    @Test
    void anotherThreadCannotUseTheWorker() {
        try (Worker worker = register(6)) {
            region.bump(6);
            AtomicReference<Boolean> checkpoint = new AtomicReference<>();
            AtomicReference<Throwable> critical = new AtomicReference<>();
            Thread thread = new Thread(() -> {
                checkpoint.set(worker.checkpoint());
                critical.set(assertThrows(MorpheusException.class, worker::criticalEnter));
            });
            thread.start();
            join(thread);
            assertEquals(Boolean.FALSE, checkpoint.get());
            assertEquals(ErrorCode.NOT_REGISTERED, ((MorpheusException) critical.get()).code());
            assertEquals(0, region.load64(6, ScbOffsets.LAST_ACK_SEQ), "nothing acknowledged by the other thread");
            assertEquals(0, region.load32(6, ScbOffsets.IN_CRITICAL));
            assertTrue(worker.checkpoint());
        }
    }

    @Test
    void aThreadThatDiesRegisteredReleasesItsSlot() throws InterruptedException {
        AtomicReference<Worker> leaked = new AtomicReference<>();
        Thread thread = new Thread(() -> leaked.set(register(7)));
        thread.start();
        join(thread);
        assertNotNull(leaked.get());
        // The core releases the slot from the thread's native exit, after Java saw the thread end.
        TestRegion.await("slot 7 back to INIT",
                () -> region.load32(7, ScbOffsets.WORKER_STATE) == WorkerState.INIT.value);
        assertFalse(leaked.get().checkpoint(), "the dead thread's worker is inert for everyone else");
        expect(ErrorCode.NOT_REGISTERED, () -> leaked.get().criticalEnter());
        try (Worker again = register(7)) {
            assertEquals(7, again.slot().getAsInt());
        }
    }

    static void join(Thread thread) {
        try {
            thread.join();
        } catch (InterruptedException e) {
            throw new AssertionError(e);
        }
    }

    static byte[] readAll(Path file) {
        try {
            return java.nio.file.Files.readAllBytes(file);
        } catch (java.io.IOException e) {
            throw new AssertionError(e);
        }
    }
}
