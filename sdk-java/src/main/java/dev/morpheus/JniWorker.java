// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import dev.morpheus.abi.RuntimeMode;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.OptionalInt;

/**
 * A worker of the JNI backend. The checkpoint's fast path is pure Java: an acquire load (a byte-buffer
 * view VarHandle, JDK 9+) through a direct ByteBuffer over the u64 the core's per-thread fast-path state
 * names as {@code preempt_seq} (the slot's field, a static zero when detached, the wake sequence a lost
 * worker waits on), compared with the core's cached acknowledgement; a JNI call costs several times more
 * (sdk-java/BENCHMARKS.md). Everything else is a call into the Rust core, so the core's rules for a
 * stopped or restarted scheduler (spec/SCB.md §6.1) apply as they are.
 */
final class JniWorker extends Worker {
    private static final VarHandle LONG = MethodHandles.byteBufferViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
    /** The 8 bytes the core's preempt_seq pointer names; read only. */
    private ByteBuffer preemptSeq;
    /** What the fast path compares preempt_seq with (the core's cached_ack). */
    private long cachedAck;

    JniWorker(Thread owner) {
        super(owner);
        preemptSeq = JniNative.preemptSeq();
        cachedAck = JniNative.cachedAck();
    }

    @Override
    public boolean checkpoint() {
        if (Thread.currentThread() != owner) {
            return false; // another thread's worker: the detached checkpoint, nothing read
        }
        long seq = (long) LONG.getAcquire(preemptSeq, 0);
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
        if ((result & 4) != 0) {
            preemptSeq = JniNative.preemptSeq(); // the core pointed the worker elsewhere (detached, lost, back)
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
        preemptSeq = DetachedHolder.ZERO;
        cachedAck = 0;
        int result = JniNative.unregister();
        if (result < 0) {
            throw MorpheusException.ofNative(result, JniNative.lastError());
        }
    }

    /** A closed worker reads Java memory, never the region again. */
    private static final class DetachedHolder {
        static final ByteBuffer ZERO = ByteBuffer.allocateDirect(2 * Long.BYTES).alignedSlice(Long.BYTES)
                .order(ByteOrder.LITTLE_ENDIAN);
    }

    /** For the benchmarks: an empty JNI call. */
    static void emptyNativeCall() {
        JniNative.nop();
    }

}
