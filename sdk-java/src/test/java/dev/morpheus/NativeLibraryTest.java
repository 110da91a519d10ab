// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The copy a native library is loaded from never outlives the load: one JVM start must not leave a file. The
 * jar carries each library for every platform it names, each built for that platform's machine, and the
 * loader picks the directory of the platform the JVM runs on.
 */
class NativeLibraryTest {
    /** The JVM's os.name/os.arch pairs of the two platforms, and the jar directory each must resolve to. */
    @ParameterizedTest
    @CsvSource({"Linux, amd64, linux-x86_64", "Linux, x86_64, linux-x86_64", "Linux, aarch64, linux-aarch64"})
    void eachPlatformResolvesToItsDirectory(String os, String arch, String dir) {
        assertEquals(dir, NativeLibrary.platform(os, arch));
    }

    @ParameterizedTest
    @CsvSource({"Linux, riscv64", "Linux, arm", "Mac OS X, aarch64", "Windows 11, amd64"})
    void anotherPlatformIsRefusedNamingIt(String os, String arch) {
        MorpheusException refused = assertThrows(MorpheusException.class, () -> NativeLibrary.platform(os, arch));
        assertTrue(refused.getMessage().contains(os + " on " + arch), refused.getMessage());
    }

    /** ELF e_machine of each platform directory: EM_X86_64 (62) and EM_AARCH64 (183). */
    @ParameterizedTest
    @CsvSource({"linux-x86_64, libmorpheus_jni.so, 62", "linux-x86_64, libmorpheus_c.so, 62",
        "linux-aarch64, libmorpheus_jni.so, 183", "linux-aarch64, libmorpheus_c.so, 183"})
    void eachPlatformsLibraryIsBuiltForItsMachine(String dir, String name, int machine) throws IOException {
        String resource = "native/" + dir + "/" + name;
        try (InputStream in = NativeLibrary.class.getResourceAsStream(resource)) {
            assertTrue(in != null, "dev/morpheus/" + resource + " is not on the class path");
            byte[] header = in.readNBytes(20);
            assertEquals(20, header.length, resource + " is shorter than an ELF header");
            assertTrue(header[0] == 0x7f && header[1] == 'E' && header[2] == 'L' && header[3] == 'F', resource + " is not ELF");
            assertEquals(machine, (header[18] & 0xff) | (header[19] & 0xff) << 8, resource + "'s e_machine");
        }
    }

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
