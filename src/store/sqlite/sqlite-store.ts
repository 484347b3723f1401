/**
 * The embedded store: one SQLite file in WAL mode, every acknowledged create, cancel or
 * completion fsynced before it is answered, so it survives kill -9 and power loss
 * (invariant 5). better-sqlite3 is synchronous; the Store methods are async so that every
 * write can go through the group commit (`group-commit.ts`): the writes that arrive
 * together share one `BEGIN IMMEDIATE` transaction, each in its own savepoint, and one
 * fsync of the WAL that runs off the event loop (`wal-sync.ts`). `BEGIN IMMEDIATE` also
 * serialises several processes on one file. Reads run at once.
 *
 * Notifications (runs ready, near timers) are emitted once the commit that caused them is
 * durable.
 */
import { statSync, statfsSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { TicklerError } from '../../errors.js';
import { isFatalError } from '../../fatal-error.js';
import { groupCommitMax, timingDefaults } from '../../limits.js';
import type { Logger } from '../../obs/log.js';
import type { JobRecord, Lane, Page, RunRecord } from '../../domain/types.js';
import type {
  ClaimParkedWaiter, CompleteOutcome, CompleteRequest, CreateJobInput, CreateJobOutcome, DispatchItem,
  DispatchResult, ExpiredLease, FinishAheadItem, FinishAheadResult, HeartbeatOutcome, JobChange, JobChangeOutcome, JobListFilter,
  LeaseRunsRequest, LeasedRun, LoadTimersQuery, LoadedTimer, ReplayOutcome, RunListFilter, RunWithEvents, ServedWaiter, ShardLease,
  AnnouncedSilence, SilentJob, SilentJobsCursor, Store, TeamScope, TimerWrite, WriteAheadItem, WriteAheadResult,
  CreateQuota, QuotaCreateOutcome, TeamLimitsEntry,
  PoolPause, ResourceUsage,
} from '../store.js';
import { leaseCameBackShort } from '../store.js';
import { Dispatcher, type Fired } from './dispatch.js';
import { GroupCommitQueue, type OperationOutcome, type QueuedOperation } from './group-commit.js';
import { WalSync } from './wal-sync.js';
import type { ClusterMembership, MembershipOptions } from '../membership.js';
import { LocalMembers } from './membership.js';
import { JobWrites, type WriteEffects } from './job-writes.js';
import { Notifier } from './notifications.js';
import { StoreReads } from './reads.js';
import { RunTransitions } from './run-transitions.js';
import { Checkpointer, fallbackAutocheckpointPages } from './checkpointer.js';
import { WriteHealth, isDiskFailure } from './write-health.js';
import { migrate } from './schema.js';
import { ShardLeaseTable } from './shard-leases.js';
import { RunTable, TimerTable, TokenSequence } from './tables.js';
import { TeamLimitsTable } from './team-limits.js';

export interface SqliteStoreOptions {
  /** The database file; created with its schema when missing. */
  path: string;
  /** Timers written this close to now are announced through onNearTimers. */
  nearHorizonMs?: number;
  /** The uniform draw for retry jitter; tests pin it. */
  random?: () => number;
  /** FULL (the default) fsyncs every commit before answering; NORMAL answers without a sync (tests, benchmarks that say so). */
  synchronous?: 'FULL' | 'NORMAL';
  /** How long a write waits for another process's transaction before failing as unavailable. */
  busyTimeoutMs?: number;
  /** Where a throwing notification listener, a failed background checkpoint or failing commits are reported. */
  logger?: Logger;
  /** How often a store whose commits fail (a full disk) tries to make room and commit again (write-health.ts). */
  healIntervalMs?: number;
  /** Least time between two background WAL checkpoints while writing (checkpointer.ts); tests set 0. */
  checkpointIntervalMs?: number;
  /** Frames in the WAL after a background pass before the connection catches up (checkpointer.ts); tests set it small. */
  checkpointCatchUpFramesMin?: number;
  /** Job seqs per step of the reconciler's scan (`findJobsWithoutTimer`); tests set it small. */
  scanStepJobs?: number;
}

const busyTimeoutMsDefault = 5_000;
/** ~8 ms of the event loop per step at 1,000,000 jobs (a step of the scan reads ~20,000 rows). */
const scanStepJobsDefault = 20_000;
/**
 * How long a completion (or another durable write) alone waits for the next dispatch or lease
 * to share its transaction while those are committing steadily (group-commit.ts).
 */
const durableGatherMs = 1;

/**
 * Worker leases commit without waiting for the disk (see `lease`), and the token sequence
 * advances in the same transaction: after a power failure it can roll back, and without this
 * the next lease of a run could hand out the very token a worker that outlived the failure
 * still holds. Every open moves the sequence 2^32 ahead, durably, past anything handed out
 * and lost, so a token is never issued twice (invariant 4).
 */
function skipTokensPossiblyLost(db: Database.Database): void {
  db.pragma('synchronous = FULL');
  try {
    db.prepare('UPDATE token_sequence SET value = value + ? WHERE id = 1').run(tokensSkippedOnOpen);
  } finally {
    db.pragma('synchronous = NORMAL');
  }
}

/** More leases than one process could grant between two syncs. */
const tokensSkippedOnOpen = 2 ** 32;

/** Writes the commit may run together with adjacent writes of the same kind (`inSavepoints`). */
type Mergeable =
  | { kind: 'create'; items: readonly CreateJobInput[]; nowMs: number }
  | { kind: 'complete'; request: CompleteRequest };

export async function openSqliteStore(options: SqliteStoreOptions): Promise<SqliteStore> {
  const db = new Database(options.path);
  try {
    // Measured with .bench of 1,000-job creates (2 cores): 8 KiB pages and a checkpoint every
    // 10,000 pages instead of 1,000 take raw inserts from ~31k to ~50k jobs/s. The page size
    // only applies to a new file (before WAL is set), so old files keep theirs.
    db.pragma('page_size = 8192');
    db.pragma('journal_mode = WAL');
    // Checkpoints run on a thread of their own (checkpointer.ts); this is the safety net.
    db.pragma(`wal_autocheckpoint = ${fallbackAutocheckpointPages}`);
    // Commits never wait for the disk on the event loop: with FULL durability (the default)
    // the group commit fsyncs the WAL itself, off the loop, before answering (wal-sync.ts).
    db.pragma('synchronous = NORMAL');
    db.pragma(`busy_timeout = ${Math.trunc(options.busyTimeoutMs ?? busyTimeoutMsDefault)}`);
    db.pragma('temp_store = MEMORY');
    // 16 MiB of page cache (2,048 pages). It fills up as a process writes a large store and
    // never shrinks: at 64 MiB the process that created 1,000,000 timers held 102 MB more RSS
    // than with 1,000 (target: 50 MB; with 12 MiB, 54–73 MB, the rest being V8's heap grown
    // by the burst). Creates append at the right edge of every index but `timers_due`, so the
    // pages they keep touching fit; other pages come from the OS's file cache, which is not
    // the process's memory, at a pread each.
    db.pragma('cache_size = -16384');
    migrate(db);
    skipTokensPossiblyLost(db);
  } catch (error) {
    db.close();
    // A schema from a newer build says what to do already (schema.ts).
    if (isFatalError(error)) throw error;
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
  private readonly merged = { creates: 0, completions: 0 };
  private readonly reads: StoreReads;
  private readonly teamLimits: TeamLimitsTable;
  private readonly writes: GroupCommitQueue;
  /** Null when the store was opened with synchronous NORMAL: commits are not synced at all. */
  private readonly walSync: WalSync | null;
  private readonly checkpointer: Checkpointer;
  private readonly health: WriteHealth;
  /** A write that changes nothing: commits again once the disk takes writes (makeRoomAndProbe). */
  private readonly probeWrite: () => void;
  private readonly logger: Logger | undefined;
  private closed = false;
  private claimParkedWaiter: ClaimParkedWaiter | null = null;
  private readonly scanStepJobs: number;
  /** The cluster's members: the nodes of this process (openMembership). */
  private readonly members = new LocalMembers();

  private readonly groupTransaction: Database.Transaction<(body: () => unknown) => unknown>;
  private readonly savepoint: { begin: Database.Statement; release: Database.Statement; rollback: Database.Statement };

  constructor(private readonly db: Database.Database, options: SqliteStoreOptions) {
    const logger = options.logger;
    this.logger = logger;
    this.scanStepJobs = Math.max(1, Math.trunc(options.scanStepJobs ?? scanStepJobsDefault));
    this.groupTransaction = db.transaction((body: () => unknown): unknown => body());
    this.savepoint = {
      begin: db.prepare('SAVEPOINT tickler_operation'),
      release: db.prepare('RELEASE tickler_operation'),
      rollback: db.prepare('ROLLBACK TO tickler_operation'),
    };
    this.walSync = (options.synchronous ?? 'FULL') === 'FULL' ? new WalSync(`${options.path}-wal`) : null;
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
    this.teamLimits = new TeamLimitsTable(db);
    this.checkpointer = new Checkpointer({
      path: options.path,
      setAutocheckpoint: (pages) => db.pragma(`wal_autocheckpoint = ${pages}`),
      // Between two group commits: they are synchronous, so no transaction is open here.
      catchUp: () => {
        db.pragma('wal_checkpoint(PASSIVE)');
      },
      room: {
        measure: () => ({ walBytes: sizeOrZero(`${options.path}-wal`), freeBytes: freeBytesOn(dirname(options.path)) }),
        truncate: () => {
          db.pragma('wal_checkpoint(TRUNCATE)');
        },
      },
      ...(options.checkpointCatchUpFramesMin === undefined ? {} : { catchUpFramesMin: options.checkpointCatchUpFramesMin }),
      ...(logger === undefined ? {} : { logger }),
      ...(options.checkpointIntervalMs === undefined ? {} : { intervalMs: options.checkpointIntervalMs }),
    });
    this.health = new WriteHealth({
      heal: () => this.makeRoomAndProbe(),
      ...(logger === undefined ? {} : { logger }),
      ...(options.healIntervalMs === undefined ? {} : { intervalMs: options.healIntervalMs }),
    });
    const probe = db.prepare('UPDATE token_sequence SET value = value WHERE id = 1');
    this.probeWrite = () => probe.run();
    this.writes = new GroupCommitQueue((operations) => {
      let outcomes: OperationOutcome[];
      try {
        outcomes = this.commitGroup(operations);
      } catch (error) {
        if (isDiskFailure(error)) this.health.noteCommit(error);
        throw error;
      }
      // A group of one that the disk refused answers its error rather than throwing it.
      const refused = outcomes.find((outcome) => !outcome.ok && isDiskFailure(outcome.error));
      this.health.noteCommit(refused === undefined ? null : (refused as { error: unknown }).error);
      if (refused === undefined) this.checkpointer.afterCommit();
      return outcomes;
    }, groupCommitMax, this.walSync, { gatherMs: durableGatherMs });
  }

  /**
   * One attempt of WriteHealth's to get commits going again: copy the WAL into the database
   * and truncate it, which hands its space back (on the loop, between two group commits; a
   * background checkpoint in flight makes it answer busy at once rather than wait), then a
   * write that changes nothing, through the group commit like any other.
   */
  private async makeRoomAndProbe(): Promise<void> {
    try {
      this.db.pragma('wal_checkpoint(TRUNCATE)');
    } catch (error) {
      // No room yet to copy the WAL; the probe still says whether commits go through.
      this.logger?.warn({ err: error }, 'WAL checkpoint to free space failed');
    }
    await this.write(1, this.probeWrite);
  }

  /** Waits for a background checkpoint in flight; answers what the checkpoint thread has done so far. */
  async checkpointIdle(): Promise<Checkpointer['stats']> {
    await this.checkpointer.whenIdle();
    return { ...this.checkpointer.stats };
  }

  /** Transactions and operations committed so far: operations per transaction shows the coalescing. */
  get groupCommitStats(): { transactions: number; operations: number } {
    return { ...this.writes.stats };
  }

  /** Operations answered by a merged write (`inSavepoints`): creates run as one, successes recorded by one UPDATE. */
  get mergedWriteStats(): { creates: number; completions: number } {
    return { ...this.merged };
  }

  onRunsReady(listener: (pool: string) => void): () => void {
    return this.notifier.onRunsReady(listener);
  }

  onNearTimers(listener: (timers: LoadedTimer[]) => void): () => void {
    return this.notifier.onNearTimers(listener);
  }

  onNearTimersMissed(listener: () => void): () => void {
    return this.notifier.onNearTimersMissed(listener);
  }

  // Jobs ---------------------------------------------------------------------------------

  async createJobs(items: CreateJobInput[], nowMs: number): Promise<CreateJobOutcome[]> {
    if (items.length === 0) return [];
    const create: Mergeable = { kind: 'create', items, nowMs };
    return this.writeWithEffects(items.length, () => this.jobWrites.create(items, nowMs), create).then((done) => done.outcomes);
  }

  async getJob(team: TeamScope, jobId: string): Promise<JobRecord | null> {
    return this.run(() => this.reads.getJob(team, jobId));
  }

  async listJobs(filter: JobListFilter): Promise<Page<JobRecord>> {
    return this.run(() => this.reads.listJobs(filter));
  }

  async changeJob(change: JobChange): Promise<JobChangeOutcome> {
    return this.writeWithEffects(1, () => this.jobWrites.change(change)).then((done) => done.outcome);
  }

  async cancelJob(team: TeamScope, jobId: string, nowMs: number): Promise<JobRecord | null> {
    return this.write(1, () => this.jobWrites.cancel(team, jobId, nowMs));
  }

  async cancelJobs(team: TeamScope, jobIds: readonly string[], nowMs: number): Promise<(JobRecord | null)[]> {
    return this.write(Math.max(1, jobIds.length), () => this.jobWrites.cancelMany(team, jobIds, nowMs));
  }

  async cancelJobsByKeyPrefix(team: string, prefix: string, nowMs: number): Promise<number> {
    return this.write(1, () => this.jobWrites.cancelByKeyPrefix(team, prefix, nowMs));
  }

  async triggerJob(team: TeamScope, jobId: string, nowMs: number): Promise<RunRecord | null> {
    return this.writeWithEffects(1, () => this.jobWrites.trigger(team, jobId, nowMs)).then((done) => done.run);
  }

  // Team limits and create quotas ----------------------------------------------------------

  async listTeamLimits(): Promise<TeamLimitsEntry[]> {
    return this.run(() => this.teamLimits.list());
  }

  async putTeamLimits(entries: readonly TeamLimitsEntry[], nowMs: number): Promise<void> {
    await this.write(1, () => this.teamLimits.put(entries, nowMs));
  }

  async deleteTeamLimits(team: string): Promise<boolean> {
    return this.write(1, () => this.teamLimits.delete(team));
  }

  /** The quota's check, the creates and the bucket row in one operation of the group commit (team-limits.ts). */
  async createJobsWithinQuota(items: CreateJobInput[], nowMs: number, quota: CreateQuota): Promise<QuotaCreateOutcome> {
    const done = await this.writeWithEffects(Math.max(1, items.length), () => {
      const refusal = this.teamLimits.admit(quota, items.length, nowMs);
      if (refusal !== null) return { outcome: refusal as QuotaCreateOutcome, effects: { nearTimers: [], readyPools: [] } };
      const created = this.jobWrites.create(items, nowMs);
      if (quota.pendingMax !== null) this.teamLimits.markCounted(created.outcomes);
      return { outcome: { kind: 'created', outcomes: created.outcomes } as QuotaCreateOutcome, effects: created.effects };
    });
    return done.outcome;
  }

  // Shard ownership ------------------------------------------------------------------------

  async acquireShardLeases(nodeId: string, shards: readonly number[], ttlMs: number, nowMs: number,
    options?: { force?: boolean }): Promise<ShardLease[]> {
    return this.write(1, () => this.shardLeases.acquire(nodeId, shards, ttlMs, nowMs, options?.force ?? false));
  }

  async renewShardLeases(nodeId: string, leases: readonly ShardLease[], ttlMs: number, nowMs: number):
    Promise<ShardLease[]> {
    return this.write(1, () => this.shardLeases.renew(nodeId, leases, ttlMs, nowMs));
  }

  async releaseShardLeases(nodeId: string, leases: readonly ShardLease[]): Promise<void> {
    await this.write(1, () => this.shardLeases.release(nodeId, leases));
  }

  async listShardLeases(): Promise<ShardLease[]> {
    return this.run(() => this.shardLeases.list());
  }

  // Timers and dispatch --------------------------------------------------------------------

  async loadTimers(query: LoadTimersQuery): Promise<LoadedTimer[]> {
    return this.run(() => this.reads.loadTimers(query));
  }

  /**
   * Answered right after the commit, not after the sync (`durable: false`), and workers hear
   * of the new runs then too: a dispatch acknowledges nothing to a client. If a power failure
   * loses it, the WAL loses a suffix of whole transactions, so its timers are pending again
   * with it and fire again after the restart, under the same run ids (invariant 1): at least
   * once still holds. Waiting for the sync put one or two fsyncs between consecutive batches
   * of the fire pass, and under load those waits were the fire lag.
   */
  async dispatch(items: readonly DispatchItem[], nowMs: number): Promise<DispatchResult[]> {
    return this.fire(items, () => this.dispatcher.dispatch(items, nowMs), nowMs);
  }

  /** As `dispatch`, answered after the commit, not the sync. */
  async writeRunsAhead(items: readonly WriteAheadItem[], nowMs: number): Promise<WriteAheadResult[]> {
    return this.fire(items, () => this.dispatcher.writeRunsAhead(items, nowMs), nowMs);
  }

  /** As `dispatch`, answered after the commit, not the sync. */
  async finishAhead(items: readonly FinishAheadItem[], nowMs: number): Promise<FinishAheadResult[]> {
    return this.fire(items, () => this.dispatcher.finishAhead(items, nowMs), nowMs);
  }

  /**
   * One firing operation through the group commit (calls of one turn share its transaction),
   * serving parked waiters in it and answering after the commit, not the sync.
   */
  private fire<Result>(items: readonly unknown[], apply: () => Fired<Result>, nowMs: number): Promise<Result[]> {
    if (items.length === 0) return Promise.resolve([]);
    const served: ServedWaiter[] = [];
    return this.write(items.length, () => {
      const done = apply();
      this.leaseToParkedWaiters(done.effects.readyPools, nowMs, served);
      return done;
    }, (done) => {
      for (const { claim, runs } of served) claim.settle(runs);
      this.emit(done.effects);
    }, { durable: false }).then((done) => done.results, (error: unknown) => {
      // Nothing leased was committed: the claimed waiters go back to waiting.
      for (const { claim } of served) claim.settle([]);
      throw error;
    });
  }

  setParkedWaiters(claimWaiter: ClaimParkedWaiter | null): void {
    this.claimParkedWaiter = claimWaiter;
  }

  /**
   * Inside a firing's transaction: leases the runs it made ready to the waiters parked for
   * their pools, in the waiters' order, until one is answered short (its pool is empty for
   * its team). It saves each waiter a lease transaction of its own after the dispatch, and
   * the wake-up and read before it: at 2,000 timers a second those were a third of the
   * server's transactions. Waiters it does not serve are woken by onRunsReady as before.
   */
  private leaseToParkedWaiters(readyPools: readonly string[], nowMs: number, served: ServedWaiter[]): void {
    if (this.claimParkedWaiter === null) return;
    for (const pool of new Set(readyPools)) {
      for (let claim = this.claimParkedWaiter(pool, nowMs); claim !== null; claim = this.claimParkedWaiter(pool, nowMs)) {
        // Pushed before leasing, so that a failure settles this claim too.
        const entry: ServedWaiter = { claim, runs: [] };
        served.push(entry);
        entry.runs = this.runTransitions.lease(claim.request);
        if (leaseCameBackShort(claim.request, entry.runs)) break;
      }
    }
  }

  /**
   * Scans the jobs a range of seqs at a time, the event loop getting a turn between ranges:
   * in one statement the scan held the loop 405–424 ms each minute with 1,000,000 active jobs
   * (bench/probes/silence-scan-cost.ts), every timer due meanwhile firing that much late.
   */
  async findJobsWithoutTimer(limit: number): Promise<JobRecord[]> {
    const found: JobRecord[] = [];
    const lastSeq = this.run(() => this.reads.lastJobSeq());
    for (let afterSeq = 0; afterSeq < lastSeq && found.length < limit; afterSeq += this.scanStepJobs) {
      if (afterSeq > 0) await new Promise((resolve) => setImmediate(resolve));
      const uptoSeq = afterSeq + this.scanStepJobs;
      found.push(...this.run(() => this.reads.findJobsWithoutTimerIn(afterSeq, uptoSeq, limit - found.length)));
    }
    return found;
  }

  async repairJobTimer(jobId: string, expectedVersion: number, timer: TimerWrite, nowMs: number): Promise<boolean> {
    return this.writeWithEffects(1, () => this.jobWrites.repairTimer(jobId, expectedVersion, timer, nowMs))
      .then((done) => done.repaired);
  }

  async countJobsWithoutTimer(): Promise<number> {
    return this.run(() => this.reads.countJobsWithoutTimer());
  }

  async findSilentJobs(team: TeamScope, nowMs: number, limit: number, after?: SilentJobsCursor): Promise<SilentJob[]> {
    return this.run(() => this.reads.findSilentJobs(team, nowMs, limit, after));
  }

  async listSilenceAnnounced(limit: number): Promise<AnnouncedSilence[]> {
    return this.run(() => this.reads.listSilenceAnnounced(limit));
  }

  async setSilenceAnnounced(jobId: string, silentSinceMs: number | null): Promise<void> {
    await this.write(1, () => this.jobWrites.setSilenceAnnounced(jobId, silentSinceMs));
  }

  // Workers --------------------------------------------------------------------------------

  async leaseRuns(request: LeaseRunsRequest): Promise<LeasedRun[]> {
    if (request.max <= 0) return [];
    // A read first, answered at once: most long-poll wake-ups of an idle pool find nothing,
    // and a read costs a tenth of an empty write transaction.
    const readyAtMs = this.run(() => this.reads.nextReadyAtMs(request.team, request.pool));
    if (readyAtMs === null || readyAtMs > request.nowMs + (request.aheadMs ?? 0)) return [];
    // Through the group commit, so the leases and completions of one turn share a transaction,
    // but answered without waiting for the sync (`durable: false`): a lease's loss on power
    // failure is harmless. If it is lost, the run is `ready` again and is offered again (at
    // least once still holds), and the worker's token is unknown to the store, so its
    // heartbeat and completion are rejected. (The token sequence rolls back with it; the
    // next open skips 2^32 tokens ahead, durably, so the lost token is never issued again:
    // `skipTokensPossiblyLost`.) The next durable group's sync covers these WAL frames
    // too, and a process crash (kill -9) loses nothing either way. Measured: one fsync per
    // lease capped lease + complete at ~470 runs/s on this machine.
    return this.write(request.max, () => this.runTransitions.lease(request), undefined, { durable: false });
  }

  async heartbeatRun(team: TeamScope, runId: string, fencingToken: string, nowMs: number): Promise<HeartbeatOutcome> {
    return this.write(1, () => this.runTransitions.heartbeat(team, runId, fencingToken, nowMs));
  }

  async completeRun(request: CompleteRequest): Promise<CompleteOutcome> {
    // A success answered without the run may share one UPDATE with its neighbours (inSavepoints).
    const mergeable: Mergeable | undefined = request.status === 'succeeded' && request.wantRun === false
      ? { kind: 'complete', request } : undefined;
    return this.write(1, () => this.runTransitions.complete(request), (done) => this.notifier.emitRunsReady(done.readyPools),
      { durable: true, mergeable }).then((done) => done.outcome);
  }

  async expireRunLeases(nowMs: number, limit: number): Promise<ExpiredLease[]> {
    return this.write(limit, () => this.runTransitions.expire(nowMs, limit),
      (done) => this.notifier.emitRunsReady(done.readyPools)).then((done) => done.expired);
  }

  async releaseStrandedHeldRuns(nowMs: number, limit: number): Promise<{ runId: string; jobId: string }[]> {
    return this.write(limit, () => this.runTransitions.releaseStranded(nowMs, limit),
      (done) => this.notifier.emitRunsReady(done.readyPools)).then((done) => done.released);
  }

  /**
   * Cuts the worker leases an earlier process on this file granted to a third of each lease
   * plus `marginMs` from `nowMs` (from the run's ready time when it was leased ahead): call it
   * once at open, while the data-directory lock proves that process gone. A worker that got
   * its lease heartbeats within a third of the lease (the worker contract, DESIGN.md flow 6)
   * and keeps it; a lease whose answer died with the process is offered again that much
   * sooner, instead of after its whole `lease_s`. Answers how many leases were cut.
   */
  shortenOrphanedLeases(nowMs: number, marginMs: number): number {
    return this.db.prepare(`UPDATE runs SET lease_expires_at = MAX(@now, lease_expires_at - lease_ms) + lease_ms / 3 + @margin
      WHERE status = 'running' AND lease_expires_at > MAX(@now, lease_expires_at - lease_ms) + lease_ms / 3 + @margin`)
      .run({ now: nowMs, margin: marginMs }).changes;
  }

  async nextLeaseExpiryMs(): Promise<number | null> {
    return this.run(() => this.reads.nextLeaseExpiryMs());
  }

  async nextReadyAtMs(team: TeamScope, pool: string): Promise<number | null> {
    return this.run(() => this.reads.nextReadyAtMs(team, pool));
  }

  // Capacity (store.ts CapacityStore; lease-gates.ts) -----------------------------------

  async readyLaneTeams(team: TeamScope, pool: string, nowMs: number): Promise<Map<Lane, string[]>> {
    return this.run(() => this.runTransitions.gates.readyLaneTeams(team, pool, nowMs));
  }

  async putResourceCap(name: string, maxConcurrency: number, nowMs: number): Promise<void> {
    await this.write(1, () => this.runTransitions.gates.putResourceCap(name, maxConcurrency, nowMs));
  }

  async deleteResourceCap(name: string): Promise<boolean> {
    return this.write(1, () => this.runTransitions.gates.deleteResourceCap(name));
  }

  async resourceUsage(names?: readonly string[]): Promise<ResourceUsage[]> {
    return this.write(1, () => this.runTransitions.gates.resourceUsage(names), undefined, { durable: false });
  }

  async setPoolPause(pool: string, team: string, paused: boolean, nowMs: number): Promise<void> {
    await this.write(1, () => this.runTransitions.gates.setPoolPause(pool, team, paused, nowMs),
      () => { if (!paused) this.notifier.emitRunsReady([pool]); });
  }

  async clearPoolPauses(pool: string): Promise<void> {
    await this.write(1, () => this.runTransitions.gates.clearPoolPauses(pool), () => this.notifier.emitRunsReady([pool]));
  }

  async listPoolPauses(pool: string | null): Promise<PoolPause[]> {
    return this.run(() => this.runTransitions.gates.listPoolPauses(pool));
  }

  async setLaneDispatchCap(lane: Lane, dispatchPerS: number | null): Promise<void> {
    await this.write(1, () => this.runTransitions.gates.setLaneDispatchCap(lane, dispatchPerS));
  }

  async listLaneDispatchCaps(): Promise<Map<Lane, number>> {
    return this.run(() => this.runTransitions.gates.listLaneDispatchCaps());
  }

  async takeDispatchTokens(key: string, ratePerS: number, wanted: number, nowMs: number): Promise<number> {
    return this.write(1, () => this.runTransitions.gates.takeDispatchTokens(key, ratePerS, wanted, nowMs), undefined,
      { durable: false });
  }

  async returnDispatchTokens(key: string, ratePerS: number, count: number): Promise<void> {
    await this.write(1, () => this.runTransitions.gates.returnDispatchTokens(key, ratePerS, count), undefined, { durable: false });
  }

  async replayRun(team: TeamScope, runId: string, nowMs: number): Promise<ReplayOutcome> {
    return this.write(1, () => this.runTransitions.replay(team, runId, nowMs), (outcome) => {
      if (outcome.kind === 'replayed') this.notifier.emitRunsReady([outcome.run.pool]);
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

  /** Reachable and writable: while commits fail (a full disk), or after a failed sync, it throws `unavailable`. */
  async ping(): Promise<void> {
    this.run(() => this.db.prepare('SELECT 1').get());
    const failing = this.health.failing ?? this.writes.brokenBy;
    if (failing !== null) throw new TicklerError('unavailable', `the store cannot commit writes: ${failing}`);
  }

  /** Commits writes already accepted, then closes the file. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.health.close();
    await this.writes.drain();
    await this.checkpointer.close();
    this.walSync?.close();
    this.db.close();
  }

  // Cluster membership ---------------------------------------------------------------------

  /** The nodes of this process (sqlite/membership.ts): the data-directory lock keeps every other out. */
  async openMembership(options: MembershipOptions): Promise<ClusterMembership> {
    this.assertOpen();
    return this.members.open(options);
  }

  /** Queues a write for the next group commit; answers once the commit is durable (or, with `durable: false`, done). */
  private write<T>(weight: number, run: () => T, afterCommit: (value: T) => void = () => undefined,
    options: { durable: boolean; mergeable?: Mergeable } = { durable: true }): Promise<T> {
    this.assertOpen();
    return this.writes.submit({ run, afterCommit, weight, durable: options.durable, mergeable: options.mergeable });
  }

  private writeWithEffects<T extends { effects: WriteEffects }>(weight: number, run: () => T, mergeable?: Mergeable):
    Promise<T> {
    return this.write(weight, run, (done) => this.emit(done.effects), { durable: true, mergeable });
  }

  /**
   * One transaction for the group; each operation in its own savepoint, failing alone. The
   * savepoint statements are prepared once (a `db.transaction` wrapper built per operation
   * was 3 % of single creates), and a group of one needs none: its failure rolls back the
   * whole transaction, which holds nothing else.
   */
  private commitGroup(operations: readonly QueuedOperation[]): OperationOutcome[] {
    try {
      if (operations.length === 1) {
        const only = operations[0]!;
        try {
          return [{ ok: true, value: this.groupTransaction.immediate(only.run) }];
        } catch (error) {
          if (this.db.inTransaction) throw error;
          return [{ ok: false, error: translateError(error) }];
        }
      }
      return this.groupTransaction.immediate(() => this.inSavepoints(operations)) as OperationOutcome[];
    } catch (error) {
      throw translateError(error);
    }
  }

  /**
   * Each operation in a savepoint of its own, except adjacent creates (concurrent POST
   * /v1/jobs, say), which run as one create in one savepoint: one multi-row insert per table
   * and one savepoint instead of one each (64 concurrent single creates through the Store:
   * 31.5-32.4 -> 21.8-22.0 us of CPU a create). Their order is kept, as no other write
   * runs between them. If the shared create fails, it rolls back and each runs alone, so a
   * failure stays its own caller's.
   */
  private inSavepoints(operations: readonly QueuedOperation[]): OperationOutcome[] {
    const outcomes: OperationOutcome[] = [];
    for (let index = 0; index < operations.length;) {
      const kind = mergeableOf(operations[index]!)?.kind;
      let end = index + 1;
      while (kind !== undefined && end < operations.length && mergeableOf(operations[end]!)?.kind === kind) end++;
      // The run of adjacent writes of one kind from here, or the one operation here.
      const run = operations.slice(index, end);
      const merged = run.length < 2 ? null : kind === 'create' ? this.mergedCreates(run) : this.mergedCompletions(run);
      outcomes.push(...(merged ?? run.map((operation) => this.inSavepoint(operation))));
      index += run.length;
    }
    return outcomes;
  }

  /**
   * Adjacent successes answered without the run (an SDK's batch completion) as one UPDATE
   * in one savepoint (RunTransitions.completeManySucceeded); what it did not record (a fence
   * refused, say) then runs alone as before, so its caller gets the answer it always got.
   * The pools where a released held run became ready go with the first caller it answered.
   */
  private mergedCompletions(operations: readonly QueuedOperation[]): OperationOutcome[] | null {
    const requests = operations.map((operation) => (mergeableOf(operation) as { request: CompleteRequest }).request);
    const all = this.inSavepoint({ run: () => this.runTransitions.completeManySucceeded(requests) });
    if (!all.ok) return null;
    const done = all.value as ReturnType<RunTransitions['completeManySucceeded']>;
    let readyPools = done.readyPools;
    return operations.map((operation, index): OperationOutcome => {
      const outcome = done.outcomes[index];
      if (outcome === null || outcome === undefined) return this.inSavepoint(operation);
      this.merged.completions++;
      const value = { outcome, readyPools };
      readyPools = [];
      return { ok: true, value };
    });
  }

  /** The creates as one, each answered its own outcomes (the near timers go with the first); null if it failed. */
  private mergedCreates(operations: readonly QueuedOperation[]): OperationOutcome[] | null {
    const creates = operations.map((operation) => mergeableOf(operation) as Mergeable & { kind: 'create' });
    // The latest caller's time: the near horizon then reaches a little further for the others,
    // which only announces a timer to the wheel a little sooner.
    const nowMs = Math.max(...creates.map((create) => create.nowMs));
    const all = this.inSavepoint({ run: () => this.jobWrites.create(creates.flatMap((create) => create.items), nowMs) });
    if (!all.ok) return null;
    const done = all.value as ReturnType<JobWrites['create']>;
    this.merged.creates += operations.length;
    let offset = 0;
    return creates.map((create, index): OperationOutcome => {
      const outcomes = done.outcomes.slice(offset, offset + create.items.length);
      offset += create.items.length;
      return { ok: true, value: { outcomes, effects: index === 0 ? done.effects : { nearTimers: [], readyPools: [] } } };
    });
  }

  private inSavepoint(operation: Pick<QueuedOperation, 'run'>): OperationOutcome {
    this.savepoint.begin.run();
    try {
      const value = operation.run();
      this.savepoint.release.run();
      return { ok: true, value };
    } catch (error) {
      // Some errors (SQLITE_FULL, an I/O error) end the whole transaction: then the group fails.
      if (!this.db.inTransaction) throw error;
      this.savepoint.rollback.run();
      this.savepoint.release.run();
      return { ok: false, error: translateError(error) };
    }
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

function sizeOrZero(path: string): number {
  return statSync(path, { throwIfNoEntry: false })?.size ?? 0;
}

function freeBytesOn(directory: string): number {
  const stats = statfsSync(directory);
  return stats.bavail * stats.bsize;
}

function mergeableOf(operation: QueuedOperation): Mergeable | undefined {
  return operation.mergeable as Mergeable | undefined;
}

/** A database another process keeps locked past the busy timeout is unavailable, and retryable. */
function translateError(error: unknown): unknown {
  if (error instanceof Database.SqliteError && (error.code === 'SQLITE_BUSY' || error.code === 'SQLITE_LOCKED')) {
    return new TicklerError('unavailable', 'the database is busy', { cause: error });
  }
  return error;
}
