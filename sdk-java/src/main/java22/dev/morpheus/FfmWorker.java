// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import dev.morpheus.abi.RuntimeMode;
import dev.morpheus.abi.ScbLayout;
import dev.morpheus.abi.ScbOffsets;
import dev.morpheus.abi.YieldReason;
import java.lang.foreign.Arena;
import java.lang.foreign.MemoryLayout.PathElement;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.util.OptionalInt;

/**
 * A worker of the FFM backend. The checkpoint's fast path and the critical flag are pure Java on the
 * calling thread's {@code struct morpheus_worker} (libmorpheus's per-thread fast-path state, which its
 * inline C functions use the same way) and on the SCB:
 *
 * <ul>
 *   <li>checkpoint: an acquire load, with the generated layout's {@code preempt_seq} handle, of the u64
 *       the struct's {@code preempt_seq} pointer names, compared with the cached acknowledgement
 *       (spec/SCB.md §5.1); the slow path is {@code morpheus_checkpoint_slow};
 *   <li>critical enter: the depth in the shared struct; on 0 → 1, after the generation check (§6),
 *       {@code IN_CRITICAL.setOpaque(1)} then {@code VarHandle.fullFence()} (§5.3, §3.1);
 *       exit: on 1 → 0 {@code IN_CRITICAL.setRelease(0)}.
 * </ul>
 *
 * <p>All accesses go through one {@code static final} segment spanning the address space, with the
 * address as the offset: a constant segment is what lets the JIT drop the bounds and liveness checks
 * (sdk-java/BENCHMARKS.md, "Read baselines": 1.26x a plain getAcquire, against 2.54x for a segment held in
 * a field); the addresses are masked so that its bounds and alignment checks fold away as well. What
 * makes that safe is the owner check: only the registering thread reads through these addresses, and for
 * that thread the core keeps the SCB mapped, or points {@code preempt_seq} at memory of its own (a static
 * zero, a wake sequence) once the worker is detached, lost or closed; the thread's struct lives as long
 * as the thread.
 */
final class FfmWorker extends Worker {
    private static final MemorySegment ALL = MemorySegment.NULL.reinterpret(Long.MAX_VALUE);
    private static final VarHandle LONG = JAVA_LONG.varHandle();
    private static final VarHandle INT = JAVA_INT.varHandle();
    /**
     * The checkpoint reads the u64 libmorpheus's {@code preempt_seq} pointer names, as its inline C
     * checkpoint does: the slot's field when attached, a static zero when detached, or the core's wake
     * sequence while a lost worker waits for a new scheduler (spec/SCB.md §6.1), which is in no SCB. The
     * handle is the generated layout's own for that field (its type, alignment and byte order).
     */
    private static final VarHandle PREEMPT_SEQ =
            ((ValueLayout) ScbLayout.LAYOUT.select(PathElement.groupElement("preempt_seq"))).varHandle();
    /**
     * Every address the fast path reads satisfies its mask: below 2^56 (the largest user address of any
     * 64-bit Linux) and aligned as the field is. ANDing the address with it changes nothing, but tells the
     * JIT the offset's range and low bits, so it drops the segment's bounds and alignment checks and the
     * checkpoint compiles to a plain load and compare; {@link #sync()} checks that the addresses fit.
     */
    private static final long PREEMPT_SEQ_MASK = (1L << 56) - ((ValueLayout) ScbLayout.LAYOUT.select(
            PathElement.groupElement("preempt_seq"))).byteAlignment();
    private static final long SCB_MASK = (1L << 56) - ScbLayout.LAYOUT.byteAlignment();

    private static final long W_PREEMPT_SEQ = FfmLibmorpheus.offset("morpheus_worker.preempt_seq");
    private static final long W_CACHED_ACK = FfmLibmorpheus.offset("morpheus_worker.cached_ack");
    private static final long W_DEPTH = FfmLibmorpheus.offset("morpheus_worker.critical_depth");
    private static final long W_IN_CRITICAL = FfmLibmorpheus.offset("morpheus_worker.in_critical");
    private static final long W_GENERATION = FfmLibmorpheus.offset("morpheus_worker.generation");
    private static final long W_ATTACHED_GENERATION = FfmLibmorpheus.offset("morpheus_worker.attached_generation");

    /** The thread's struct morpheus_worker. */
    private final long raw;
    private final MemorySegment rawHandle;
    /** Address of the u64 the fast path compares with cachedAck (libmorpheus's preempt_seq pointer). */
    private long preemptSeq;
    /** Address of the SCB while attached (from libmorpheus's in_critical pointer), else 0. */
    private long scb;
    /** What the fast path compares preempt_seq with (the core's cached_ack). */
    private long cachedAck;
    private boolean attached;
    private long generation;
    private long attachedGeneration;

    FfmWorker(Thread owner, long raw) {
        super(owner);
        this.raw = raw;
        this.rawHandle = MemorySegment.ofAddress(raw);
        sync();
    }

    /** Take the fast-path state from the core after it ran (it may have acknowledged or detached). */
    private void sync() {
        preemptSeq = (long) LONG.get(ALL, raw + W_PREEMPT_SEQ);
        cachedAck = (long) LONG.get(ALL, raw + W_CACHED_ACK);
        long inCritical = (long) LONG.get(ALL, raw + W_IN_CRITICAL);
        attached = inCritical != 0;
        scb = attached ? inCritical - ScbOffsets.IN_CRITICAL : 0;
        if ((preemptSeq & ~PREEMPT_SEQ_MASK) != 0 || (scb & ~SCB_MASK) != 0) {
            throw new IllegalStateException("libmorpheus's preempt_seq pointer 0x" + Long.toHexString(preemptSeq)
                    + " or SCB 0x" + Long.toHexString(scb) + " is not an aligned user address below 2^56");
        }
        if (attached && preemptSeq != scb + ScbOffsets.PREEMPT_SEQ) {
            throw new IllegalStateException("libmorpheus's in_critical pointer is not in the SCB its preempt_seq is in");
        }
        generation = (long) LONG.get(ALL, raw + W_GENERATION);
        attachedGeneration = (long) LONG.get(ALL, raw + W_ATTACHED_GENERATION);
    }

    @Override
    public boolean checkpoint() {
        if (Thread.currentThread() != owner) {
            return false; // another thread's worker: the detached checkpoint, nothing read
        }
        long seq = (long) PREEMPT_SEQ.getAcquire(ALL, preemptSeq & PREEMPT_SEQ_MASK);
        if (seq == cachedAck) {
            return false;
        }
        return slowPath(seq);
    }

    private boolean slowPath(long seq) {
        if (closed) {
            return false;
        }
        try {
            boolean yielded = (boolean) FfmLibmorpheus.CHECKPOINT_SLOW.invokeExact(rawHandle, seq);
            sync();
            return yielded;
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    private boolean generationOk() {
        return (long) LONG.getAcquire(ALL, generation) == attachedGeneration;
    }

    /** The region's generation changed: let the core detach the worker (it writes nothing). */
    private void lost() {
        try {
            FfmLibmorpheus.WORKER_LOST.invokeExact(rawHandle);
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
        sync();
    }

    @Override
    public void criticalEnter() {
        checkOwner("criticalEnter");
        long at = raw + W_DEPTH;
        int depth = (int) INT.get(ALL, at);
        INT.set(ALL, at, depth + 1);
        if (depth != 0 || !attached) {
            return;
        }
        if (generationOk()) {
            ScbLayout.IN_CRITICAL.setOpaque(ALL, scb & SCB_MASK, 1);
            VarHandle.fullFence(); // the section's loads stay after the flag's store (spec/SCB.md §3.1)
        } else {
            lost();
        }
    }

    @Override
    public void criticalExit() {
        checkOwner("criticalExit");
        long at = raw + W_DEPTH;
        int depth = (int) INT.get(ALL, at);
        if (depth == 0) {
            call(() -> (int) FfmLibmorpheus.CRITICAL_EXIT_CALL.invokeExact(rawHandle)); // reports NOT_IN_CRITICAL
            return;
        }
        INT.set(ALL, at, depth - 1);
        if (depth != 1 || !attached) {
            return;
        }
        if (generationOk()) {
            ScbLayout.IN_CRITICAL.setRelease(ALL, scb & SCB_MASK, 0);
        } else {
            lost();
        }
    }

    @Override
    public int criticalDepth() {
        checkOwner("criticalDepth");
        return (int) INT.get(ALL, raw + W_DEPTH);
    }

    @FunctionalInterface
    private interface Downcall {
        int call() throws Throwable;
    }

    /** Run a downcall returning 0 or a negated error, take the core's state, throw on error. */
    private int call(Downcall downcall) {
        int result;
        try {
            result = downcall.call();
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
        String error = result < 0 ? FfmLibmorpheus.lastError() : null;
        sync();
        if (error != null) {
            throw MorpheusException.ofNative(result, error);
        }
        return result;
    }

    @Override
    public void setEscapable(boolean escapable) {
        checkOwner("setEscapable");
        call(() -> keptWhenDetached((int) FfmLibmorpheus.SET_ESCAPABLE.invokeExact(rawHandle, escapable)));
    }

    @Override
    public void recordExplicitYield() {
        checkOwner("recordExplicitYield");
        call(() -> (int) FfmLibmorpheus.RECORD_EXPLICIT_YIELD.invokeExact(rawHandle));
    }

    @Override
    public boolean escapable() {
        checkOwner("escapable");
        return call(() -> (int) FfmLibmorpheus.ESCAPABLE.invokeExact(rawHandle)) != 0;
    }

    @Override
    void setPriority0(int priority) {
        call(() -> keptWhenDetached((int) FfmLibmorpheus.SET_PRIORITY.invokeExact(rawHandle, priority)));
    }

    @Override
    public int priority() {
        checkOwner("priority");
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(JAVA_INT);
            call(() -> (int) FfmLibmorpheus.PRIORITY.invokeExact(rawHandle, out));
            return out.get(JAVA_INT, 0);
        }
    }

    @Override
    public OptionalInt slot() {
        if (closed || Thread.currentThread() != owner) {
            return OptionalInt.empty();
        }
        try {
            long slot = (long) FfmLibmorpheus.SLOT.invokeExact(rawHandle);
            return slot < 0 ? OptionalInt.empty() : OptionalInt.of(Math.toIntExact(slot));
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    @Override
    public boolean isAttached() {
        checkOwner("isAttached");
        try {
            int status = (int) FfmLibmorpheus.STATUS.invokeExact(rawHandle);
            sync();
            return status == 0;
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    @Override
    public void checkStatus() {
        checkOwner("checkStatus");
        call(() -> (int) FfmLibmorpheus.STATUS.invokeExact(rawHandle));
    }

    @Override
    public long yieldCount() {
        checkOwner("yieldCount");
        long total = 0;
        try {
            for (YieldReason reason : YieldReason.values()) {
                total += (long) FfmLibmorpheus.YIELD_COUNT.invokeExact(rawHandle, reason.value);
            }
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
        return total;
    }

    @Override
    public RuntimeMode runtimeMode() {
        checkOwner("runtimeMode");
        return RuntimeMode.of(call(() -> (int) FfmLibmorpheus.RUNTIME_MODE.invokeExact(rawHandle)));
    }

    @Override
    public long cachedAck() {
        checkOwner("cachedAck");
        return cachedAck;
    }

    @Override
    public String backend() {
        return "ffm";
    }

    @Override
    long handle() {
        return raw;
    }

    @Override
    void unregister0() {
        call(() -> (int) FfmLibmorpheus.UNREGISTER.invokeExact(rawHandle));
    }

}
