// SPDX-License-Identifier: Apache-2.0 OR MIT
// Compiled with `tsc --noEmit` by test/types.test.js: the declarations a TypeScript user relies on.
import {
  checkpoint,
  checkpointEvery,
  critical,
  errors,
  initWorker,
  notices,
  MorpheusError,
  shouldYield,
  yieldRequested,
  type ErrorCodeName,
  type Worker,
} from '@morpheus-sched/node';

export async function handler(): Promise<number> {
  using worker: Worker = initWorker({ escapable: false, priority: -1 });
  const slot: number | null = worker.slot;
  const reattached: number = worker.reattachments;
  const detail: string | null = worker.detachDetail;
  const waiting: boolean = worker.waitingForScheduler;
  notices.on('notice', (notice) => {
    const level: 'info' | 'warning' = notice.level;
    const message: string = notice.message;
    void level, message;
  });
  void reattached, detail, waiting;
  const tick = checkpointEvery(100);
  let n = 0;
  for (let i = 0; i < 1000; i++) {
    if (await checkpoint()) n++;
    if (tick.sync() || shouldYield() || yieldRequested()) n++;
    await tick();
  }
  const depth: number = critical(() => 1);
  const later: Promise<string> = critical(async () => 'x');
  try {
    worker.priority = 3;
  } catch (error) {
    if (error instanceof errors.InvalidArgumentError) {
      const code: 'INVALID_ARGUMENT' = error.code;
      void code;
    }
    if (error instanceof MorpheusError) {
      const code: ErrorCodeName = error.code;
      void code;
    }
  }
  void later;
  return n + depth + (slot ?? 0);
}

// @ts-expect-error: priority is a number
initWorker({ priority: 'high' });
// @ts-expect-error: no such error class
void errors.NoSuchError;
