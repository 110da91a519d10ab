// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

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
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Warmup;

/**
 * The FFM baseline the checkpoint is judged against beside {@code AtomicLong.getAcquire()}: a
 * {@code VarHandle.getAcquire} on a mapped 4 KiB {@code MemorySegment} held in a static final field, at a
 * constant offset (the best case of sdk-java/BENCHMARKS.md, "Read baselines"), compared with a long held in a
 * field. JDK 22+ only, so apart from {@link CheckpointBench}, which also runs on JDK 17.
 */
@BenchmarkMode({Mode.AverageTime, Mode.SampleTime})
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 5, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 3, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED"})
@State(Scope.Thread)
public class SegmentBaselineBench {
    private static final MemorySegment PLAIN = mapScratch();
    private static final VarHandle PLAIN_LONG = ValueLayout.JAVA_LONG.varHandle();

    private long cachedAck;

    @Benchmark
    public boolean segmentGetAcquire() {
        return (long) PLAIN_LONG.getAcquire(PLAIN, 0L) == cachedAck;
    }

    private static MemorySegment mapScratch() {
        try {
            Path file = Files.createTempFile("morpheus-jmh-plain-", ".bin");
            file.toFile().deleteOnExit();
            try (FileChannel channel = FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
                return channel.map(FileChannel.MapMode.READ_WRITE, 0, 4096, Arena.global());
            }
        } catch (IOException e) {
            throw new ExceptionInInitializerError(e);
        }
    }
}
