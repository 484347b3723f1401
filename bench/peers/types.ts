/**
 * What every system under test offers the side-by-side workloads: create one job or many,
 * cancel one, declare recurring jobs, run workers whose handler reports each start, and
 * measure its scheduler's memory and its store's size. One adapter per system hides how
 * (HTTP to a `tickler serve` process, BullMQ on Redis, graphile-worker or pg-boss on
 * PostgreSQL), so the workloads are written once and every system runs the same code path.
 */

/** A one-shot job of a workload: its index within the workload and the instant it is due. */
export interface BenchJob {
  readonly index: number;
  readonly dueAtMs: number;
}

/**
 * Called at the very start of a handler, before anything else runs in it. `dueAtMs` is the
 * due time the job carries (its payload for one-shots, the occurrence's scheduled time for
 * recurring jobs); `handledAtMs` is `Date.now()` read in the handler, the one clock of the run.
 */
export type HandlerStart = (start: { index: number; dueAtMs: number; handledAtMs: number; recurringKey?: string }) => void;

export interface RecurringPlan {
  /** How many recurring jobs. */
  count: number;
  /** `second` only where the system supports it (`supportsEverySecond`). */
  period: 'second' | 'minute';
}

/** What a child process needs to attach workers to a system another process started. */
export type AttachInfo = Record<string, string>;

/** A scheduling process of its own (tickler's server): measured and killed from outside. */
export interface SchedulerServer {
  pid(): number;
  rssBytes(): number;
  /** kill -9. */
  kill(): Promise<void>;
  /** Starts it again on the same store and address, so workers reconnect on their own. */
  restart(): Promise<void>;
}

/** What a workload needs of the workers beyond running its handlers. */
export interface WorkerStartOptions {
  /**
   * A cancel acknowledged before a job's due time must stop it (W5). A system whose workers
   * take jobs before their time (tickler's `leaseAheadMs`: a run leased ahead is its worker's)
   * starts its workers without that.
   */
  cancelsUntilDue?: boolean;
}

export interface SystemAdapter {
  readonly name: SystemName;
  /** How the system is configured for low latency, in one line, for the report. */
  readonly settings: string;
  readonly supportsEverySecond: boolean;
  /** Brings up the system's store and server (if any); no workers yet. */
  start(): Promise<void>;
  attachInfo(): AttachInfo;
  /** Starts workers with a total concurrency of `workerConcurrency` in this process. */
  startWorkers(onStart: HandlerStart, options?: WorkerStartOptions): Promise<void>;
  stopWorkers(): Promise<void>;
  /** Creates one job; answers the id `cancel` takes. */
  createOne(job: BenchJob): Promise<string>;
  /** Creates jobs in as few calls as the system allows; answers their ids in order. */
  createMany(jobs: readonly BenchJob[]): Promise<string[]>;
  cancel(id: string): Promise<void>;
  /** Declares recurring jobs; for graphile-worker they take effect when workers start. */
  createRecurring(plan: RecurringPlan): Promise<void>;
  /** Bytes the store holds for this run (Redis memory or the database's size). */
  storeSizeBytes(): Promise<number>;
  /** tickler only: its server schedules; the peers schedule inside their worker processes. */
  readonly server?: SchedulerServer;
  /** Stops everything and removes what the run created (database, queue keys, data directory). */
  stop(): Promise<void>;
}

export const systemNames = ['tickler-sqlite', 'tickler-postgres', 'tickler-postgres-direct', 'bullmq', 'bullmq-aof', 'graphile-worker', 'pg-boss'] as const;
export type SystemName = (typeof systemNames)[number];

/** Worker concurrency for every system (the same for every system). */
export const workerConcurrency = 50;

/** The payload every one-shot job carries: small, and the same for every system. */
export function payloadOf(job: BenchJob): { i: number; due: number } {
  return { i: job.index, due: job.dueAtMs };
}

export function isPayload(value: unknown): value is { i: number; due: number } {
  if (typeof value !== 'object' || value === null) return false;
  const record = value as Record<string, unknown>;
  return typeof record['i'] === 'number' && typeof record['due'] === 'number';
}
