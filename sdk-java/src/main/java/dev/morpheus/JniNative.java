// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import java.nio.ByteBuffer;

/**
 * The native methods of libmorpheus_jni (sdk-java/jni), a translation over the Rust core's binding kit. A
 * worker is the kit's, named by the token {@link #register} returned; only {@link JniWorker} calls them,
 * from the worker's own platform thread. An {@code int} result is 0 (or a documented non-negative value) or
 * a negated {@code error_code}; {@link #lastError()} says why.
 */
final class JniNative {
    private JniNative() {}

    static {
        NativeLibrary.load("libmorpheus_jni.so", path -> {
            System.load(path.toString());
            return null;
        });
    }

    /**
     * The registration's token (&gt; 0), or a negated error. region: null discovers, empty is detached;
     * socket: null for the default; directSlot &lt; 0: the agent; escapable -1: the ABI's default.
     */
    static native long register(byte[] region, byte[] socket, int directSlot, int escapable, int priority);

    static native int unregister(long token);

    /** The token of the calling thread's worker (the kit's, whoever registered it), or 0 when it holds none. */
    static native long currentToken();

    /** 0: a region a worker can attach to; 1: none (detached); else a negated error. region null discovers. */
    static native int checkRegion(byte[] region);

    /** A direct buffer over the 8 bytes the kit's fast path names for this thread, or null: load a zero of Java's. */
    static native ByteBuffer fastPathWord();

    /** What the fast path compares its load with (the kit's FastPath::expected). */
    static native long fastPathExpected();

    /** The kit's slow path: 1 = yield now (acknowledged), 2 = the fast path's word moved (fetch it again). */
    static native int checkpointSlow();

    /** Thread-level critical section (no worker needed): new depth. */
    static native int threadCriticalEnter();

    /** Thread-level critical exit: new depth, or -NOT_IN_CRITICAL. */
    static native int threadCriticalExit();

    /** The calling thread's critical depth, worker or not. */
    static native int threadCriticalDepth();

    static native int criticalEnter(long token);

    static native int criticalExit(long token);

    static native int criticalDepth(long token);

    static native int setEscapable(long token, boolean escapable);

    static native int escapable(long token);

    static native int setPriority(long token, int priority);

    static native int priority(long token);

    static native long slot(long token);

    static native int status(long token);

    static native long yieldCount(long token);

    static native int runtimeMode(long token);

    static native int recordExplicitYield(long token);

    static native void setModeClock(long nanos);

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

    /** Throw for a negative result, else return it. */
    static long check(long result) {
        if (result < 0) {
            throw MorpheusException.ofNative(Math.toIntExact(result), lastError());
        }
        return result;
    }
}
