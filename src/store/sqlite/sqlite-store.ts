/**
 * The embedded store: one SQLite file in WAL mode with fsync on every commit
 * (`synchronous=FULL`), so an acknowledged create, cancel or completion survives kill -9
 * (invariant 5). better-sqlite3 is synchronous; the Store methods are async only to share
 * the contract with PostgreSQL. Creates go through a group commit; every other write is
 * one `BEGIN IMMEDIATE` transaction, which also serialises several processes on one file.
 *
 * Notifications (runs ready, near timers) are emitted after the commit that caused them.
 */
import Database from 'better-sqlite3';
import { TicklerError } from '../../errors.js';
import { groupCommitMax, timingDefaults } from '../../limits.js';
import type { Logger } from '../../obs/log.js';
import type { JobRecord, Page, RunRecord } from '../../domain/types.js';
import type {
  CompleteOutcome, CompleteRequest, CreateJobInput, CreateJobOutcome, DispatchItem, DispatchResult, ExpiredLease,
  HeartbeatOutcome, JobChange, JobChangeOutcome, JobListFilter, LeaseRunsRequest, LeasedRun, LoadTimersQuery,
  LoadedTimer, ReplayOutcome, RunListFilter, RunWithEvents, ShardLease, Store, TeamScope, TimerWrite,
} from '../store.js';
import { Dispatcher } from './dispatch.js';
import { GroupCommitQueue } from './group-commit.js';
import { JobWrites, type CreateCall, type WriteEffects } from './job-writes.js';
import { Notifier } from './notifications.js';
import { StoreReads } from './reads.js';
import { RunTransitions } from './run-transitions.js';
import { migrate } from './schema.js';
import { ShardLeaseTable } from './shard-leases.js';
import { RunTable, TimerTable, TokenSequence } from './tables.js';

export interface SqliteStoreOptions {
  /** The database file; created with its schema when missing. */
  path: string;
  /** Timers written this close to now are announced through onNearTimers. */
  nearHorizonMs?: number;
  /** The uniform draw for retry jitter; tests pin it. */
  random?: () => number;
  /** FULL (the default) fsyncs every commit; NORMAL is for benchmarks that say so. */
  synchronous?: 'FULL' | 'NORMAL';
  /** How long a write waits for another process's transaction before failing as unavailable. */
  busyTimeoutMs?: number;
  /** Where a throwing notification listener is reported. */
  logger?: Logger;
}

const busyTimeoutMsDefault = 5_000;

export async function openSqliteStore(options: SqliteStoreOptions): Promise<SqliteStore> {
  const db = new Database(options.path);
  try {
    // Measured with .bench of 1,000-job creates (2 cores): 8 KiB pages and a checkpoint every
    // 10,000 pages instead of 1,000 take raw inserts from ~31k to ~50k jobs/s. The page size
    // only applies to a new file (before WAL is set), so old files keep theirs.
    db.pragma('page_size = 8192');
    db.pragma('journal_mode = WAL');
    db.pragma('wal_autocheckpoint = 10000');
    db.pragma(`synchronous = ${options.synchronous ?? 'FULL'}`);
    db.pragma(`busy_timeout = ${Math.trunc(options.busyTimeoutMs ?? busyTimeoutMsDefault)}`);
    db.pragma('temp_store = MEMORY');
    // 64 MiB of page cache: the hot indexes of a few million timers stay in memory.
    db.pragma('cache_size = -65536');
    migrate(db);
  } catch (error) {
    db.close();
    const reason = error instanceof Error ? error.message : String(error);
    throw new Error(`cannot open SQLite store at ${options.path}: ${reason}`, { cause: error });
  }
  return new SqliteStore(db, options);
}

export class SqliteStore implements Store {
  readonly kind = 'sqlite' as const;
  private readonly notifier: Notifier;
  private readonly jobWrites: JobWrites;
  private readonly dispatcher: Dispatcher;
  private readonly shardLeases: ShardLeaseTable;
  private readonly runTransitions: RunTransitions;
  private readonly reads: StoreReads;
  private readonly creates: GroupCommitQueue<CreateCall, CreateJobOutcome[]>;
  private closed = false;
  /** Group-commit counters: calls per transaction shows how well creates coalesce. */
  readonly createCommitStats = { transactions: 0, calls: 0, items: 0 };

  constructor(private readonly db: Database.Database, options: SqliteStoreOptions) {
    const logger = options.logger;
    this.notifier = new Notifier((error, channel) => {
      if (logger !== undefined) logger.error({ err: error, channel }, 'store notification listener threw');
      else process.emitWarning(new Error(`store notification listener threw on ${channel}`, { cause: error }));
    });
    const nearHorizonMs = options.nearHorizonMs ?? timingDefaults.loadHorizonMs;
    const wantsNearTimers = (): boolean => this.notifier.wantsNearTimers;
    const tokens = new TokenSequence(db);
    const timers = new TimerTable(db);
    const runs = new RunTable(db);
    this.jobWrites = new JobWrites(db, timers, runs, nearHorizonMs, wantsNearTimers);
    this.dispatcher = new Dispatcher(db, runs, timers);
    this.shardLeases = new ShardLeaseTable(db, tokens);
    this.runTransitions = new RunTransitions(db, runs, tokens, options.random ?? Math.random);
    this.reads = new StoreReads(db);
    this.creates = new GroupCommitQueue((calls) => {
      const { outcomes, effects } = this.jobWrites.createGroup(calls);
      this.createCommitStats.transactions++;
      this.createCommitStats.calls += calls.length;
      this.createCommitStats.items += calls.reduce((sum, call) => sum + call.items.length, 0);
      this.emit(effects);
      return outcomes;
    }, groupCommitMax);
  }

  onRunsReady(listener: (pool: string) => void): () => void {
    return this.notifier.onRunsReady(listener);
  }

  onNearTimers(listener: (timers: LoadedTimer[]) => void): () => void {
    return this.notifier.onNearTimers(listener);
  }

  // Jobs ---------------------------------------------------------------------------------

  async createJobs(items: CreateJobInput[], nowMs: number): Promise<CreateJobOutcome[]> {
    this.assertOpen();
    if (items.length === 0) return [];
    try {
      return await this.creates.submit({ items, nowMs }, items.length);
    } catch (error) {
      throw translateError(error);
    }
  }

  async getJob(team: TeamScope, jobId: string): Promise<JobRecord | null> {
    return this.run(() => this.reads.getJob(team, jobId));
  }

  async listJobs(filter: JobListFilter): Promise<Page<JobRecord>> {
    return this.run(() => this.reads.listJobs(filter));
  }

  async changeJob(change: JobChange): Promise<JobChangeOutcome> {
    return this.run(() => this.withEffects(this.jobWrites.change(change)).outcome);
  }

  async cancelJob(team: TeamScope, jobId: string, nowMs: number): Promise<JobRecord | null> {
    return this.run(() => this.jobWrites.cancel(team, jobId, nowMs));
  }

  async cancelJobsByKeyPrefix(team: string, prefix: string, nowMs: number): Promise<number> {
    return this.run(() => this.jobWrites.cancelByKeyPrefix(team, prefix, nowMs));
  }

  async triggerJob(team: TeamScope, jobId: string, nowMs: number): Promise<RunRecord | null> {
    return this.run(() => this.withEffects(this.jobWrites.trigger(team, jobId, nowMs)).run);
  }

  // Shard ownership ------------------------------------------------------------------------

  async acquireShardLeases(nodeId: string, shards: readonly number[], ttlMs: number, nowMs: number,
    options?: { force?: boolean }): Promise<ShardLease[]> {
    return this.run(() => this.shardLeases.acquire(nodeId, shards, ttlMs, nowMs, options?.force ?? false));
  }

  async renewShardLeases(nodeId: string, leases: readonly ShardLease[], ttlMs: number, nowMs: number):
    Promise<ShardLease[]> {
    return this.run(() => this.shardLeases.renew(nodeId, leases, ttlMs, nowMs));
  }

  async releaseShardLeases(nodeId: string, leases: readonly ShardLease[]): Promise<void> {
    this.run(() => this.shardLeases.release(nodeId, leases));
  }

  async listShardLeases(): Promise<ShardLease[]> {
    return this.run(() => this.shardLeases.list());
  }

  // Timers and dispatch --------------------------------------------------------------------

  async loadTimers(query: LoadTimersQuery): Promise<LoadedTimer[]> {
    return this.run(() => this.reads.loadTimers(query));
  }

  async dispatch(items: readonly DispatchItem[], nowMs: number): Promise<DispatchResult[]> {
    if (items.length === 0) return [];
    return this.run(() => this.withEffects(this.dispatcher.dispatch(items, nowMs)).results);
  }

  async findJobsWithoutTimer(limit: number): Promise<JobRecord[]> {
    return this.run(() => this.reads.findJobsWithoutTimer(limit));
  }

  async repairJobTimer(jobId: string, expectedVersion: number, timer: TimerWrite, nowMs: number): Promise<boolean> {
    return this.run(() => this.withEffects(this.jobWrites.repairTimer(jobId, expectedVersion, timer, nowMs)).repaired);
  }

  async countJobsWithoutTimer(): Promise<number> {
    return this.run(() => this.reads.countJobsWithoutTimer());
  }

  // Workers --------------------------------------------------------------------------------

  async leaseRuns(request: LeaseRunsRequest): Promise<LeasedRun[]> {
    if (request.max <= 0) return [];
    return this.run(() => this.runTransitions.lease(request));
  }

  async heartbeatRun(team: TeamScope, runId: string, fencingToken: string, nowMs: number): Promise<HeartbeatOutcome> {
    return this.run(() => this.runTransitions.heartbeat(team, runId, fencingToken, nowMs));
  }

  async completeRun(request: CompleteRequest): Promise<CompleteOutcome> {
    return this.run(() => {
      const { outcome, readyPools } = this.runTransitions.complete(request);
      this.notifier.emitRunsReady(readyPools);
      return outcome;
    });
  }

  async expireRunLeases(nowMs: number, limit: number): Promise<ExpiredLease[]> {
    return this.run(() => {
      const { expired, readyPools } = this.runTransitions.expire(nowMs, limit);
      this.notifier.emitRunsReady(readyPools);
      return expired;
    });
  }

  async nextRunDeadlineMs(): Promise<number | null> {
    return this.run(() => this.reads.nextRunDeadlineMs());
  }

  async nextReadyAtMs(team: TeamScope, pool: string): Promise<number | null> {
    return this.run(() => this.reads.nextReadyAtMs(team, pool));
  }

  async replayRun(team: TeamScope, runId: string, nowMs: number): Promise<ReplayOutcome> {
    return this.run(() => {
      const outcome = this.runTransitions.replay(team, runId, nowMs);
      if (outcome.kind === 'replayed') this.notifier.emitRunsReady([outcome.run.pool]);
      return outcome;
    });
  }

  // History --------------------------------------------------------------------------------

  async getRun(team: TeamScope, runId: string): Promise<RunWithEvents | null> {
    return this.run(() => this.reads.getRun(team, runId));
  }

  async listRuns(filter: RunListFilter): Promise<Page<RunRecord>> {
    return this.run(() => this.reads.listRuns(filter));
  }

  // Health ---------------------------------------------------------------------------------

  async ping(): Promise<void> {
    this.run(() => this.db.prepare('SELECT 1').get());
  }

  /** Commits creates already accepted, then closes the file. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.creates.drain();
    this.closed = true;
    this.db.close();
  }

  private withEffects<T extends { effects: WriteEffects }>(result: T): T {
    this.emit(result.effects);
    return result;
  }

  private emit(effects: WriteEffects): void {
    this.notifier.emitNearTimers(effects.nearTimers);
    this.notifier.emitRunsReady(effects.readyPools);
  }

  private run<T>(operation: () => T): T {
    this.assertOpen();
    try {
      return operation();
    } catch (error) {
      throw translateError(error);
    }
  }

  private assertOpen(): void {
    if (this.closed) throw new TicklerError('unavailable', 'the store is closed');
  }
}

/** A database another process keeps locked past the busy timeout is unavailable, and retryable. */
function translateError(error: unknown): unknown {
  if (error instanceof Database.SqliteError && (error.code === 'SQLITE_BUSY' || error.code === 'SQLITE_LOCKED')) {
    return new TicklerError('unavailable', 'the database is busy', { cause: error });
  }
  return error;
}
