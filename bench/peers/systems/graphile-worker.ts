/**
 * graphile-worker on PostgreSQL (a fresh database per run): jobs with `runAt`, `addJobs` for
 * batches, a runner of concurrency 50, crontab items for recurring jobs (minute granularity
 * only). Tuned as its docs advise for latency and throughput: `pollInterval` 100 ms instead
 * of 2 s (LISTEN/NOTIFY wakes it only for jobs due now; future jobs are found by polling),
 * a local queue of `concurrency + 1` (the docs' starting point) and batched completions
 * (`completeJobBatchDelay` 0), a pool of `concurrency + 2` connections.
 */
import pg from 'pg';
import { Logger, makeWorkerUtils, parseCronItems, run, type Runner, type WorkerUtils } from 'graphile-worker';
import { createFreshDatabase, databaseSizeBytes, wallClock, type FreshDatabase } from '../services.js';
import {
  isPayload, payloadOf, workerConcurrency,
  type AttachInfo, type BenchJob, type HandlerStart, type RecurringPlan, type SystemAdapter,
} from '../types.js';

const task = 'bench';
const pollIntervalMs = 100;

/** Warnings and errors go to stderr; graphile-worker's info lines would drown the progress output. */
const quietLogger = new Logger(() => (level, message) => {
  if (level === 'error' || level === 'warning') process.stderr.write(`graphile-worker ${level}: ${message}\n`);
});

export class GraphileWorkerAdapter implements SystemAdapter {
  readonly name = 'graphile-worker' as const;
  readonly settings = `graphile-worker 0.17.3, PostgreSQL 15; concurrency ${workerConcurrency}, pollInterval ${pollIntervalMs} ms ` +
    `(default 2000), localQueue size ${workerConcurrency + 1}, completeJobBatchDelay 0, maxPoolSize ${workerConcurrency + 2}; ` +
    'addJobs for batches, crontab items for recurring';
  readonly supportsEverySecond = false;
  private readonly attached: AttachInfo | undefined;
  private database: FreshDatabase | undefined;
  private url = '';
  private pool: pg.Pool | undefined;
  private utils: WorkerUtils | undefined;
  private runner: Runner | undefined;
  private recurringCount = 0;

  constructor(attached?: AttachInfo) {
    this.attached = attached;
  }

  async start(): Promise<void> {
    if (this.attached === undefined) {
      this.database = await createFreshDatabase('graphile');
      this.url = this.database.url;
    } else {
      this.url = this.attached['url']!;
    }
    // Our own pool, so a terminated backend (another engineer's chaos run restarting PostgreSQL) is
    // logged instead of crashing the harness with an unhandled 'error' event.
    this.pool = new pg.Pool({ connectionString: this.url, max: workerConcurrency + 2 });
    const logPoolError = (error: Error): void => {
      process.stderr.write(`graphile-worker pool error: ${error.message}\n`);
    };
    this.pool.on('error', logPoolError);
    this.pool.on('connect', (client) => client.on('error', logPoolError));
    this.utils = await makeWorkerUtils({ pgPool: this.pool, logger: quietLogger });
    await this.utils.migrate();
  }

  attachInfo(): AttachInfo {
    return { url: this.url };
  }

  async startWorkers(onStart: HandlerStart): Promise<void> {
    const cronItems = parseCronItems(Array.from({ length: this.recurringCount }, (_, index) => ({
      task, match: '* * * * *', identifier: `recurring-${index}`, payload: { r: index }, options: { backfillPeriod: 0 },
    })));
    this.runner = await run({
      pgPool: this.requirePool(),
      concurrency: workerConcurrency,
      pollInterval: pollIntervalMs,
      noHandleSignals: true,
      logger: quietLogger,
      parsedCronItems: cronItems,
      preset: { worker: { localQueue: { size: workerConcurrency + 1 }, completeJobBatchDelay: 0 } },
      taskList: {
        [task]: async (payload) => {
          const handledAtMs = wallClock.nowMs();
          if (isPayload(payload)) {
            onStart({ index: payload.i, dueAtMs: payload.due, handledAtMs });
            return;
          }
          const cron = (payload as { _cron?: { ts?: string }; r?: number });
          if (cron._cron?.ts === undefined) throw new Error(`unexpected payload ${JSON.stringify(payload)}`);
          onStart({ index: -1, dueAtMs: Date.parse(cron._cron.ts), handledAtMs, recurringKey: `recurring-${cron.r}` });
        },
      },
    });
  }

  async stopWorkers(): Promise<void> {
    await this.runner?.stop();
    this.runner = undefined;
  }

  async createOne(job: BenchJob): Promise<string> {
    const added = await this.requireUtils().addJob(task, payloadOf(job), { runAt: new Date(job.dueAtMs), maxAttempts: 1 });
    return added.id;
  }

  async createMany(jobs: readonly BenchJob[]): Promise<string[]> {
    const added = await this.requireUtils().addJobs(jobs.map((job) => ({
      identifier: task, payload: payloadOf(job), runAt: new Date(job.dueAtMs), maxAttempts: 1,
    })));
    return added.map((job) => job.id);
  }

  async cancel(id: string): Promise<void> {
    // The docs' way to cancel a job that is not running: mark it completed, which deletes it.
    await this.requireUtils().completeJobs([id]);
  }

  async createRecurring(plan: RecurringPlan): Promise<void> {
    if (plan.period !== 'minute') throw new Error('graphile-worker crontab has minute granularity');
    // Crontab items belong to the runner: they take effect in startWorkers.
    this.recurringCount = plan.count;
  }

  async storeSizeBytes(): Promise<number> {
    if (this.database === undefined) throw new Error('attached adapters do not measure the store');
    return databaseSizeBytes(this.database.name);
  }

  async stop(): Promise<void> {
    await this.stopWorkers();
    await this.utils?.release();
    await this.pool?.end();
    await this.database?.drop();
  }

  private requirePool(): pg.Pool {
    if (this.pool === undefined) throw new Error('graphile-worker is not started');
    return this.pool;
  }

  private requireUtils(): WorkerUtils {
    if (this.utils === undefined) throw new Error('graphile-worker is not started');
    return this.utils;
  }
}
