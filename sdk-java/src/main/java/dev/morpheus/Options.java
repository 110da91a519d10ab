// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import dev.morpheus.abi.ErrorCode;

/**
 * How {@link Morpheus#register(Options)} registers the calling thread. The defaults discover the region
 * (spec/SCB.md §1.2: {@code MORPHEUS_REGION}, the pinned map, the sim file, else detached), register
 * through the agent, leave the worker not escapable (Java's default, §5.5) and give it priority 0.
 * {@code escapable} and {@code priority} are written into the slot before the worker is RUNNING.
 */
public final class Options {
    String regionPath; // null: discover; "": detached
    String agentSocket; // null: MORPHEUS_SOCKET or the default
    int directSlot = -1;
    Boolean escapable; // null: the ABI's default for Java
    int priority;

    /** The defaults. */
    public static Options defaults() {
        return new Options();
    }

    /** Attach to this region file or pinned map (an error if it cannot be mapped). */
    public Options regionPath(String path) {
        if (path == null || path.isEmpty()) {
            throw MorpheusException.of(ErrorCode.INVALID_ARGUMENT,
                    "regionPath: expected a path, found " + (path == null ? "null" : "\"\"") + " (use detached())");
        }
        this.regionPath = path;
        return this;
    }

    /** Run detached: checkpoints never yield, critical sections only count (spec/SCB.md §7). */
    public Options detached() {
        this.regionPath = "";
        return this;
    }

    /** Register through the agent listening at {@code path}. */
    public Options agentSocket(String path) {
        this.agentSocket = path;
        return this;
    }

    /** Register slot {@code slot} directly, without an agent (tests and harnesses that play the scheduler). */
    public Options directSlot(int slot) {
        if (slot < 0) {
            throw MorpheusException.of(ErrorCode.INVALID_ARGUMENT, "directSlot: expected a slot index >= 0, found " + slot);
        }
        this.directSlot = slot;
        return this;
    }

    /** Whether the scheduler may escalate this worker (default false for Java, spec/SCB.md §5.5). */
    public Options escapable(boolean escapable) {
        this.escapable = escapable;
        return this;
    }

    /**
     * Advisory priority, {@code PRIORITY_MIN} (-20, most important) to {@code PRIORITY_MAX} (19). The range is
     * the core's rule, checked once there (through JNI or libmorpheus alike): {@link Morpheus#register} refuses
     * a value outside it with {@code INVALID_ARGUMENT} naming the value, before any other refusal, and writes
     * nothing.
     */
    public Options priority(int priority) {
        this.priority = priority;
        return this;
    }

    /** -1 (the ABI's default for Java), 0 or 1, as the native layers take it. */
    int escapableArgument() {
        return escapable == null ? -1 : (escapable ? 1 : 0);
    }
}
