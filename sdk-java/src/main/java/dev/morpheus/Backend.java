// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

/** One way of reaching the Rust core: FFM downcalls into libmorpheus, or the JNI library. */
interface Backend {
    /** "ffm" or "jni". */
    String name();

    /**
     * Register the calling platform thread in the core, which keeps its worker (the binding kit's thread
     * slot) and refuses in the order of spec/SCB.md §4; returns the core's name of the registration
     * (nonzero), for {@link #worker(long)}.
     */
    long registerThread(Options options);

    /** The core's name of the calling thread's registration, or 0 when the core holds no worker for it. */
    long currentHandle();

    /** A handle object for the calling thread's registration {@code handle} (from the two above). */
    Worker worker(long handle);

    /** See {@link Morpheus#checkRegion(String)}. */
    boolean checkRegion(String path);

    /** Critical enter on the calling thread, which holds no worker (SCB.md §5.3: the depth is the thread's). */
    void threadCriticalEnter();

    /** Critical exit on the calling thread, which holds no worker; NOT_IN_CRITICAL at depth 0. */
    void threadCriticalExit();

    /** The calling thread's critical depth. */
    int threadCriticalDepth();

    /** See {@link Morpheus#setModeClockForTesting(long)}. */
    void setModeClock(long nanos);
}
