// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import java.nio.ByteBuffer;

/**
 * The native methods of libmorpheus_jni (sdk-java/jni), acting on the calling thread's worker in the Rust
 * core. Only {@link JniWorker} calls them, from the worker's own platform thread. An {@code int} result is
 * 0 (or a documented non-negative value) or a negated {@code error_code}; {@link #lastError()} says why.
 */
final class JniNative {
    private JniNative() {}

    static {
        NativeLibrary.load("libmorpheus_jni.so", path -> {
            System.load(path.toString());
            return null;
        });
    }

    /** region: null discovers, empty is detached; socket: null for the default; directSlot &lt; 0: the agent. */
    static native int register(byte[] region, byte[] socket, int directSlot, int escapable, int priority);

    static native int unregister();

    /** 0: a region a worker can attach to; 1: none (detached); else a negated error. region null discovers. */
    static native int checkRegion(byte[] region);

    /** A direct buffer over the 8 bytes the thread's preempt_seq pointer names (the core's fast-path state). */
    static native ByteBuffer preemptSeq();

    static native long cachedAck();

    /** Bit 0: yield now (acknowledged); bit 1: the worker is detached; bit 2: preempt_seq moved (fetch it again). */
    static native int checkpointSlow();

    static native int criticalEnter();

    /** Thread-level critical section (no worker needed): new depth. */
    static native int threadCriticalEnter();

    /** Thread-level critical exit: new depth, or -NOT_IN_CRITICAL. */
    static native int threadCriticalExit();

    /** The calling thread's critical depth, worker or not. */
    static native int threadCriticalDepth();

    static native int criticalExit();

    static native int criticalDepth();

    static native int setEscapable(boolean escapable);

    static native int escapable();

    static native int setPriority(int priority);

    static native int priority();

    static native long slot();

    static native int status();

    static native long yieldCount();

    static native int runtimeMode();

    static native String lastError();

    /** Does nothing: the empty JNI call the benchmarks compare with. */
    static native void nop();

    /** Throw for a negative result, else return it. */
    static int check(int result) {
        if (result < 0) {
            throw MorpheusException.ofNative(result, lastError());
        }
        return result;
    }
}
