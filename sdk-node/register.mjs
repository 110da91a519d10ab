// SPDX-License-Identifier: Apache-2.0 OR MIT
// Preload for ESM: `node --import @morpheus-sched/node/register app.mjs` (see register.js).
import './register.js';
