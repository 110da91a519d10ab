// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import dev.morpheus.abi.RuntimeMode;
import dev.morpheus.abi.ScbOffsets;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.OptionalInt;

/**
 * A worker of the JNI backend. The checkpoint's fast path is pure Java: an acquire load of
 * {@code preempt_seq} through a direct ByteBuffer over the SCB (a byte-buffer view VarHandle, JDK 9+),
 * compared with the cached acknowledgement; a JNI call costs several times more (sdk-java/BENCHMARKS.md).
 * Everything else is a call into the Rust core.
 */
final class JniWorker extends Worker {
    private static final VarHandle LONG = MethodHandles.byteBufferViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
    private static final int PREEMPT_SEQ = Math.toIntExact(ScbOffsets.PREEMPT_SEQ);

    /** The SCB (or the static zeroed one when detached); read only. */
    private ByteBuffer scb;
    /** What the fast path compares preempt_seq with (the core's cached_ack). */
    private long cachedAck;

    JniWorker(Thread owner) {
        super(owner);
        scb = JniNative.scb();
        cachedAck = JniNative.cachedAck();
    }

    @Override
    public boolean checkpoint() {
        if (Thread.currentThread() != owner) {
            return false; // another thread's worker: the detached checkpoint, nothing read
        }
        long seq = (long) LONG.getAcquire(scb, PREEMPT_SEQ);
        if (seq == cachedAck) {
            return false;
        }
        return slowPath();
    }

    private boolean slowPath() {
        if (closed) {
            return false;
        }
        int result = JniNative.checkpointSlow();
        if ((result & 2) != 0) {
            scb = JniNative.scb(); // detached (a scheduler restart): read the zeroed SCB from now on
        }
        cachedAck = JniNative.cachedAck();
        return (result & 1) != 0;
    }

    @Override
    public void criticalEnter() {
        checkOwner("criticalEnter");
        JniNative.check(JniNative.criticalEnter());
    }

    @Override
    public void criticalExit() {
        checkOwner("criticalExit");
        JniNative.check(JniNative.criticalExit());
    }

    @Override
    public int criticalDepth() {
        checkOwner("criticalDepth");
        return JniNative.check(JniNative.criticalDepth());
    }

    @Override
    public void setEscapable(boolean escapable) {
        checkOwner("setEscapable");
        JniNative.check(keptWhenDetached(JniNative.setEscapable(escapable)));
    }

    @Override
    public boolean escapable() {
        checkOwner("escapable");
        return JniNative.check(JniNative.escapable()) != 0;
    }

    @Override
    void setPriority0(int priority) {
        JniNative.check(keptWhenDetached(JniNative.setPriority(priority)));
    }

    @Override
    public int priority() {
        checkOwner("priority");
        return JniNative.priority();
    }

    @Override
    public OptionalInt slot() {
        if (closed || Thread.currentThread() != owner) {
            return OptionalInt.empty();
        }
        long slot = JniNative.slot();
        return slot < 0 ? OptionalInt.empty() : OptionalInt.of(Math.toIntExact(slot));
    }

    @Override
    public boolean isAttached() {
        checkOwner("isAttached");
        return JniNative.status() == 0;
    }

    @Override
    public void checkStatus() {
        checkOwner("checkStatus");
        JniNative.check(JniNative.status());
    }

    @Override
    public long yieldCount() {
        checkOwner("yieldCount");
        return JniNative.yieldCount();
    }

    @Override
    public RuntimeMode runtimeMode() {
        checkOwner("runtimeMode");
        return RuntimeMode.of(JniNative.runtimeMode());
    }

    @Override
    public long cachedAck() {
        checkOwner("cachedAck");
        return cachedAck;
    }

    @Override
    public String backend() {
        return "jni";
    }

    @Override
    void unregister0() {
        scb = DetachedHolder.ZERO;
        cachedAck = 0;
        int result = JniNative.unregister();
        if (result < 0) {
            throw MorpheusException.ofNative(result, JniNative.lastError());
        }
    }

    /** A closed worker reads Java memory, never the region again. */
    private static final class DetachedHolder {
        static final ByteBuffer ZERO = ByteBuffer.allocateDirect(Math.toIntExact(ScbOffsets.SIZE) + 64)
                .alignedSlice(64).order(ByteOrder.LITTLE_ENDIAN);
    }

    /** For the benchmarks: an empty JNI call. */
    static void emptyNativeCall() {
        JniNative.nop();
    }

}
