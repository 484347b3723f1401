/**
 * pg-boss 10 on PostgreSQL (a fresh database per run): jobs with `startAfter`, `insert` for
 * batches, one `work()` fetching batches of 50 (pg-boss 10 has no per-worker concurrency
 * setting: a batch handler is how it runs 50 jobs at once), polling every 0.5 s, the
 * smallest interval it accepts (its workers sleep a full interval after each fetch; there
 * is no wake-up for due jobs). Recurring jobs are `schedule()`s, one per queue (pg-boss 10
 * keys a schedule by queue name), with the cron monitor and its relay worker at their
 * 1 s minimum instead of 30 s / 5 s.
 */
import { randomUUID } from 'node:crypto';
import PgBoss from 'pg-boss';
import { createFreshDatabase, databaseSizeBytes, wallClock, type FreshDatabase } from '../services.js';
import {
  isPayload, payloadOf, workerConcurrency,
  type AttachInfo, type BenchJob, type HandlerStart, type RecurringPlan, type SystemAdapter,
} from '../types.js';

const queue = 'bench';
const pollingIntervalSeconds = 0.5;
const insertMax = 1_000;
const minuteMs = 60_000;

export class PgBossAdapter implements SystemAdapter {
  readonly name = 'pg-boss' as const;
  readonly settings = `pg-boss 10.4.2, PostgreSQL 15; work() with batchSize ${workerConcurrency} (its concurrency), ` +
    `pollingIntervalSeconds ${pollingIntervalSeconds} (minimum; default 2); insert() for batches; ` +
    'schedule() per queue with cronMonitorIntervalSeconds 1 and cronWorkerIntervalSeconds 1';
  readonly supportsEverySecond = false;
  private readonly attached: AttachInfo | undefined;
  private database: FreshDatabase | undefined;
  private url = '';
  private boss: PgBoss | undefined;
  private readonly recurringQueues: string[] = [];

  constructor(attached?: AttachInfo) {
    this.attached = attached;
  }

  async start(): Promise<void> {
    if (this.attached === undefined) {
      this.database = await createFreshDatabase('pgboss');
      this.url = this.database.url;
    } else {
      this.url = this.attached['url']!;
    }
    this.boss = new PgBoss({
      connectionString: this.url,
      schedule: true,
      cronMonitorIntervalSeconds: 1,
      cronWorkerIntervalSeconds: 1,
      retryLimit: 0,
    });
    this.boss.on('error', (error: Error) => process.stderr.write(`pg-boss error: ${error.message}\n`));
    await this.boss.start();
    if (this.attached === undefined) await this.boss.createQueue(queue);
  }

  attachInfo(): AttachInfo {
    return { url: this.url };
  }

  async startWorkers(onStart: HandlerStart): Promise<void> {
    const boss = this.requireBoss();
    await boss.work<unknown>(queue, { batchSize: workerConcurrency, pollingIntervalSeconds }, async (jobs) => {
      const handledAtMs = wallClock.nowMs();
      for (const job of jobs) {
        if (!isPayload(job.data)) throw new Error(`unexpected payload ${JSON.stringify(job.data)}`);
        onStart({ index: job.data.i, dueAtMs: job.data.due, handledAtMs });
      }
    });
    for (const name of this.recurringQueues) {
      await boss.work<unknown>(name, { pollingIntervalSeconds, includeMetadata: true }, async (jobs) => {
        const handledAtMs = wallClock.nowMs();
        for (const job of jobs) {
          // The relay creates the job within the minute it stands for; its creation time names that minute.
          const dueAtMs = Math.floor(job.createdOn.getTime() / minuteMs) * minuteMs;
          onStart({ index: -1, dueAtMs, handledAtMs, recurringKey: name });
        }
      });
    }
  }

  async stopWorkers(): Promise<void> {
    const boss = this.requireBoss();
    await boss.offWork(queue);
    for (const name of this.recurringQueues) await boss.offWork(name);
  }

  async createOne(job: BenchJob): Promise<string> {
    const id = await this.requireBoss().send(queue, payloadOf(job), { startAfter: new Date(job.dueAtMs) });
    if (id === null) throw new Error('pg-boss send answered no id');
    return id;
  }

  async createMany(jobs: readonly BenchJob[]): Promise<string[]> {
    const ids: string[] = [];
    for (let first = 0; first < jobs.length; first += insertMax) {
      const inserts = jobs.slice(first, first + insertMax).map((job) => ({
        id: randomUUID(), name: queue, data: payloadOf(job), startAfter: new Date(job.dueAtMs),
      }));
      await this.requireBoss().insert(inserts);
      for (const insert of inserts) ids.push(insert.id);
    }
    return ids;
  }

  async cancel(id: string): Promise<void> {
    await this.requireBoss().cancel(queue, id);
  }

  async createRecurring(plan: RecurringPlan): Promise<void> {
    if (plan.period !== 'minute') throw new Error('pg-boss schedules have minute granularity');
    const boss = this.requireBoss();
    for (let index = 0; index < plan.count; index += 1) {
      const name = `recurring-${index}`;
      await boss.createQueue(name);
      await boss.schedule(name, '* * * * *', { r: index }, { tz: 'UTC' });
      this.recurringQueues.push(name);
    }
  }

  async storeSizeBytes(): Promise<number> {
    if (this.database === undefined) throw new Error('attached adapters do not measure the store');
    return databaseSizeBytes(this.database.name);
  }

  async stop(): Promise<void> {
    await this.boss?.stop({ graceful: false, wait: true });
    await this.database?.drop();
  }

  private requireBoss(): PgBoss {
    if (this.boss === undefined) throw new Error('pg-boss is not started');
    return this.boss;
  }
}
