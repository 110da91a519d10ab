// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import dev.morpheus.abi.Abi;
import dev.morpheus.abi.RegionHeaderOffsets;
import dev.morpheus.abi.ScbOffsets;
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

/**
 * A sim-backing region file the tests play the scheduler on (spec/SCB.md §1, §2), written with the
 * generated offsets. Mapped MAP_SHARED, so the SDK's own mapping sees the same bytes.
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
        bytes.putLong((int) RegionHeaderOffsets.MAGIC, Abi.REGION_MAGIC);
        bytes.putShort((int) RegionHeaderOffsets.ABI_MAJOR, (short) Abi.ABI_MAJOR);
        bytes.putShort((int) RegionHeaderOffsets.ABI_MINOR, (short) Abi.ABI_MINOR);
        bytes.putInt((int) RegionHeaderOffsets.HEADER_SIZE, HEADER);
        bytes.putInt((int) RegionHeaderOffsets.SCB_STRIDE, STRIDE);
        bytes.putInt((int) RegionHeaderOffsets.SCB_COUNT, slots);
        bytes.putLong((int) RegionHeaderOffsets.SLICE_NS, Abi.DEFAULT_SLICE_NS);
        bytes.putLong((int) RegionHeaderOffsets.GRACE_NS, Abi.DEFAULT_GRACE_NS);
        bytes.putLong((int) RegionHeaderOffsets.HINT_MIN_INTERVAL_NS, Abi.DEFAULT_HINT_MIN_INTERVAL_NS);
        LONG.setRelease(bytes, (int) RegionHeaderOffsets.GENERATION, 7L); // last: publishes the header
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

    /** The scheduler's yield request: preempt_seq += 1 (release); returns the new value. */
    long bump(int slot) {
        return (long) LONG.getAndAddRelease(bytes, scb(slot, ScbOffsets.PREEMPT_SEQ), 1L) + 1;
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
