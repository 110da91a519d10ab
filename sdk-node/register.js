// SPDX-License-Identifier: Apache-2.0 OR MIT
// Preload: `node --require @morpheus-sched/node/register app.js` registers the event loop's thread
// before the application runs (region and agent from the environment, spec/SCB.md §1.2; detached
// when there is no scheduler). A registration the scheduler refuses is reported on stderr and the
// process runs detached: a scheduler outage must not take the service down with it.
'use strict';
const morpheus = require('./lib/index.js');

if (morpheus.currentWorker() === null) {
  try {
    morpheus.initWorker();
  } catch (error) {
    process.emitWarning(`@morpheus-sched/node/register: running detached: ${error.message}`, {
      type: 'MorpheusWarning',
      code: error.code,
    });
    morpheus.initWorker({ detached: true });
  }
}
