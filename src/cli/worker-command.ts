/**
 * `tickler worker --pool P --exec CMD`: a pull worker that runs a shell command per run (see
 * exec-handler.ts for the exit-code contract). SIGTERM or SIGINT stops leasing, lets running
 * commands finish for `--stop-timeout-s` (default 0), then sends them SIGTERM (SIGKILL 5 s
 * later), reports their outcomes and exits 0; a second signal kills them at once and exits 1,
 * and so does any exit with commands still running. With `--store
 * postgres://...` it leases and completes straight against the servers' database instead of
 * through `--url` (src/direct-worker/postgres-direct.ts), for the runs of `--team` (default: all).
 */
import { leaseAheadMsMax } from '../limits.js';
import { createLogger } from '../obs/log.js';
import { TicklerClient } from '../worker/client.js';
import { openPostgresWorkerApi } from '../direct-worker/open-postgres-worker-api.js';
import type { PostgresWorkerApi } from '../direct-worker/postgres-direct.js';
import { createWorker } from '../worker/worker.js';
import { createExecHandler, RunningCommands } from './exec-handler.js';
import { CliUsageError, integerIn } from './serve-options.js';

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
  /** postgres://...: straight to the servers' database instead of `--url`. */
  store?: string;
  /** With `--store`: lease only this team's runs. */
  team?: string;
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
lost or the run is cancelled, the child gets SIGTERM, then SIGKILL 5 s later.
On SIGTERM or SIGINT the worker stops leasing, and running commands get SIGTERM after
--stop-timeout-s (default 0: at once), SIGKILL 5 s later; their outcomes are reported
(a killed command's run is retried) and the worker exits 0. A second signal kills them at once.
--exec @payload runs each run's own command from its payload ({"exec": {"command", "shell",
"env", "cwd", "stdin", "timeout_s"}}, as tickler import writes it); the last 4 KiB of its
output are kept in the run's result (docs/migration.md).`;

export async function runExecWorker(flags: WorkerFlags, connection: { baseUrl: string; apiKey?: string }): Promise<void> {
  const concurrency = integerIn(flags.concurrency ?? '1', '--concurrency', 1, 1_000);
  const stopTimeoutS = integerIn(flags.stopTimeoutS ?? '0', '--stop-timeout-s', 0, 86_400);
  const leaseS = flags.leaseS === undefined ? undefined : integerIn(flags.leaseS, '--lease-s', 5, 900);
  const waitS = flags.waitS === undefined ? undefined : integerIn(flags.waitS, '--wait-s', 0, 60);
  const leaseAheadMs = flags.leaseAheadMs === undefined ? undefined : integerIn(flags.leaseAheadMs, '--lease-ahead-ms', 0, leaseAheadMsMax);
  if (flags.team !== undefined && flags.store === undefined) {
    throw new CliUsageError('--team scopes a worker straight to the database: give --store too');
  }
  if (flags.store !== undefined && !/^postgres(ql)?:\/\//.test(flags.store)) {
    throw new CliUsageError(`--store must be postgres://... (the servers' database), got ${JSON.stringify(flags.store)}`);
  }
  const running = new RunningCommands();
  let stopping = false;
  const logger = createLogger({ name: 'tickler-worker', ...(flags.logLevel === undefined ? {} : { level: flags.logLevel }) });
  const direct: PostgresWorkerApi | undefined = flags.store === undefined ? undefined
    : await openPostgresWorkerApi({ url: flags.store, ...(flags.team === undefined ? {} : { team: flags.team }), logger });
  const worker = createWorker({
    client: direct ?? new TicklerClient(connection),
    pool: flags.pool,
    concurrency,
    handler: createExecHandler({ command: flags.exec, pool: flags.pool, logger, running }),
    ...(leaseS === undefined ? {} : { leaseS }),
    ...(waitS === undefined ? {} : { waitS }),
    ...(leaseAheadMs === undefined ? {} : { leaseAheadMs }),
    ...(flags.workerId === undefined ? {} : { workerId: flags.workerId }),
    stopTimeoutMs: stopTimeoutS * 1_000,
    logger,
  });
  const stop = (): void => {
    if (!stopping) {
      stopping = true;
      void worker.stop();
      return;
    }
    running.signalAll('SIGKILL');
    process.exit(1);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  process.on('exit', () => running.signalAll('SIGKILL'));
  try {
    await worker.run();
  } finally {
    await direct?.close();
  }
}
