// SPDX-License-Identifier: Apache-2.0 OR MIT
// ESM entry point: the same module instance as the CommonJS one (one fast-path state per thread).
import cjs from './index.js';

export const {
  ABI_MAJOR,
  ABI_MINOR,
  ESCAPABLE_DEFAULT,
  YIELD_PASSES,
  MorpheusError,
  errors,
  Region,
  Worker,
  attach,
  checkpoint,
  checkpointEvery,
  critical,
  criticalDepth,
  criticalEnter,
  criticalExit,
  currentWorker,
  initWorker,
  notices,
  setEscapable,
  setPriority,
  shouldYield,
  yieldRequested,
} = cjs;
export default cjs;
