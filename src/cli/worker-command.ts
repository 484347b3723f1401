/**
 * `tickler worker --pool P --exec CMD`: a pull worker that runs a shell command per run (see
 * exec-handler.ts for the exit-code contract). SIGTERM or SIGINT stops leasing, lets running
 * commands finish for `--stop-timeout-s`, then kills what is left, and exits 0.
 */
import { leaseAheadMsMax } from '../limits.js';
import { createLogger } from '../obs/log.js';
import { TicklerClient } from '../worker/client.js';
import { createWorker } from '../worker/worker.js';
import { createExecHandler } from './exec-handler.js';
import { integerIn } from './serve-options.js';

export interface WorkerFlags {
  pool: string;
  exec: string;
  concurrency?: string;
  leaseS?: string;
  waitS?: string;
  leaseAheadMs?: string;
  workerId?: string;
  stopTimeoutS?: string;
  logLevel?: string;
}

export const workerHelpText = `
Each run executes CMD with /bin/sh -c. The child gets the payload JSON on stdin and
TICKLER_RUN_ID (the idempotency key), TICKLER_JOB_ID, TICKLER_ATTEMPT, TICKLER_SCHEDULED_AT,
TICKLER_FIRE_AT and TICKLER_POOL in its environment. Its exit code is the outcome:
  0    succeeded
  75   temporary failure (EX_TEMPFAIL): failed, retried under the job's retry policy
  65   permanent failure (EX_DATAERR): failed_permanent, the run goes straight to the DLQ
  any other code (or death by a signal): failed, retried like 75
The last 4 KiB of the child's stderr are reported as the run's error. When the lease is
lost or the run is cancelled, the child gets SIGTERM, then SIGKILL 5 s later.`;

export function runExecWorker(flags: WorkerFlags, connection: { baseUrl: string; apiKey?: string }): Promise<void> {
  const concurrency = integerIn(flags.concurrency ?? '1', '--concurrency', 1, 1_000);
  const stopTimeoutS = flags.stopTimeoutS === undefined ? undefined : integerIn(flags.stopTimeoutS, '--stop-timeout-s', 0, 86_400);
  const worker = createWorker({
    client: new TicklerClient(connection),
    pool: flags.pool,
    concurrency,
    handler: createExecHandler({ command: flags.exec, pool: flags.pool }),
    ...(flags.leaseS === undefined ? {} : { leaseS: integerIn(flags.leaseS, '--lease-s', 5, 900) }),
    ...(flags.waitS === undefined ? {} : { waitS: integerIn(flags.waitS, '--wait-s', 0, 60) }),
    ...(flags.leaseAheadMs === undefined ? {} : { leaseAheadMs: integerIn(flags.leaseAheadMs, '--lease-ahead-ms', 0, leaseAheadMsMax) }),
    ...(flags.workerId === undefined ? {} : { workerId: flags.workerId }),
    ...(stopTimeoutS === undefined ? {} : { stopTimeoutMs: stopTimeoutS * 1_000 }),
    logger: createLogger({ name: 'tickler-worker', ...(flags.logLevel === undefined ? {} : { level: flags.logLevel }) }),
  });
  const stop = (): void => {
    void worker.stop();
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  return worker.run();
}
