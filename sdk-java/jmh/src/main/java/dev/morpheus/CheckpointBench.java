// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import dev.morpheus.abi.Abi;
import dev.morpheus.abi.RegionHeaderOffsets;
import dev.morpheus.abi.ScbOffsets;
import java.io.IOException;
import java.nio.ByteOrder;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;
import org.openjdk.jmh.infra.BenchmarkParams;

/**
 * The checkpoint's fast path (nothing pending) and a critical enter+exit, per backend, beside the reads
 * they are judged against: {@code AtomicLong.getAcquire()} and an empty JNI call (the FFM baseline, a
 * {@code VarHandle.getAcquire} on a static final mapped segment, is {@link SegmentBaselineBench}, which
 * needs JDK 22; this class builds for JDK 17 as well). Each read is compared with a long held in a field,
 * as the checkpoint compares preempt_seq with its cached ack. The backend is the {@code backend}
 * parameter, passed to each fork as -Dmorpheus.backend. The region file is written with plain Java 17
 * (a MappedByteBuffer) so that the class runs on JDK 17.
 */
@BenchmarkMode({Mode.AverageTime, Mode.SampleTime})
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 5, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 3, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED"})
@State(Scope.Thread)
public class CheckpointBench {
    @Param({"ffm", "jni"})
    public String backend;

    private final AtomicLong atomic = new AtomicLong();
    private long cachedAck;
    private Path dir;
    private Worker worker;

    @Setup(Level.Trial)
    public void register(BenchmarkParams params) throws IOException {
        if (!backend.equals(System.getProperty("morpheus.backend"))) {
            throw new IllegalStateException("run through run.sh: each fork gets -Dmorpheus.backend=" + backend);
        }
        dir = Files.createTempDirectory("morpheus-jmh-");
        Path region = dir.resolve("region");
        writeRegion(region);
        worker = Morpheus.register(Options.defaults().regionPath(region.toString()).directSlot(0));
    }

    @TearDown(Level.Trial)
    public void unregister() throws IOException {
        worker.close();
        Files.deleteIfExists(dir.resolve("region"));
        Files.deleteIfExists(dir);
    }

    @Benchmark
    public boolean atomicLongGetAcquire() {
        return atomic.getAcquire() == cachedAck;
    }

    @Benchmark
    public void emptyJniCall() {
        JniNative.nop();
    }

    @Benchmark
    public boolean checkpoint() {
        return worker.checkpoint();
    }

    @Benchmark
    public void criticalEnterExit() {
        try (CriticalSection section = worker.critical()) {
            // nothing: the cost of entering and leaving
        }
    }

    /** A one-slot sim region the benchmark thread registers in directly (nobody bumps it). */
    private static void writeRegion(Path path) throws IOException {
        int size = Math.toIntExact(RegionHeaderOffsets.SIZE + ScbOffsets.SIZE);
        try (FileChannel channel = FileChannel.open(path, StandardOpenOption.CREATE_NEW, StandardOpenOption.READ,
                StandardOpenOption.WRITE)) {
            MappedByteBuffer b = channel.map(FileChannel.MapMode.READ_WRITE, 0, size);
            b.order(ByteOrder.LITTLE_ENDIAN);
            b.putLong(at(RegionHeaderOffsets.MAGIC), Abi.REGION_MAGIC);
            b.putShort(at(RegionHeaderOffsets.ABI_MAJOR), (short) Abi.ABI_MAJOR);
            b.putShort(at(RegionHeaderOffsets.ABI_MINOR), (short) Abi.ABI_MINOR);
            b.putInt(at(RegionHeaderOffsets.HEADER_SIZE), (int) RegionHeaderOffsets.SIZE);
            b.putInt(at(RegionHeaderOffsets.SCB_STRIDE), (int) ScbOffsets.SIZE);
            b.putInt(at(RegionHeaderOffsets.SCB_COUNT), 1);
            b.putLong(at(RegionHeaderOffsets.SLICE_NS), Abi.DEFAULT_SLICE_NS);
            b.putLong(at(RegionHeaderOffsets.GENERATION), 1L); // last: a reader seeing it sees the rest
            b.force();
        }
    }

    private static int at(long offset) {
        return Math.toIntExact(offset);
    }
}
