// SPDX-License-Identifier: Apache-2.0 OR MIT
package dev.morpheus;

import dev.morpheus.abi.ErrorCode;

/**
 * A Morpheus operation failed. {@link #code()} is the ABI's {@code error_code}; the message names what was
 * expected and what was found. The subclasses group the codes by what the caller can do about them.
 */
public class MorpheusException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final ErrorCode code;

    MorpheusException(ErrorCode code, String message) {
        super(message.startsWith(code.name() + ":") ? message : code.name() + ": " + message);
        this.code = code;
    }

    /** The ABI error code. */
    public ErrorCode code() {
        return code;
    }

    /** The exception class for {@code code}, carrying {@code message}. */
    static MorpheusException of(ErrorCode code, String message) {
        switch (code) {
            case BAD_MAGIC:
            case ABI_MAJOR_MISMATCH:
            case REGION_TRUNCATED:
            case BAD_LAYOUT:
            case UNKNOWN_REQUIRED_FEATURE:
            case NOT_READY:
            case IO:
            case UNSUPPORTED_PLATFORM:
                return new RegionException(code, message);
            case SLOT_OUT_OF_RANGE:
            case ALREADY_REGISTERED:
            case REGISTRATION_REFUSED:
            case SLOT_BUSY:
            case NOT_REGISTERED:
                return new RegistrationException(code, message);
            default:
                return new WorkerStateException(code, message);
        }
    }

    /** A native result: a negated error code. */
    static MorpheusException ofNative(int negatedCode, String message) {
        ErrorCode code;
        try {
            code = ErrorCode.of(-negatedCode);
        } catch (IllegalArgumentException unknown) {
            throw new IllegalStateException("the native library returned " + negatedCode
                    + ", which is no negated error_code of this SDK's ABI: " + message, unknown);
        }
        return of(code, message);
    }

    /** The region cannot be used: missing, malformed, of another ABI major, not ready, or the host cannot run the ABI. */
    public static final class RegionException extends MorpheusException {
        private static final long serialVersionUID = 1L;

        RegionException(ErrorCode code, String message) {
            super(code, message);
        }
    }

    /** The thread could not get, or does not hold, a worker slot. */
    public static final class RegistrationException extends MorpheusException {
        private static final long serialVersionUID = 1L;

        RegistrationException(ErrorCode code, String message) {
            super(code, message);
        }
    }

    /**
     * The worker is not in a state for the operation: {@code NOT_IN_CRITICAL}, {@code GENERATION_CHANGED}
     * (the scheduler restarted; register again), {@code DETACHED}, {@code INVALID_ARGUMENT}.
     */
    public static final class WorkerStateException extends MorpheusException {
        private static final long serialVersionUID = 1L;

        WorkerStateException(ErrorCode code, String message) {
            super(code, message);
        }
    }
}
