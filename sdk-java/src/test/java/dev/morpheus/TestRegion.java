// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import dev.morpheus.abi.Abi;
import dev.morpheus.abi.Backend;
import dev.morpheus.abi.EscalationPolicy;
import dev.morpheus.abi.RegionHeaderOffsets;
import dev.morpheus.abi.SchedulerMode;
import dev.morpheus.abi.ScbOffsets;
import dev.morpheus.abi.TestRegionWriter;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Map;

/**
 * A sim-backing region file the tests play the scheduler on (spec/SCB.md §1, §2), written with the
 * generated offsets. Mapped MAP_SHARED, so the SDK's own mapping sees the same bytes. The region and
 * every yield request are published by the generated {@link TestRegionWriter} (spec/abi.toml's
 * [[publication]] order), never in an order of this class's own.
 */
final class TestRegion implements AutoCloseable {
    static final VarHandle LONG = MethodHandles.byteBufferViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
    static final VarHandle INT = MethodHandles.byteBufferViewVarHandle(int[].class, ByteOrder.LITTLE_ENDIAN);
    static final int HEADER = Math.toIntExact(RegionHeaderOffsets.SIZE);
    static final int STRIDE = Math.toIntExact(ScbOffsets.SIZE);

    final Path path;
    final int slots;
    private final FileChannel channel;
    final MappedByteBuffer bytes;

    TestRegion(Path dir, int slots) {
        this.slots = slots;
        this.path = dir.resolve("region");
        try {
            channel = FileChannel.open(path, StandardOpenOption.CREATE_NEW, StandardOpenOption.READ,
                    StandardOpenOption.WRITE);
            bytes = channel.map(FileChannel.MapMode.READ_WRITE, 0, HEADER + (long) slots * STRIDE);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        bytes.order(ByteOrder.LITTLE_ENDIAN);
        TestRegionWriter.publishRegion(bytes, 0, Map.ofEntries(
                Map.entry("magic", Abi.REGION_MAGIC),
                Map.entry("abi_major", (long) Abi.ABI_MAJOR),
                Map.entry("abi_minor", (long) Abi.ABI_MINOR),
                Map.entry("header_size", (long) HEADER),
                Map.entry("scb_stride", (long) STRIDE),
                Map.entry("scb_count", (long) slots),
                Map.entry("scheduler_mode", (long) SchedulerMode.OBSERVER.value),
                Map.entry("escalation_policy", (long) EscalationPolicy.NONE.value),
                Map.entry("slice_ns", Abi.DEFAULT_SLICE_NS),
                Map.entry("grace_ns", Abi.DEFAULT_GRACE_NS),
                Map.entry("hint_min_interval_ns", Abi.DEFAULT_HINT_MIN_INTERVAL_NS),
                Map.entry("scheduler_pid", ProcessHandle.current().pid()),
                Map.entry("backend", (long) Backend.SIM.value)), 7L);
    }

    String pathString() {
        return path.toString();
    }

    static int scb(int slot, long field) {
        return HEADER + slot * STRIDE + Math.toIntExact(field);
    }

    long load64(int slot, long field) {
        return (long) LONG.getAcquire(bytes, scb(slot, field));
    }

    int load32(int slot, long field) {
        return (int) INT.getAcquire(bytes, scb(slot, field));
    }

    /** The scheduler's yield request, the generated publication; returns the new preempt_seq. */
    long bump(int slot) {
        return TestRegionWriter.publishRequest(bytes, scb(slot, 0), System.nanoTime());
    }

    /** A hint the scheduler could not deliver: {@code hints_dropped} grows (a relaxed add, as the scheduler's). */
    void dropHint(int slot) {
        INT.getAndAddRelease(bytes, scb(slot, ScbOffsets.HINTS_DROPPED), 1);
    }

    /** The header's {@code slice_ns}. */
    long sliceNs() {
        return (long) LONG.getAcquire(bytes, (int) RegionHeaderOffsets.SLICE_NS);
    }

    /** A scheduler restart as the old region sees it: generation changes (release). */
    void setGeneration(long generation) {
        LONG.setRelease(bytes, (int) RegionHeaderOffsets.GENERATION, generation);
    }

    /** A copy of every byte, for "nothing was written" checks. */
    byte[] snapshot() {
        byte[] copy = new byte[bytes.capacity()];
        bytes.duplicate().position(0).get(copy);
        return copy;
    }

    @Override
    public void close() {
        try {
            channel.close();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Wait for a condition another thread brings about (no sleep-and-hope: a bounded poll). */
    static void await(String what, java.util.function.BooleanSupplier condition) throws InterruptedException {
        long deadline = System.nanoTime() + 60_000_000_000L;
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("still waiting after 60 s for: " + what);
            }
            Thread.sleep(5);
        }
    }

    static void write(Path file, byte[] content) {
        try {
            Files.write(file, content);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
