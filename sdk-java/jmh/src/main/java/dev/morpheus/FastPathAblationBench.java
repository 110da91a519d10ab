// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import dev.morpheus.abi.ScbLayout;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Warmup;

/**
 * Where the FFM checkpoint's time goes: the same read of a mapped u64 through the address-space segment,
 * with the generated layout VarHandle (root alignment 64 checked) or a plain JAVA_LONG one, with and
 * without the owner-thread check the SDK makes, with the address masked as FfmWorker masks it (so the
 * JIT drops the bounds and alignment checks: the SDK's shape) or not, and a byte-buffer view over a segment of the same memory,
 * beside AtomicLong.getAcquire. Not the SDK's code: its shape, for BENCHMARKS.md.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 5, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 2, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED"})
@State(Scope.Thread)
public class FastPathAblationBench {
    private static final MemorySegment ALL = MemorySegment.NULL.reinterpret(Long.MAX_VALUE);
    private static final VarHandle PLAIN = ValueLayout.JAVA_LONG.varHandle();
    /** FfmWorker's mask: tells the JIT the offset is below 2^56 and 64-byte aligned. */
    private static final long MASK = (1L << 56) - 64;

    private static final VarHandle BUFFER_LONG =
            java.lang.invoke.MethodHandles.byteBufferViewVarHandle(long[].class, java.nio.ByteOrder.LITTLE_ENDIAN);

    private final java.util.concurrent.atomic.AtomicLong atomic = new java.util.concurrent.atomic.AtomicLong();
    private java.nio.ByteBuffer buffer;
    private Thread owner;
    private long ownerId;
    private long scb;
    private long cachedAck;

    @Setup
    public void map() throws IOException {
        Path file = Files.createTempFile("morpheus-ablation-", ".bin");
        file.toFile().deleteOnExit();
        try (FileChannel channel = FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
            scb = channel.map(FileChannel.MapMode.READ_WRITE, 0, 4096, Arena.global()).address();
        }
        owner = Thread.currentThread();
        ownerId = owner.threadId();
        buffer = MemorySegment.ofAddress(scb).reinterpret(128).asByteBuffer();
    }

    @Benchmark
    public boolean atomicLongGetAcquire() {
        return atomic.getAcquire() != cachedAck;
    }

    @Benchmark
    public boolean byteBufferViewOwnerChecked() {
        if (Thread.currentThread() != owner) {
            return false;
        }
        return (long) BUFFER_LONG.getAcquire(buffer, 0) != cachedAck;
    }

    @Benchmark
    public boolean layoutHandleOwnerChecked() {
        if (Thread.currentThread() != owner) {
            return false;
        }
        return (long) ScbLayout.PREEMPT_SEQ.getAcquire(ALL, scb) != cachedAck;
    }

    @Benchmark
    public boolean layoutHandleMaskedOwnerChecked() {
        if (Thread.currentThread() != owner) {
            return false;
        }
        return (long) ScbLayout.PREEMPT_SEQ.getAcquire(ALL, scb & MASK) != cachedAck;
    }

    @Benchmark
    public boolean layoutHandleMasked() {
        return (long) ScbLayout.PREEMPT_SEQ.getAcquire(ALL, scb & MASK) != cachedAck;
    }

    @Benchmark
    public boolean layoutHandleMaskedIdChecked() {
        if (Thread.currentThread().threadId() != ownerId) {
            return false;
        }
        return (long) ScbLayout.PREEMPT_SEQ.getAcquire(ALL, scb & MASK) != cachedAck;
    }

    @Benchmark
    public boolean layoutHandle() {
        return (long) ScbLayout.PREEMPT_SEQ.getAcquire(ALL, scb) != cachedAck;
    }

    @Benchmark
    public boolean plainHandleOwnerChecked() {
        if (Thread.currentThread() != owner) {
            return false;
        }
        return (long) PLAIN.getAcquire(ALL, scb) != cachedAck;
    }

    @Benchmark
    public boolean plainHandle() {
        return (long) PLAIN.getAcquire(ALL, scb) != cachedAck;
    }
}
