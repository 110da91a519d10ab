// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import dev.morpheus.abi.ErrorCode;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Locale;

/** Extracts a native library packaged in the jar to a temporary file (a library must be a file to load). */
final class NativeLibrary {
    private NativeLibrary() {}

    /** The platform directory inside the jar: only linux-x86_64 is built. */
    static String platform() {
        String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT);
        String arch = System.getProperty("os.arch", "");
        if (os.startsWith("linux") && (arch.equals("amd64") || arch.equals("x86_64"))) {
            return "linux-x86_64";
        }
        throw MorpheusException.of(ErrorCode.UNSUPPORTED_PLATFORM, "expected linux on x86-64 (the platform the jar "
                + "carries natives for), found " + os + " on " + arch);
    }

    /** Extract {@code name} (e.g. libmorpheus_jni.so) and return its path. */
    static Path extract(String name) {
        String resource = "native/" + platform() + "/" + name;
        try (InputStream in = NativeLibrary.class.getResourceAsStream(resource)) {
            if (in == null) {
                throw MorpheusException.of(ErrorCode.IO, "expected the native library dev/morpheus/" + resource
                        + " in the jar, found none (was the jar built without cargo?)");
            }
            Path dir = Files.createTempDirectory("morpheus-");
            Path file = dir.resolve(name);
            Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
            file.toFile().deleteOnExit();
            dir.toFile().deleteOnExit();
            return file;
        } catch (IOException e) {
            throw MorpheusException.of(ErrorCode.IO, "extracting dev/morpheus/" + resource + ": " + e);
        }
    }
}
