// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_BOOLEAN;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import dev.morpheus.abi.ErrorCode;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;

/**
 * Downcalls into libmorpheus (sdk-c/include/morpheus.h), loaded from the jar. The layouts of
 * {@code struct morpheus_worker} and {@code struct morpheus_options} are asked of the library
 * ({@code morpheus_layout_offset}), never copied; they are static finals, so the JIT folds them.
 */
final class FfmLibmorpheus {
    private FfmLibmorpheus() {}

    private static final Linker LINKER = Linker.nativeLinker();
    private static final SymbolLookup LIB =
            NativeLibrary.load("libmorpheus_c.so", path -> SymbolLookup.libraryLookup(path, Arena.global()));
    /** For calls that neither block nor call back: no thread-state transition. */
    private static final Linker.Option CRITICAL = Linker.Option.critical(false);

    private static MethodHandle function(String name, FunctionDescriptor descriptor, Linker.Option... options) {
        MemorySegment symbol = LIB.find(name).orElseThrow(() -> MorpheusException.of(ErrorCode.IO,
                "expected the symbol " + name + " in the packaged libmorpheus, found none (an older library?)"));
        return LINKER.downcallHandle(symbol, descriptor, options);
    }

    static final MethodHandle LAYOUT_OFFSET = function("morpheus_layout_offset", FunctionDescriptor.of(JAVA_LONG, ADDRESS));
    static final MethodHandle OPTIONS_INIT = function("morpheus_options_init", FunctionDescriptor.ofVoid(ADDRESS));
    static final MethodHandle REGION_CHECK = function("morpheus_region_check", FunctionDescriptor.of(JAVA_INT, ADDRESS));
    static final MethodHandle REGISTER = function("morpheus_worker_register", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
    static final MethodHandle WORKER_CURRENT = function("morpheus_worker_current", FunctionDescriptor.of(ADDRESS), CRITICAL);
    static final MethodHandle UNREGISTER = function("morpheus_worker_unregister", FunctionDescriptor.of(JAVA_INT, ADDRESS));
    static final MethodHandle CHECKPOINT_SLOW =
            function("morpheus_checkpoint_slow", FunctionDescriptor.of(JAVA_BOOLEAN, ADDRESS, JAVA_LONG), CRITICAL);
    static final MethodHandle WORKER_LOST = function("morpheus_worker_lost", FunctionDescriptor.ofVoid(ADDRESS), CRITICAL);
    static final MethodHandle THREAD = function("morpheus_thread", FunctionDescriptor.of(ADDRESS), CRITICAL);
    static final MethodHandle CRITICAL_ENTER_CALL =
            function("morpheus_critical_enter_call", FunctionDescriptor.of(JAVA_INT, ADDRESS), CRITICAL);
    static final MethodHandle CRITICAL_EXIT_CALL =
            function("morpheus_critical_exit_call", FunctionDescriptor.of(JAVA_INT, ADDRESS), CRITICAL);
    static final MethodHandle STATUS = function("morpheus_worker_status", FunctionDescriptor.of(JAVA_INT, ADDRESS), CRITICAL);
    static final MethodHandle SLOT = function("morpheus_worker_slot", FunctionDescriptor.of(JAVA_LONG, ADDRESS), CRITICAL);
    static final MethodHandle SET_ESCAPABLE =
            function("morpheus_set_escapable", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_BOOLEAN), CRITICAL);
    static final MethodHandle ESCAPABLE = function("morpheus_escapable", FunctionDescriptor.of(JAVA_INT, ADDRESS), CRITICAL);
    static final MethodHandle SET_PRIORITY =
            function("morpheus_set_priority", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT), CRITICAL);
    static final MethodHandle PRIORITY = function("morpheus_priority", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
    static final MethodHandle YIELD_COUNT =
            function("morpheus_yield_count", FunctionDescriptor.of(JAVA_LONG, ADDRESS, JAVA_INT), CRITICAL);
    static final MethodHandle RUNTIME_MODE = function("morpheus_runtime_mode", FunctionDescriptor.of(JAVA_INT, ADDRESS), CRITICAL);
    static final MethodHandle RECORD_EXPLICIT_YIELD =
            function("morpheus_record_explicit_yield", FunctionDescriptor.of(JAVA_INT, ADDRESS), CRITICAL);
    static final MethodHandle TESTING_SET_MODE_CLOCK =
            function("morpheus_testing_set_mode_clock", FunctionDescriptor.ofVoid(JAVA_LONG), CRITICAL);
    static final MethodHandle LAST_ERROR = function("morpheus_last_error", FunctionDescriptor.of(ADDRESS));

    /** The library's answer to morpheus_layout_offset(name); an unknown name fails loudly. */
    static long offset(String name) {
        try (Arena arena = Arena.ofConfined()) {
            long offset = (long) LAYOUT_OFFSET.invokeExact(arena.allocateFrom(name));
            if (offset < 0) {
                throw MorpheusException.of(ErrorCode.IO, "morpheus_layout_offset(\"" + name
                        + "\"): expected an offset, found none: the packaged libmorpheus does not know the field");
            }
            return offset;
        } catch (MorpheusException e) {
            throw e;
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    /** morpheus_last_error() of the calling thread. */
    static String lastError() {
        try {
            MemorySegment text = (MemorySegment) LAST_ERROR.invokeExact();
            return text.equals(MemorySegment.NULL) ? "" : text.reinterpret(Integer.MAX_VALUE).getString(0);
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    /** Throw for a negative result, else return it. */
    static int check(int result) {
        if (result < 0) {
            throw MorpheusException.ofNative(result, lastError());
        }
        return result;
    }
}
