// SPDX-License-Identifier: Apache-2.0 OR MIT
// MorpheusError and one subclass per ABI error_code, built from the generated ABI module (the names
// and numbers are never written here): BAD_MAGIC -> BadMagicError.
'use strict';
const { ErrorCode } = require('@morpheus/abi');

/** Base class of every Morpheus error: `code` is the error_code name, `errno` its ABI number. */
class MorpheusError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }

  /** A new error of the class for `code` (an error_code name). */
  static of(code, message) {
    const Class = errors[className(code)];
    if (Class === undefined) throw new TypeError(`MorpheusError.of: ${code} is not an error_code name`);
    return new Class(message);
  }
}

/** `NOT_IN_CRITICAL` -> `NotInCriticalError`. */
function className(code) {
  return code.split('_').map((w) => w[0] + w.slice(1).toLowerCase()).join('') + 'Error';
}

const errors = {};
for (const [code, errno] of Object.entries(ErrorCode)) {
  const name = className(code);
  // A named class per code, so stack traces and `instanceof` read naturally.
  const Class = { [name]: class extends MorpheusError {} }[name];
  Object.defineProperty(Class.prototype, 'code', { value: code, enumerable: true });
  Object.defineProperty(Class.prototype, 'errno', { value: errno, enumerable: true });
  errors[name] = Class;
}
Object.freeze(errors);

/** An error thrown by the addon (its `code` is an error_code name) as the class of that code. */
function fromNative(error) {
  if (error instanceof Error && typeof error.code === 'string' && Object.hasOwn(ErrorCode, error.code)) {
    return new errors[className(error.code)](error.message);
  }
  return error;
}

module.exports = { MorpheusError, errors, fromNative, className };
