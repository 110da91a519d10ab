// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import dev.morpheus.abi.ErrorCode;
import dev.morpheus.abi.RuntimeMode;
import java.util.OptionalInt;

/**
 * The calling platform thread's worker (spec/SCB.md §4), from {@link Morpheus#register()}. It is bound to
 * the thread that registered it: from any other thread {@link #checkpoint()} returns false without reading
 * the slot, and every other operation throws a {@link MorpheusException.RegistrationException}
 * ({@code NOT_REGISTERED}). Closing it shuts the worker down and frees its slot; a thread that exits
 * without closing it frees the slot when the thread ends.
 *
 * <pre>{@code
 * try (Worker worker = Morpheus.register()) {
 *     while (hasWork()) {
 *         doSomeWork();
 *         if (worker.checkpoint()) {
 *             Thread.yield(); // the scheduler asked: yield now (or return to the executor)
 *         }
 *         try (var cs = worker.critical()) {
 *             callIntoNativeCode(); // never asked to yield in here
 *         }
 *     }
 * }
 * }</pre>
 */
public abstract class Worker implements AutoCloseable {
    /** The thread that registered; the only one that may use the worker. */
    final Thread owner;
    /** Set by {@link #close()}; a closed worker is detached and writes nothing. */
    boolean closed;

    Worker(Thread owner) {
        this.owner = owner;
    }

    /**
     * The checkpoint: true means the scheduler asked this worker to yield and the request is already
     * acknowledged; the caller must yield now ({@link Thread#yield()}, or return to its executor).
     * One acquire load and one comparison when nothing is pending; never yields inside a critical section
     * or when detached; never throws.
     */
    public abstract boolean checkpoint();

    /** Enter a critical section until the returned guard is closed; sections nest. */
    public final CriticalSection critical() {
        criticalEnter();
        return new CriticalSection(this);
    }

    /** Enter a critical section without a guard; pair with {@link #criticalExit()}. */
    public abstract void criticalEnter();

    /** Exit a critical section; {@code NOT_IN_CRITICAL} (writing nothing) without a matching enter. */
    public abstract void criticalExit();

    /** The thread's critical nesting depth. */
    public abstract int criticalDepth();

    /** Opt in to or out of escalation; {@code GENERATION_CHANGED} after a scheduler restart. */
    public abstract void setEscapable(boolean escapable);

    /** Whether the worker accepts escalation, as the SDK believes it. */
    public abstract boolean escapable();

    /**
     * Set the advisory priority; outside -20..19 the core (through JNI or libmorpheus alike) refuses it with
     * {@code INVALID_ARGUMENT} naming the range and the value, and nothing is written.
     */
    public final void setPriority(int priority) {
        checkOwner("setPriority");
        setPriority0(priority);
    }

    abstract void setPriority0(int priority);

    /** The advisory priority. */
    public abstract int priority();

    /** The slot index, empty when detached. */
    public abstract OptionalInt slot();

    /** Whether the worker drives an SCB (false when detached or after a scheduler restart). */
    public abstract boolean isAttached();

    /**
     * Returns normally while attached to a live region; throws {@code GENERATION_CHANGED} once a restart
     * detached the worker, {@code DETACHED} for a worker that never had a region.
     */
    public abstract void checkStatus();

    /** Yields performed for any reason. */
    public abstract long yieldCount();

    /**
     * Record a yield the thread made on its own (spec/SCB.md §5.8, the explicit yield): it went back to its
     * executor's queue, parked, slept or called {@link Thread#yield()} at a point of its choosing. Any pending
     * request is acknowledged as a checkpoint would, the yield is counted as {@code EXPLICIT}, and the
     * runtime modes' clocks restart. It suspends nothing and is allowed inside a critical section. A
     * detached worker, or one a scheduler restart detached, writes nothing and throws nothing.
     */
    public abstract void recordExplicitYield();

    /**
     * What the checkpoint's fast path compares {@code preempt_seq} with: the last acknowledged sequence, or
     * 2^64-1 (-1 as a signed long) in the modes where every checkpoint takes the slow path (spec/SCB.md §5.4);
     * 0 when detached.
     */
    public abstract long cachedAck();

    /** The worker's runtime mode (spec/SCB.md §5.4). */
    public abstract RuntimeMode runtimeMode();

    /** The backend driving this worker: "ffm" or "jni". */
    public abstract String backend();

    /** The core's name of the registration this handle stands for ({@link Backend#currentHandle()}). */
    abstract long handle();

    /**
     * Shut the worker down (QUIESCING, DEAD, slot released). Closing twice does nothing; a worker lost to a
     * scheduler restart closes without error and writes nothing.
     */
    @Override
    public final void close() {
        checkOwner("close");
        if (!closed) {
            closed = true;
            Morpheus.forget(this);
            try {
                unregister0();
            } catch (MorpheusException e) {
                // A worker lost to a scheduler restart shuts down without error, writing nothing (spec/SCB.md
                // §6); the core has released the thread's registration when it reports this.
                if (e.code() != ErrorCode.GENERATION_CHANGED) {
                    throw e;
                }
            }
        }
    }

    abstract void unregister0();

    /**
     * The result of a setter: a worker detached from the start keeps the value in the SDK's own state and
     * reports no error (spec/SCB.md §7); every other failure is thrown.
     */
    static int keptWhenDetached(int result) {
        return result == -ErrorCode.DETACHED.value ? 0 : result;
    }

    /** Throw unless the calling thread owns this open worker. */
    final void checkOwner(String operation) {
        Thread current = Thread.currentThread();
        if (current != owner) {
            throw MorpheusException.of(ErrorCode.NOT_REGISTERED, operation + ": this worker belongs to thread \""
                    + owner.getName() + "\", called from thread \"" + current.getName() + "\"");
        }
        if (closed && !operation.equals("close")) {
            throw MorpheusException.of(ErrorCode.NOT_REGISTERED, operation + ": this worker was closed");
        }
    }

    @Override
    public String toString() {
        return "Worker[" + backend() + ", thread \"" + owner.getName() + "\", "
                + (closed ? "closed" : slot().isPresent() ? "slot " + slot().getAsInt() : "detached") + "]";
    }
}
