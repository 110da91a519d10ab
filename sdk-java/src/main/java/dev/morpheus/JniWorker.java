// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import dev.morpheus.abi.RuntimeMode;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.OptionalInt;

/**
 * A worker of the JNI backend: the Rust core's binding kit holds it, named by {@link #token}. The
 * checkpoint's fast path stays inline in Java, one load as in every binding: an acquire load (a byte-buffer
 * view VarHandle, JDK 9+) through a direct ByteBuffer over the word the kit's fast path names (the slot's
 * {@code preempt_seq}, the wake sequence a lost worker waits on), or a zero word of Java's when it names none,
 * compared with the value the kit gives; a JNI call costs several times more (sdk-java/BENCHMARKS.md).
 * Everything else is a call into the core, so the core's rules for a stopped or restarted scheduler
 * (spec/SCB.md §6.1) apply as they are.
 */
final class JniWorker extends Worker {
    private static final VarHandle LONG = MethodHandles.byteBufferViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
    /** The kit's registration this worker stands for. */
    private final long token;
    /** The 8 bytes the fast path loads (the kit's word, or {@link ZeroHolder#ZERO}); read only. */
    private ByteBuffer word;
    /** What the fast path compares the word with (the kit's expected value). */
    private long expected;

    JniWorker(Thread owner, long token) {
        super(owner);
        this.token = token;
        word = fastPathWord();
        expected = JniNative.fastPathExpected();
    }

    /** The kit's word, or Java's zero when the kit names none (always slow: expected 2^64-1; detached: 0). */
    private static ByteBuffer fastPathWord() {
        ByteBuffer buffer = JniNative.fastPathWord();
        return buffer == null ? ZeroHolder.ZERO : buffer;
    }

    @Override
    public boolean checkpoint() {
        if (Thread.currentThread() != owner) {
            return false; // another thread's worker: the detached checkpoint, nothing read
        }
        long seq = (long) LONG.getAcquire(word, 0);
        if (seq == expected) {
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
            word = fastPathWord(); // the core pointed the worker elsewhere (detached, lost, back, mode)
        }
        expected = JniNative.fastPathExpected();
        return (result & 1) != 0;
    }

    @Override
    public void criticalEnter() {
        checkOwner("criticalEnter");
        JniNative.check(JniNative.criticalEnter(token));
    }

    @Override
    public void criticalExit() {
        checkOwner("criticalExit");
        JniNative.check(JniNative.criticalExit(token));
    }

    @Override
    public int criticalDepth() {
        checkOwner("criticalDepth");
        return JniNative.check(JniNative.criticalDepth(token));
    }

    @Override
    public void setEscapable(boolean escapable) {
        checkOwner("setEscapable");
        JniNative.check(keptWhenDetached(JniNative.setEscapable(token, escapable)));
    }

    @Override
    public boolean escapable() {
        checkOwner("escapable");
        return JniNative.check(JniNative.escapable(token)) != 0;
    }

    @Override
    void setPriority0(int priority) {
        JniNative.check(keptWhenDetached(JniNative.setPriority(token, priority)));
    }

    @Override
    public int priority() {
        checkOwner("priority");
        return JniNative.priority(token);
    }

    @Override
    public OptionalInt slot() {
        if (closed || Thread.currentThread() != owner) {
            return OptionalInt.empty();
        }
        long slot = JniNative.slot(token);
        return slot < 0 ? OptionalInt.empty() : OptionalInt.of(Math.toIntExact(slot));
    }

    @Override
    public boolean isAttached() {
        checkOwner("isAttached");
        return JniNative.status(token) == 0;
    }

    @Override
    public void checkStatus() {
        checkOwner("checkStatus");
        JniNative.check(JniNative.status(token));
    }

    @Override
    public long yieldCount() {
        checkOwner("yieldCount");
        return JniNative.yieldCount(token);
    }

    @Override
    public void recordExplicitYield() {
        checkOwner("recordExplicitYield");
        int result = JniNative.recordExplicitYield(token);
        word = fastPathWord(); // the core acknowledged (or detached the worker): take its fast path again
        expected = JniNative.fastPathExpected();
        JniNative.check(result);
    }

    @Override
    public RuntimeMode runtimeMode() {
        checkOwner("runtimeMode");
        return RuntimeMode.of(JniNative.runtimeMode(token));
    }

    @Override
    public long cachedAck() {
        checkOwner("cachedAck");
        return expected;
    }

    @Override
    public String backend() {
        return "jni";
    }

    @Override
    long handle() {
        return token;
    }

    @Override
    void unregister0() {
        word = ZeroHolder.ZERO;
        expected = 0;
        int result = JniNative.unregister(token);
        if (result < 0) {
            throw MorpheusException.ofNative(result, JniNative.lastError());
        }
    }

    /** The zero word of Java's: what the fast path loads when the kit names no word, and after close. */
    private static final class ZeroHolder {
        static final ByteBuffer ZERO = ByteBuffer.allocateDirect(2 * Long.BYTES).alignedSlice(Long.BYTES)
                .order(ByteOrder.LITTLE_ENDIAN);
    }

    /** For the benchmarks: an empty JNI call. */
    static void emptyNativeCall() {
        JniNative.nop();
    }

}
