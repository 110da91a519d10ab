// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;

import dev.morpheus.abi.RuntimeKind;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/** The FFM backend (JDK 22+): registration and slow paths are downcalls into libmorpheus. */
final class FfmBackend implements Backend {
    private static final long OPTIONS_SIZE = FfmLibmorpheus.offset("morpheus_options");
    private static final long DIRECT_SLOT = FfmLibmorpheus.offset("morpheus_options.direct_slot");
    private static final long REGION_PATH = FfmLibmorpheus.offset("morpheus_options.region_path");
    private static final long SOCKET_PATH = FfmLibmorpheus.offset("morpheus_options.socket_path");
    private static final long ESCAPABLE = FfmLibmorpheus.offset("morpheus_options.escapable");
    private static final long PRIORITY = FfmLibmorpheus.offset("morpheus_options.priority");
    private static final long RUNTIME_KIND = FfmLibmorpheus.offset("morpheus_options.runtime_kind");

    FfmBackend() {
        FfmWorker.class.getName(); // resolve the worker class (and its layout offsets) at the choice
    }

    @Override
    public String name() {
        return "ffm";
    }

    @Override
    public boolean checkRegion(String path) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment cPath = path == null ? MemorySegment.NULL : arena.allocateFrom(path);
            return FfmLibmorpheus.check((int) FfmLibmorpheus.REGION_CHECK.invokeExact(cPath)) == 0;
        } catch (MorpheusException e) {
            throw e;
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    private static final long THREAD_DEPTH = FfmLibmorpheus.offset("morpheus_worker.critical_depth");

    /** libmorpheus's state of the calling thread (never NULL): downcalls, since this is not a fast path. */
    private static MemorySegment thread() throws Throwable {
        return (MemorySegment) FfmLibmorpheus.THREAD.invokeExact();
    }

    @Override
    public void threadCriticalEnter() {
        try {
            FfmLibmorpheus.check((int) FfmLibmorpheus.CRITICAL_ENTER_CALL.invokeExact(thread()));
        } catch (MorpheusException e) {
            throw e;
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    @Override
    public void threadCriticalExit() {
        try {
            FfmLibmorpheus.check((int) FfmLibmorpheus.CRITICAL_EXIT_CALL.invokeExact(thread()));
        } catch (MorpheusException e) {
            throw e;
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    @Override
    public int threadCriticalDepth() {
        try {
            return thread().reinterpret(THREAD_DEPTH + 4).get(JAVA_INT, THREAD_DEPTH);
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    @Override
    public void setModeClock(long nanos) {
        try {
            FfmLibmorpheus.TESTING_SET_MODE_CLOCK.invokeExact(nanos);
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    @Override
    public long currentHandle() {
        try {
            return ((MemorySegment) FfmLibmorpheus.WORKER_CURRENT.invokeExact()).address();
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    @Override
    public Worker worker(long raw) {
        return new FfmWorker(Thread.currentThread(), raw);
    }

    /** Returns the address of the thread's {@code struct morpheus_worker}, libmorpheus's name of the worker. */
    @Override
    public long registerThread(Options options) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment opts = arena.allocate(OPTIONS_SIZE, 8);
            FfmLibmorpheus.OPTIONS_INIT.invokeExact(opts);
            opts.set(JAVA_INT, DIRECT_SLOT, options.directSlot);
            opts.set(ADDRESS, REGION_PATH,
                    options.regionPath == null ? MemorySegment.NULL : arena.allocateFrom(options.regionPath));
            opts.set(ADDRESS, SOCKET_PATH,
                    options.agentSocket == null ? MemorySegment.NULL : arena.allocateFrom(options.agentSocket));
            opts.set(JAVA_INT, ESCAPABLE, options.escapableArgument());
            opts.set(JAVA_INT, PRIORITY, options.priority);
            opts.set(JAVA_INT, RUNTIME_KIND, RuntimeKind.JAVA.value);
            MemorySegment out = arena.allocate(ADDRESS);
            FfmLibmorpheus.check((int) FfmLibmorpheus.REGISTER.invokeExact(opts, out));
            return out.get(ADDRESS, 0).address();
        } catch (MorpheusException e) {
            throw e;
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }
}
