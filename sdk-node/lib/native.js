// SPDX-License-Identifier: Apache-2.0 OR MIT
// Loads the napi-rs addon (the Rust SDK) built for this platform, after the platform checks of
// spec/SCB.md §0.1. Only the slow paths call into it.
'use strict';
const os = require('node:os');
const path = require('node:path');
const { MorpheusError } = require('./errors.js');

// The triples napi-rs names its binaries by. The addon is native/morpheus.<triple>.node in this package
// (a source tree's build; tools/pack.sh without --platforms), else the platform package
// @morpheus-sched/node-<triple> (napi-rs's layout, the published one: the main package carries no addon
// and names an optionalDependency per triple, which npm installs only on its os/cpu/libc).
function triple() {
  if (process.platform !== 'linux') return null;
  const report = typeof process.report?.getReport === 'function' ? process.report.getReport() : null;
  const musl = report !== null && !report.header?.glibcVersionRuntime;
  const abi = musl ? 'musl' : 'gnu';
  return { x64: `linux-x64-${abi}`, arm64: `linux-arm64-${abi}` }[process.arch] ?? null;
}

function load() {
  // The region is shared with other processes through 64-bit atomics in little-endian byte order.
  if (os.endianness() !== 'LE') {
    throw MorpheusError.of('UNSUPPORTED_PLATFORM', 'Morpheus needs a little-endian host; this one is big-endian');
  }
  const name = triple();
  if (name === null) {
    throw MorpheusError.of(
      'UNSUPPORTED_PLATFORM',
      `@morpheus-sched/node has no native addon for ${process.platform}-${process.arch}; it supports linux-x64 and linux-arm64`,
    );
  }
  const file = path.join(__dirname, '..', 'native', `morpheus.${name}.node`);
  try {
    return require(file);
  } catch (error) {
    if (error && error.code === 'MODULE_NOT_FOUND') {
      try {
        return require(`@morpheus-sched/node-${name}`);
      } catch (platformError) {
        if (!platformError || platformError.code !== 'MODULE_NOT_FOUND') throw platformError;
      }
      throw MorpheusError.of(
        'UNSUPPORTED_PLATFORM',
        `@morpheus-sched/node: the native addon ${file} is missing, and so is the package @morpheus-sched/node-${name} ` +
          `(this package was built without ${name}; ` +
          'build it with `npm run build` in sdk-node/)',
      );
    }
    throw error;
  }
}

module.exports = load();
