// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

/** One way of reaching the Rust core: FFM downcalls into libmorpheus, or the JNI library. */
interface Backend {
    /** "ffm" or "jni". */
    String name();

    /** Register the calling platform thread (the caller has checked it holds no worker). */
    Worker register(Options options);

    /** See {@link Morpheus#checkRegion(String)}. */
    boolean checkRegion(String path);
}
