/**
 * BullMQ on Redis: delayed jobs (`delay` = due − now at add time), one Worker of concurrency
 * 50, job schedulers for recurring jobs. Tuned for latency as BullMQ's maintainers advise:
 * completed jobs removed at once (no growing completed set), and Redis `hz 100` for the run,
 * because a worker waits for the next delayed job in a blocking pop whose timeout Redis only
 * checks `hz` times a second (default 10, i.e. up to 100 ms late). The original `hz` is put
 * back when the run stops.
 *
 * Two Redis setups: `bullmq` on the machine's shared Redis (`--appendonly no --save ""`: it
 * keeps nothing on disk, so an acknowledged add is lost if Redis dies), and `bullmq-aof` on a
 * Redis of its own that fsyncs every write before answering (durable-redis.ts), the durability
 * tickler answers with.
 */
import { randomBytes } from 'node:crypto';
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { durableRedisDescription, durableRedisHost, startDurableRedis, type DurableRedis } from '../durable-redis.js';
import { redisHost, redisPort, wallClock } from '../services.js';
import {
  isPayload, payloadOf, workerConcurrency,
  type AttachInfo, type BenchJob, type HandlerStart, type RecurringPlan, type SystemAdapter,
} from '../types.js';

const redisHzForRun = '100';
const bulkAddMax = 1_000;

/** Where BullMQ's Redis is: the machine's shared one, or one of the run's own that fsyncs every write. */
export type BullmqRedis = 'shared' | 'aof';

export class BullmqAdapter implements SystemAdapter {
  readonly name: 'bullmq' | 'bullmq-aof';
  readonly settings: string;
  readonly supportsEverySecond = true;
  private readonly attached: AttachInfo | undefined;
  private durableRedis: DurableRedis | undefined;
  private address = { host: redisHost, port: redisPort };
  private queueName = '';
  private queue: Queue | undefined;
  private worker: Worker | undefined;
  private redis: Redis | undefined;
  private hzBefore: string | undefined;
  private memoryBaselineBytes = 0;

  constructor(attached?: AttachInfo, redisKind: BullmqRedis = 'shared') {
    this.attached = attached;
    this.name = redisKind === 'aof' ? 'bullmq-aof' : 'bullmq';
    const redis = redisKind === 'aof'
      ? `a Redis 7 of its own (${durableRedisDescription}: every write fsynced before its answer)`
      : 'the machine\'s Redis 7 (appendonly no, no snapshots: nothing on disk)';
    this.settings = `BullMQ 6.7.0 on ${redis}, hz 100 (default 10); Worker concurrency ${workerConcurrency}; ` +
      'removeOnComplete; delayed jobs via `delay`, addBulk for batches, job schedulers for recurring';
  }

  async start(): Promise<void> {
    this.queueName = this.attached?.['queue'] ?? `peers-${randomBytes(4).toString('hex')}`;
    if (this.name === 'bullmq-aof') {
      if (this.attached === undefined) {
        this.durableRedis = await startDurableRedis();
        this.address = { host: durableRedisHost, port: this.durableRedis.port };
      } else {
        this.address = { host: durableRedisHost, port: Number(this.attached['port']) };
      }
    }
    this.redis = new Redis(this.connectionOptions());
    this.queue = new Queue(this.queueName, {
      connection: this.connectionOptions(),
      defaultJobOptions: { removeOnComplete: true, removeOnFail: true },
    });
    this.queue.on('error', (error) => process.stderr.write(`bullmq queue error: ${error.message}\n`));
    this.redis.on('error', (error) => process.stderr.write(`redis error: ${error.message}\n`));
    await this.queue.waitUntilReady();
    if (this.attached !== undefined) return;
    const hz = await this.redis.config('GET', 'hz') as string[];
    this.hzBefore = hz[1];
    await this.redis.config('SET', 'hz', redisHzForRun);
    this.memoryBaselineBytes = await this.usedMemoryBytes();
  }

  attachInfo(): AttachInfo {
    return { queue: this.queueName, port: String(this.address.port) };
  }

  async startWorkers(onStart: HandlerStart): Promise<void> {
    this.worker = new Worker(this.queueName, async (job) => {
      const handledAtMs = wallClock.nowMs();
      if (isPayload(job.data)) {
        onStart({ index: job.data.i, dueAtMs: job.data.due, handledAtMs });
      } else {
        // A scheduler's job id is `repeat:<scheduler>:<occurrence ms>` (job.delay reads 0 once promoted).
        const occurrence = /:(\d+)$/.exec(job.id ?? '');
        if (occurrence === null) throw new Error(`scheduler job id ${job.id} names no occurrence`);
        onStart({ index: -1, dueAtMs: Number(occurrence[1]), handledAtMs, recurringKey: String(job.repeatJobKey ?? job.name) });
      }
    }, { connection: this.connectionOptions(), concurrency: workerConcurrency, removeOnComplete: { count: 0 }, removeOnFail: { count: 0 } });
    this.worker.on('error', (error) => process.stderr.write(`bullmq worker error: ${error.message}\n`));
    await this.worker.waitUntilReady();
  }

  async stopWorkers(): Promise<void> {
    await this.worker?.close();
    this.worker = undefined;
  }

  async createOne(job: BenchJob): Promise<string> {
    const added = await this.requireQueue().add('job', payloadOf(job), { delay: delayOf(job), jobId: `j${job.index}` });
    return added.id!;
  }

  async createMany(jobs: readonly BenchJob[]): Promise<string[]> {
    const ids: string[] = [];
    for (let first = 0; first < jobs.length; first += bulkAddMax) {
      const added = await this.requireQueue().addBulk(jobs.slice(first, first + bulkAddMax).map((job) => ({
        name: 'job', data: payloadOf(job), opts: { delay: delayOf(job), jobId: `j${job.index}` },
      })));
      for (const job of added) ids.push(job.id!);
    }
    return ids;
  }

  async cancel(id: string): Promise<void> {
    const removed = await this.requireQueue().remove(id);
    if (removed !== 1) throw new Error(`bullmq could not remove job ${id} (locked or gone)`);
  }

  async createRecurring(plan: RecurringPlan): Promise<void> {
    for (let index = 0; index < plan.count; index += 1) {
      const repeat = plan.period === 'second' ? { pattern: '* * * * * *' } : { pattern: '0 * * * * *' };
      await this.requireQueue().upsertJobScheduler(`recurring-${index}`, repeat, { name: `recurring-${index}`, data: { r: index } });
    }
  }

  async storeSizeBytes(): Promise<number> {
    return (await this.usedMemoryBytes()) - this.memoryBaselineBytes;
  }

  private async usedMemoryBytes(): Promise<number> {
    const info = await this.redis!.info('memory');
    const match = /^used_memory:(\d+)/m.exec(info);
    if (match === null) throw new Error('INFO memory has no used_memory');
    return Number(match[1]);
  }

  async stop(): Promise<void> {
    await this.stopWorkers();
    if (this.attached === undefined) {
      await this.queue?.obliterate({ force: true });
      if (this.hzBefore !== undefined) await this.redis?.config('SET', 'hz', this.hzBefore);
    }
    await this.queue?.close();
    this.redis?.disconnect();
    await this.durableRedis?.stop();
    this.durableRedis = undefined;
  }

  private connectionOptions(): { host: string; port: number; maxRetriesPerRequest: null } {
    return { ...this.address, maxRetriesPerRequest: null };
  }

  private requireQueue(): Queue {
    if (this.queue === undefined) throw new Error('bullmq is not started');
    return this.queue;
  }
}

function delayOf(job: BenchJob): number {
  return Math.max(0, job.dueAtMs - wallClock.nowMs());
}
