// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import dev.morpheus.abi.ErrorCode;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Locale;
import java.util.function.Function;

/**
 * Loads a native library packaged in the jar. A library must be a file to load, so it is copied to a fresh
 * temporary directory, loaded, and unlinked at once: the mapping outlives the name on Linux, and nothing is
 * left behind however the JVM ends (deleteOnExit never runs on a kill or a halt, and leaked one copy per JVM).
 */
final class NativeLibrary {
    private NativeLibrary() {}

    /** The platform directory inside the jar for this JVM's {@code os.name} and {@code os.arch}. */
    static String platform() {
        return platform(System.getProperty("os.name", ""), System.getProperty("os.arch", ""));
    }

    /**
     * The platform directory inside the jar (dev/morpheus/native/DIR/) for a JVM reporting {@code osName} and
     * {@code osArch}: linux-x86_64 or linux-aarch64, the two the jar carries natives for (pom.xml builds and
     * packages both). The JVM names x86-64 "amd64" (some builds "x86_64") and arm64 "aarch64". Any other
     * platform is refused with UNSUPPORTED_PLATFORM, naming what was found.
     */
    static String platform(String osName, String osArch) {
        String os = osName.toLowerCase(Locale.ROOT);
        if (os.startsWith("linux")) {
            switch (osArch) {
                case "amd64", "x86_64" -> {
                    return "linux-x86_64";
                }
                case "aarch64", "arm64" -> {
                    return "linux-aarch64";
                }
                default -> { }
            }
        }
        throw MorpheusException.of(ErrorCode.UNSUPPORTED_PLATFORM, "expected linux on x86-64 or aarch64 (the "
                + "platforms the jar carries natives for), found " + osName + " on " + osArch);
    }

    /**
     * Copy {@code name} (e.g. libmorpheus_jni.so) out of the jar, hand its path to {@code load}, then remove
     * the copy and its directory whether or not loading succeeded. Returns what {@code load} returned.
     */
    static <T> T load(String name, Function<Path, T> load) {
        String resource = "native/" + platform() + "/" + name;
        Path dir;
        Path file;
        try (InputStream in = NativeLibrary.class.getResourceAsStream(resource)) {
            if (in == null) {
                throw MorpheusException.of(ErrorCode.IO, "expected the native library dev/morpheus/" + resource
                        + " in the jar, found none (was the jar built without cargo?)");
            }
            dir = Files.createTempDirectory("morpheus-");
            file = dir.resolve(name);
            Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
        } catch (IOException e) {
            throw MorpheusException.of(ErrorCode.IO, "extracting dev/morpheus/" + resource + ": " + e);
        }
        try {
            return load.apply(file);
        } finally {
            try {
                Files.deleteIfExists(file);
                Files.deleteIfExists(dir);
            } catch (IOException e) {
                // Loaded or not, a copy we cannot remove is not a reason to fail the caller.
            }
        }
    }
}
