// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

/** One way of reaching the Rust core: FFM downcalls into libmorpheus, or the JNI library. */
interface Backend {
    /** "ffm" or "jni". */
    String name();

    /** Register the calling platform thread (the caller has checked it holds no worker). */
    Worker register(Options options);

    /** See {@link Morpheus#checkRegion(String)}. */
    boolean checkRegion(String path);

    /** Critical enter on the calling thread, which holds no worker (SCB.md §5.3: the depth is the thread's). */
    void threadCriticalEnter();

    /** Critical exit on the calling thread, which holds no worker; NOT_IN_CRITICAL at depth 0. */
    void threadCriticalExit();

    /** The calling thread's critical depth. */
    int threadCriticalDepth();
}
