// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import dev.morpheus.abi.ErrorCode;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.util.Optional;

/**
 * Entry point of the Morpheus Java SDK: register the calling platform thread as a worker.
 *
 * <p>Two backends implement the one API, chosen once per JVM: {@code ffm} (JDK 22+: the checkpoint reads
 * the SCB through a {@code MemorySegment}, slow paths are downcalls into libmorpheus) and {@code jni}
 * (JDK 17+: a JNI library over the Rust core, the checkpoint reads the SCB through a direct
 * {@code ByteBuffer}). The default is ffm where the JDK has it, else jni; {@code -Dmorpheus.backend=ffm|jni}
 * overrides it. The choice is logged once (System.Logger "dev.morpheus", INFO).
 *
 * <p>Virtual threads: a worker is an OS thread's (spec/SCB.md §4), and a virtual thread moves between
 * carrier threads, so registering a virtual thread is refused ({@code INVALID_ARGUMENT}); register the
 * platform threads that run the work (see {@link MorpheusExecutors}). {@link #checkpoint()} on a virtual
 * thread, or on any thread without a worker, is the detached checkpoint: false, nothing read or written.
 */
public final class Morpheus {
    private Morpheus() {}

    private static final System.Logger LOG = System.getLogger("dev.morpheus");
    /**
     * The handle object of the calling thread's worker, as {@link #register} or {@link #current()} last gave
     * it: what the static {@link #checkpoint()} and critical sections use, so that they cost one thread-local
     * lookup. It is never the registry: whether the thread holds a worker is the core's answer (the binding
     * kit's thread slot, through JNI or libmorpheus alike), which {@link #register} and {@link #current()} ask.
     */
    private static final ThreadLocal<Worker> HANDLE = new ThreadLocal<>();
    private static final MethodHandle IS_VIRTUAL = isVirtualHandle();

    private static Backend backend;
    private static MorpheusException backendFailure;

    /** Register the calling thread with the default {@link Options}. */
    public static Worker register() {
        return register(Options.defaults());
    }

    /**
     * Register the calling platform thread. {@code INVALID_ARGUMENT} on a virtual thread; otherwise the core
     * decides, in the order of spec/SCB.md §4: options it refuses ({@code INVALID_ARGUMENT}, e.g. a priority
     * outside -20..19) before a thread that already holds a worker ({@code ALREADY_REGISTERED}, whichever way
     * it registered) before the slot's and the region's errors. Nothing is written on a refusal.
     */
    public static Worker register(Options options) {
        Thread thread = Thread.currentThread();
        if (isVirtual(thread)) {
            throw MorpheusException.of(ErrorCode.INVALID_ARGUMENT, "register: expected a platform thread, found the "
                    + "virtual thread " + thread + "; a worker is an OS thread, register the carrier's executor "
                    + "threads instead (MorpheusExecutors)");
        }
        Backend backend = backend();
        Worker worker = backend.worker(backend.registerThread(options));
        HANDLE.set(worker);
        return worker;
    }

    /**
     * Validate a region without registering: the header checks of spec/SCB.md §1.3 in their order, writing
     * nothing. {@code path} null discovers the region as registration does; "" is detached mode. Returns
     * true for a region a worker can attach to, false when there is none (a worker would run detached);
     * throws the first failed check as a {@link MorpheusException.RegionException}.
     */
    public static boolean checkRegion(String path) {
        return backend().checkRegion(path);
    }

    /**
     * The calling thread's worker: the one the core holds for this OS thread, whichever way it registered.
     * Empty on virtual threads, and before any backend was chosen (nothing can have registered then).
     */
    public static Optional<Worker> current() {
        Backend backend = chosenBackend();
        if (backend == null || isVirtual(Thread.currentThread())) {
            return Optional.empty();
        }
        long handle = backend.currentHandle();
        Worker held = HANDLE.get();
        if (handle == 0) {
            HANDLE.remove();
            return Optional.empty();
        }
        if (held == null || held.closed || held.handle() != handle) {
            held = backend.worker(handle);
            HANDLE.set(held);
        }
        return Optional.of(held);
    }

    /**
     * The calling thread's checkpoint: its worker's {@link Worker#checkpoint()}, or false (the detached
     * checkpoint, nothing read or written) on a thread without one, virtual threads included. For code that
     * does not hold its worker; {@link Worker#checkpoint()} is cheaper (no thread-local lookup). It uses the
     * worker {@link #register} or {@link #current()} gave this thread.
     */
    public static boolean checkpoint() {
        Worker worker = HANDLE.get();
        return worker != null && worker.checkpoint();
    }

    /**
     * Enter a critical section on the calling thread, with or without a worker: the nesting depth belongs
     * to the thread (spec/SCB.md §5.3), so a section opened before {@link #register()} carries into the
     * worker, which starts with {@code in_critical = 1}. With a worker this is {@link Worker#criticalEnter()}.
     * {@code INVALID_ARGUMENT} on a virtual thread (it would count on whichever carrier it runs on).
     */
    public static void criticalEnter() {
        Worker worker = HANDLE.get();
        if (worker != null) {
            worker.criticalEnter();
        } else {
            platformThreadBackend("criticalEnter").threadCriticalEnter();
        }
    }

    /** Exit a section opened by {@link #criticalEnter()}; {@code NOT_IN_CRITICAL} at depth 0. */
    public static void criticalExit() {
        Worker worker = HANDLE.get();
        if (worker != null) {
            worker.criticalExit();
        } else {
            platformThreadBackend("criticalExit").threadCriticalExit();
        }
    }

    /** The calling thread's critical nesting depth, worker or not. */
    public static int criticalDepth() {
        Worker worker = HANDLE.get();
        return worker != null ? worker.criticalDepth() : platformThreadBackend("criticalDepth").threadCriticalDepth();
    }

    /**
     * For tests and conformance agents only (spec/CONFORMANCE.md §2.3, {@code mode_clock}): from now on the
     * calling thread's runtime-mode rules (spec/SCB.md §5.4: a slice since the worker's last yield, a slice
     * since its last mode evaluation) read {@code nanos} where they read {@code CLOCK_MONOTONIC}, until the
     * next call; a negative value gives them {@code CLOCK_MONOTONIC} back. The clock never moves on its own.
     */
    public static void setModeClockForTesting(long nanos) {
        platformThreadBackend("setModeClockForTesting").setModeClock(nanos);
    }

    private static Backend platformThreadBackend(String operation) {
        Thread thread = Thread.currentThread();
        if (isVirtual(thread)) {
            throw MorpheusException.of(ErrorCode.INVALID_ARGUMENT, operation + ": expected a platform thread, found the "
                    + "virtual thread " + thread + " (critical depth is an OS thread's)");
        }
        return backend();
    }

    /** The backend this JVM uses ("ffm" or "jni"), choosing it on first use. */
    public static String backendName() {
        return backend().name();
    }

    static void forget(Worker worker) {
        if (HANDLE.get() == worker) {
            HANDLE.remove();
        }
    }

    /** The backend chosen so far, or null: none yet, or it failed to load. */
    private static synchronized Backend chosenBackend() {
        return backend;
    }

    static synchronized Backend backend() {
        if (backend == null && backendFailure == null) {
            try {
                backend = choose();
            } catch (MorpheusException e) {
                backendFailure = e;
            }
        }
        if (backendFailure != null) {
            throw backendFailure;
        }
        return backend;
    }

    private static Backend choose() {
        String asked = System.getProperty("morpheus.backend", "").trim();
        int jdk = Runtime.version().feature();
        String name = asked.isEmpty() ? (jdk >= 22 ? "ffm" : "jni") : asked;
        Backend chosen;
        switch (name) {
            case "jni":
                chosen = new JniBackend();
                break;
            case "ffm":
                if (jdk < 22) {
                    throw MorpheusException.of(ErrorCode.UNSUPPORTED_PLATFORM, "-Dmorpheus.backend=ffm: expected JDK 22 "
                            + "or later (java.lang.foreign), found JDK " + jdk + "; use -Dmorpheus.backend=jni");
                }
                chosen = loadFfm();
                break;
            default:
                throw MorpheusException.of(ErrorCode.INVALID_ARGUMENT,
                        "-Dmorpheus.backend: expected ffm or jni, found \"" + asked + "\"");
        }
        LOG.log(System.Logger.Level.INFO, "morpheus: {0} backend on JDK {1} ({2}; -Dmorpheus.backend=ffm|jni overrides)",
                chosen.name(), jdk, asked.isEmpty() ? "default" : "-Dmorpheus.backend");
        return chosen;
    }

    /** The FFM classes are compiled for JDK 22; they are loaded only here, by name. */
    private static Backend loadFfm() {
        try {
            return (Backend) Class.forName("dev.morpheus.FfmBackend").getDeclaredConstructor().newInstance();
        } catch (ReflectiveOperationException e) {
            Throwable cause = e.getCause() != null ? e.getCause() : e;
            if (cause instanceof MorpheusException) {
                throw (MorpheusException) cause;
            }
            throw MorpheusException.of(ErrorCode.IO, "loading the FFM backend: " + cause);
        }
    }

    private static MethodHandle isVirtualHandle() {
        try {
            return MethodHandles.publicLookup().findVirtual(Thread.class, "isVirtual", MethodType.methodType(boolean.class));
        } catch (NoSuchMethodException | IllegalAccessException noVirtualThreads) {
            return null; // JDK 17-20: every thread is a platform thread
        }
    }

    static boolean isVirtual(Thread thread) {
        if (IS_VIRTUAL == null) {
            return false;
        }
        try {
            return (boolean) IS_VIRTUAL.invokeExact(thread);
        } catch (Throwable impossible) {
            throw new AssertionError(impossible);
        }
    }
}
