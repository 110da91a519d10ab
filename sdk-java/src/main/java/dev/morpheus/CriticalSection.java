// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

/**
 * An open critical section of a {@link Worker}, for try-with-resources:
 * {@code try (var cs = worker.critical()) { ... }}. Closing it exits the section once; closing it again
 * does nothing, so an exception path cannot unbalance the nesting.
 */
public final class CriticalSection implements AutoCloseable {
    private final Worker worker;
    private boolean open = true;

    CriticalSection(Worker worker) {
        this.worker = worker;
    }

    /** Exit the section (the outermost exit clears {@code in_critical}). */
    @Override
    public void close() {
        if (open) {
            open = false;
            worker.criticalExit();
        }
    }
}
