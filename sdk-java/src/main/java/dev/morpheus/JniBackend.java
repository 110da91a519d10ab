// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import java.nio.charset.StandardCharsets;

/** The JNI backend (JDK 17+). */
final class JniBackend implements Backend {
    JniBackend() {
        JniNative.nop(); // load the library now, so a missing one fails the choice, not the first register
    }

    @Override
    public String name() {
        return "jni";
    }

    @Override
    public long registerThread(Options options) {
        return JniNative.check(JniNative.register(bytes(options.regionPath), bytes(options.agentSocket),
                options.directSlot, options.escapableArgument(), options.priority));
    }

    @Override
    public long currentHandle() {
        return JniNative.currentToken();
    }

    @Override
    public Worker worker(long token) {
        return new JniWorker(Thread.currentThread(), token);
    }

    @Override
    public boolean checkRegion(String path) {
        return JniNative.check(JniNative.checkRegion(bytes(path))) == 0;
    }

    @Override
    public void threadCriticalEnter() {
        JniNative.check(JniNative.threadCriticalEnter());
    }

    @Override
    public void threadCriticalExit() {
        JniNative.check(JniNative.threadCriticalExit());
    }

    @Override
    public int threadCriticalDepth() {
        return JniNative.threadCriticalDepth();
    }

    @Override
    public void setModeClock(long nanos) {
        JniNative.setModeClock(nanos);
    }

    private static byte[] bytes(String path) {
        return path == null ? null : path.getBytes(StandardCharsets.UTF_8);
    }
}
