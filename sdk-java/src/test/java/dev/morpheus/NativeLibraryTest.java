// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;

/** The copy a native library is loaded from never outlives the load: one JVM start must not leave a file. */
class NativeLibraryTest {
    @Test
    void theExtractedCopyIsGoneOnceLoaded() {
        Path loaded = NativeLibrary.load("libmorpheus_jni.so", path -> {
            assertTrue(Files.isRegularFile(path), "the copy exists while it is being loaded");
            System.load(path.toString());
            return path;
        });
        assertEquals("libmorpheus_jni.so", loaded.getFileName().toString());
        assertFalse(Files.exists(loaded), "the copy " + loaded + " was left behind");
        assertFalse(Files.exists(loaded.getParent()), "its directory " + loaded.getParent() + " was left behind");
    }

    @Test
    void theCopyIsGoneWhenLoadingFails() {
        Path[] seen = new Path[1];
        IllegalStateException failure = assertThrows(IllegalStateException.class,
                () -> NativeLibrary.load("libmorpheus_jni.so", path -> {
                    seen[0] = path;
                    throw new IllegalStateException("refused");
                }));
        assertEquals("refused", failure.getMessage());
        assertFalse(Files.exists(seen[0].getParent()), "a failed load left " + seen[0].getParent());
    }

    @Test
    void aMissingLibraryIsNamed() {
        MorpheusException missing = assertThrows(MorpheusException.class,
                () -> NativeLibrary.load("libnot_there.so", path -> path));
        assertTrue(missing.getMessage().contains("libnot_there.so"), missing.getMessage());
    }
}
