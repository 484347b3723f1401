/**
 * tickler as a real `tickler serve` process (embedded SQLite, or PostgreSQL with `--store`),
 * driven over HTTP through the SDK's TicklerClient, with SDK workers (`createWorker`) in the
 * harness process pulling with one long-poll per worker: over HTTP, or on PostgreSQL also
 * straight to the database (`tickler-postgres-direct`: the SDK's `PostgresWorkerApi`, as
 * graphile-worker's and pg-boss's workers speak to PostgreSQL). Nothing is tuned: the server runs
 * its defaults, the worker its defaults (`wait_s` 20), both as a user would start them.
 * W1's one-at-a-time creates are measured twice: with a plain client (one `POST /v1/jobs`
 * per call) and with a second client that has the SDK's `coalesceCreates` on.
 */
import { batchJobsMax } from '../../../src/limits.js';
import type { WorkerLogger } from '../../../src/worker/run-attempt.js';
import type { Worker } from '../../../src/worker/worker.js';
import type { JobCreateRequest } from '../../../src/worker/wire.js';
import { makeTempDir, startBenchServer, type BenchServer } from '../../server-process.js';
import { createWorker, openPostgresWorkerApi, sdkOrigin, TicklerClient, type PostgresWorkerApi } from './tickler-sdk.js';
import type { CoalescedCreates } from '../workloads/lifecycle.js';
import { createFreshDatabase, wallClock, type FreshDatabase } from '../services.js';
import {
  isPayload, payloadOf, workerConcurrency,
  type AttachInfo, type BenchJob, type HandlerStart, type RecurringPlan, type SchedulerServer, type SystemAdapter,
  type WorkerStartOptions,
} from '../types.js';

const pool = 'peers';

/** Worker-side problems (lease errors while the server is down, failed completions), counted. */
export interface ProblemCount {
  count: number;
  samples: string[];
}

/**
 * The worker's `leaseAheadMs` and `holdAheadMax`: runs already written ahead (the scheduler
 * writes a one-shot herd or dense stream 10 s ahead) are leased up to 8 s before they are ready
 * and held for their time, up to a whole W4 herd. 8 s leaves PostgreSQL the time to write and
 * lease 50,000 runs (~9 s for both on this machine; at 3 s W4's lag p99 was 3.3–5.6 s on it,
 * while the embedded store needs ~3 s).
 */
const leaseAheadMs = 8_000;
const holdAheadMax = 50_000;

export class TicklerAdapter implements SystemAdapter, CoalescedCreates {
  readonly name;
  readonly settings: string;
  readonly supportsEverySecond = true;
  readonly problems: ProblemCount = { count: 0, samples: [] };
  private readonly storeKind: 'sqlite' | 'postgres';
  private readonly attached: AttachInfo | undefined;
  private process: BenchServer | undefined;
  private dataDir: { dir: string; remove(): void } | undefined;
  private database: FreshDatabase | undefined;
  private baseUrl = '';
  private client: TicklerClient | undefined;
  /** The same server through a client with `coalesceCreates` on: W1's coalesced figure. */
  private coalescingClient: TicklerClient | undefined;
  private worker: Worker | undefined;
  /** Workers straight to PostgreSQL: their connection to the store, open while they run. */
  private workerApi: PostgresWorkerApi | undefined;
  private readonly workersDirect: boolean;
  server: SchedulerServer | undefined;

  private readonly cpuProfileDir: string | undefined;

  constructor(storeKind: 'sqlite' | 'postgres', options: { attached?: AttachInfo; cpuProfileDir?: string; workers?: 'http' | 'direct' } = {}) {
    this.storeKind = storeKind;
    this.cpuProfileDir = options.cpuProfileDir;
    const attached = options.attached;
    this.workersDirect = options.workers === 'direct';
    if (this.workersDirect && storeKind !== 'postgres') throw new Error('workers straight to the store need PostgreSQL');
    this.name = storeKind === 'sqlite' ? 'tickler-sqlite' as const
      : this.workersDirect ? 'tickler-postgres-direct' as const : 'tickler-postgres' as const;
    this.attached = attached;
    this.settings = `tickler serve defaults (${storeKind === 'sqlite' ? 'embedded SQLite' : 'PostgreSQL 15'}), ` +
      'started as npm start starts it (bin/tickler.js, from the dist/ build that npm run bench:peers makes first); ' +
      `${sdkOrigin}: SDK createWorker, concurrency ${workerConcurrency}, prefetch ${workerConcurrency} (as graphile-worker's local ` +
      'queue), long-poll wait_s 20 with two requests parked while the pool is drained (the SDK default, longPolls 2), ' +
      `leaseAheadMs ${leaseAheadMs} and holdAheadMax ${holdAheadMax} (runs already written ahead are leased up to that ` +
      'long before they are ready, on hold places of their own beyond the slots and prefetch, and started at their time ' +
      'from a local timer, as docs/tuning.md advises for a herd; not on W5, whose cancels must stop a job until its due time, ' +
      'while a run leased ahead is its worker\'s), completions in batches (one in flight, a small one lingering up to ' +
      '10 ms after the last: the SDK defaults), ' +
      (this.workersDirect
        ? 'straight to PostgreSQL (the SDK\'s openPostgresWorkerApi on the server\'s database, 4 connections; no HTTP hop); '
        : 'over HTTP; ') +
      'W1 one at a time twice: plain createJob (a POST /v1/jobs each, ' +
      'single_per_s) and with TicklerClient coalesceCreates: true and createJobId (concurrent calls share POST /v1/jobs:batch ' +
      'requests answered with ids, single_coalesced_per_s); batches with answer "id" (each item answers its job_id, not the whole job); W5 cancels through TicklerClient coalesceCancels: true (concurrent cancelJob calls share POST /v1/jobs:cancel requests); W6 jobs with overlap allow and tolerance_s 0' +
      (storeKind === 'postgres' ? '; --node-id peers-node, the same across the W8 restart (as the README advises)' : '');
  }

  async start(): Promise<void> {
    if (this.attached !== undefined) {
      this.connect(this.attached['baseUrl']!);
      return;
    }
    this.dataDir = makeTempDir('tickler-peers-');
    if (this.storeKind === 'postgres') this.database = await createFreshDatabase('tickler');
    // On PostgreSQL a stable --node-id, as the README advises for scheduler nodes: a node
    // restarted under the same id takes its shard leases back at once (W8) instead of waiting
    // out the 10 s TTL of the leases its killed predecessor held under another id.
    const storeArgs = this.database === undefined ? [] : ['--store', this.database.url, '--node-id', 'peers-node'];
    const profiling = this.cpuProfileDir === undefined ? {} : { cpuProfileDir: this.cpuProfileDir };
    this.process = await startBenchServer({ dataDir: this.dataDir.dir, args: storeArgs, ...profiling });
    this.connect(this.process.url);
    const port = new URL(this.process.url).port;
    const dataDir = this.dataDir.dir;
    // The restart keeps the port, so workers holding the old base URL reconnect by themselves.
    const restartArgs = [...storeArgs, '--port', port];
    this.server = {
      pid: () => this.process!.pid,
      rssBytes: () => this.process!.rssBytes(),
      kill: () => this.process!.kill(),
      restart: async () => {
        this.process = await startBenchServer({ dataDir, args: restartArgs, ...profiling });
      },
    };
  }

  private connect(baseUrl: string): void {
    this.baseUrl = baseUrl;
    this.client = new TicklerClient({ baseUrl, requestTimeoutMs: 600_000 });
    this.coalescingClient = new TicklerClient({ baseUrl, requestTimeoutMs: 600_000, coalesceCreates: true, coalesceCancels: true });
  }

  attachInfo(): AttachInfo {
    return { baseUrl: this.baseUrl, ...(this.database === undefined ? {} : { databaseUrl: this.database.url }) };
  }

  async startWorkers(onStart: HandlerStart, options: WorkerStartOptions = {}): Promise<void> {
    const note = (level: string) => (details: object, message: string): void => {
      this.problems.count += 1;
      if (this.problems.samples.length < 3) this.problems.samples.push(`${level}: ${message} ${JSON.stringify(details).slice(0, 200)}`);
    };
    const logger: WorkerLogger = { debug: () => undefined, info: () => undefined, warn: note('warn'), error: note('error') };
    if (this.workersDirect) this.workerApi = await openPostgresWorkerApi({ url: this.databaseUrl() });
    this.worker = createWorker({
      client: this.workerApi ?? this.requireClient(),
      pool,
      concurrency: workerConcurrency,
      prefetch: workerConcurrency,
      // W5 cancels up to the due time: a run leased ahead is its worker's (docs/tuning.md, `leaseAheadMs`).
      ...(options.cancelsUntilDue === true ? {} : { leaseAheadMs, holdAheadMax }),
      logger,
      handler: (run) => {
        const handledAtMs = wallClock.nowMs();
        if (isPayload(run.payload)) {
          onStart({ index: run.payload.i, dueAtMs: run.payload.due, handledAtMs });
        } else {
          onStart({ index: -1, dueAtMs: Date.parse(run.scheduled_at), handledAtMs, recurringKey: run.job_id });
        }
      },
    });
    this.worker.start();
  }

  async stopWorkers(): Promise<void> {
    await this.worker?.stop({ timeoutMs: 5_000 });
    this.worker = undefined;
    await this.workerApi?.close();
    this.workerApi = undefined;
  }

  async createOne(job: BenchJob): Promise<string> {
    return (await this.requireClient().createJob(oneShotOf(job))).job_id;
  }

  async createOneCoalesced(job: BenchJob): Promise<string> {
    if (this.coalescingClient === undefined) throw new Error(`${this.name} is not started`);
    return this.coalescingClient.createJobId(oneShotOf(job));
  }

  /** Requests and creates of the coalescing client so far (W1's note shows creates per request). */
  coalescedCreateStats(): { requests: number; items: number } {
    return this.coalescingClient?.coalescedCreateStats ?? { requests: 0, items: 0 };
  }

  async createMany(jobs: readonly BenchJob[]): Promise<string[]> {
    const ids: string[] = [];
    for (let first = 0; first < jobs.length; first += batchJobsMax) {
      // Only the ids are kept, so only the ids are asked for (`answer: "id"`), as graphile-worker's
      // addJobs and BullMQ's addBulk callers get their ids.
      const { results } = await this.requireClient().batchCreateJobIds(jobs.slice(first, first + batchJobsMax).map(oneShotOf));
      for (const result of results) {
        if (!('job_id' in result)) throw new Error(`batch create failed: ${JSON.stringify(result)}`);
        ids.push(result.job_id);
      }
    }
    return ids;
  }

  /** W5's 64 callers cancel one job each through the SDK's coalesceCancels (POST /v1/jobs:cancel). */
  async cancel(id: string): Promise<void> {
    if (this.coalescingClient === undefined) throw new Error(`${this.name} is not started`);
    await this.coalescingClient.cancelJob(id);
  }

  async createRecurring(plan: RecurringPlan): Promise<void> {
    // tolerance_s 0: no jitter, so every occurrence is due exactly on its scheduled second or minute.
    // overlap allow: W6 wants every occurrence started, as the peers (which have no overlap
    // policy) start them; tickler's default, forbid, would record an occurrence that fires
    // while the previous run still waits for a worker as skipped_overlap instead.
    const cron = plan.period === 'second' ? '* * * * * *' : '* * * * *';
    const specs: JobCreateRequest[] = Array.from({ length: plan.count }, (_, index) => ({
      key: `recurring-${index}`, schedule: { cron, tz: 'UTC' }, pool, tolerance_s: 0, overlap: 'allow', payload: { r: index },
    }));
    for (let first = 0; first < specs.length; first += batchJobsMax) {
      const { results } = await this.requireClient().batchCreateJobs(specs.slice(first, first + batchJobsMax));
      const failed = results.find((result) => result.status !== 201 && result.status !== 200);
      if (failed !== undefined) throw new Error(`recurring create failed: ${JSON.stringify(failed)}`);
    }
  }

  async storeSizeBytes(): Promise<number> {
    if (this.database !== undefined) {
      const { databaseSizeBytes } = await import('../services.js');
      return databaseSizeBytes(this.database.name);
    }
    const { statSync, readdirSync } = await import('node:fs');
    const { join } = await import('node:path');
    const dir = this.dataDir!.dir;
    return readdirSync(dir).reduce((total, name) => total + statSync(join(dir, name)).size, 0);
  }

  async stop(): Promise<void> {
    await this.stopWorkers();
    if (this.process !== undefined) {
      const code = await this.process.stop();
      if (code !== 0) process.stderr.write(`tickler serve exited with ${code}:\n${this.process.stderrTail()}\n`);
    }
    await this.database?.drop();
    this.dataDir?.remove();
  }

  private databaseUrl(): string {
    const url = this.database?.url ?? this.attached?.['databaseUrl'];
    if (url === undefined) throw new Error(`${this.name} has no database`);
    return url;
  }

  private requireClient(): TicklerClient {
    if (this.client === undefined) throw new Error(`${this.name} is not started`);
    return this.client;
  }
}

function oneShotOf(job: BenchJob): JobCreateRequest {
  return { schedule: { at: new Date(job.dueAtMs).toISOString() }, pool, payload: payloadOf(job) };
}
