/**
 * The PostgreSQL store: many tickler processes over one database. This file wires
 * the pieces: the pool (connection.ts), migrations (schema.ts), timer partitions
 * (partitions.ts), notifications across processes (notifier.ts), and the query modules that
 * implement each Store method. It holds no SQL of its own beyond the health check.
 * Creates and completions are group-committed (group-commit.ts): concurrent calls share a
 * commit, as one fsync serves them all; their common groups are one statement that commits
 * alone, without BEGIN and COMMIT round trips (job-create.ts, run-complete.ts).
 *
 * Operators: call `maintainPartitions(nowMs)` periodically (the scheduler wiring does, e.g.
 * hourly); it creates the next days' timer partitions and drops past, empty ones. It also
 * runs once at open, by the database's clock.
 */
import type pg from 'pg';
import { groupCommitMax, leaseBatchMax, timingDefaults } from '../../limits.js';
import { isTicklerError } from '../../errors.js';
import { FatalError } from '../../fatal-error.js';
import { silentLogger, type Logger } from '../../obs/log.js';
import type { JobRecord, Lane, Page, RunRecord } from '../../domain/types.js';
import type {
  ClaimParkedWaiter, CompleteOutcome, CompleteRequest, CreateJobInput, CreateJobOutcome, DispatchItem, DispatchResult, ExpiredLease,
  FinishAheadItem, FinishAheadResult, HeartbeatOutcome, JobChange, JobChangeOutcome, JobListFilter, LeaseRunsRequest, LeasedRun,
  LoadTimersQuery, LoadedTimer, ReplayOutcome, RunListFilter, RunWithEvents, ShardLease, AnnouncedSilence, SilentJob, SilentJobsCursor,
  Store, TeamScope, TimerWrite, WriteAheadItem, WriteAheadResult,
  CreateQuota, QuotaCreateOutcome, TeamLimitsEntry,
  PoolPause, ResourceUsage,
} from '../store.js';
import { createPool, mapStoreError, poolSizeDefault, queryPool, withClient, type CommitHooks } from './connection.js';
import { query, type StoreContext } from './context.js';
import { dispatch, finishAhead, writeRunsAhead } from './dispatch.js';
import { GroupCommitter } from './group-commit.js';
import { LeaseSharing } from './lease-sharing.js';
import * as gates from './lease-gates.js';
import { createJobs, type CreateItem } from './job-create.js';
import { createJobsWithinQuota, deleteTeamLimits, listTeamLimits, putTeamLimits } from './team-limits.js';
import { cancelJob, cancelJobs, cancelJobsByKeyPrefix, changeJob, getJob, listJobs, triggerJob } from './jobs.js';
import { getRun, listRuns } from './history.js';
import { Notifier } from './notifier.js';
import type { ClusterMembership, MembershipOptions } from '../membership.js';
import { openPostgresMembership } from './membership.js';
import { maintainPartitions, type PartitionReport } from './partitions.js';
import { migrate } from './schema.js';
import { acquireShardLeases, listShardLeases, releaseShardLeases, renewShardLeases } from './shard-leases.js';
import {
  countJobsWithoutTimer, findJobsWithoutTimer, findSilentJobs, listSilenceAnnounced, loadTimers, loadTimersByRef, repairJobTimer,
  setSilenceAnnounced,
} from './timers.js';
import { completeRuns } from './run-complete.js';
import { expireRunLeases } from './run-expire.js';
import { heartbeatRun } from './run-heartbeat.js';
import { leaseRuns, leaseRunsShared } from './run-lease.js';
import { replayRun } from './run-replay.js';
import { nextLeaseExpiryMs, nextReadyAtMs, releaseStrandedHeldRuns, shortenLeasesOfGoneNodes } from './worker-runs.js';

export interface PostgresStoreOptions {
  url: string;
  /** Schema holding the tables (created if missing); default `public`. */
  schema?: string;
  nearHorizonMs?: number;
  random?: () => number;
  /** Judge shard-lease expiry by PostgreSQL's clock (default true; false under a virtual clock). */
  useDatabaseClock?: boolean;
  poolSize?: number;
  logger?: Logger;
  /**
   * The node id this store writes on the leases it grants, for `shortenLeasesOfGoneNodes`: the
   * id the node heartbeats its membership under (server.ts: every node on PostgreSQL does).
   */
  leaseNodeId?: string | null;
}

const schemaNamePattern = /^[a-z_][a-z0-9_]{0,40}$/;
/** Group-commit transactions in flight at once, per kind; two keep both cores busy without starving other calls. */
const commitsInFlightMax = 2;
/** Connections kept apart for shard-lease statements (renew, acquire, list, release). */
const leasePoolSize = 2;
/** Completions sharing one commit; each is a locked row, an update and an event. */
const completionsPerCommitMax = 500;

/** A shared commit that failed for a reason other than the database being away may be one call's fault. */
function isInputError(error: unknown): boolean {
  return !(isTicklerError(error) && error.code === 'unavailable');
}

export class PostgresStore implements Store {
  readonly kind = 'postgres' as const;
  private readonly creates: GroupCommitter<CreateItem, CreateJobOutcome>;
  private readonly completions: GroupCommitter<CompleteRequest, CompleteOutcome>;
  private readonly leases: LeaseSharing;
  private closed = false;
  private claimParkedWaiter: ClaimParkedWaiter | null = null;

  constructor(private readonly context: StoreContext, private readonly notifier: Notifier, readonly schema: string,
    /** The database's URL, for the membership's own connection (openMembership). */
    private readonly url: string) {
    this.creates = new GroupCommitter(
      (items) => createJobs(context, items),
      groupCommitMax, commitsInFlightMax, isInputError);
    this.completions = new GroupCommitter(
      (requests) => completeRuns(context, requests),
      completionsPerCommitMax, commitsInFlightMax, isInputError);
    this.leases = new LeaseSharing((request) => leaseRuns(context, request),
      (requests) => leaseRunsShared(context, requests), leaseBatchMax);
  }

  get pool(): pg.Pool {
    return this.context.pool;
  }

  /** Resolves once the LISTEN connection is up; tests use it after forcing a reconnect. */
  waitUntilListening(): Promise<void> {
    return this.notifier.waitUntilListening();
  }

  maintainPartitions(nowMs: number): Promise<PartitionReport> {
    return withClient(this.context.pool, 'maintainPartitions', (client) => maintainPartitions(client, nowMs));
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

  createJobs(items: CreateJobInput[], nowMs: number): Promise<CreateJobOutcome[]> {
    return this.creates.submit(items.map((input) => ({ input, nowMs })));
  }

  // Team limits and create quotas (team-limits.ts) ------------------------------------------

  listTeamLimits(): Promise<TeamLimitsEntry[]> {
    return listTeamLimits(this.context);
  }

  putTeamLimits(entries: readonly TeamLimitsEntry[], nowMs: number): Promise<void> {
    return putTeamLimits(this.context, entries, nowMs);
  }

  deleteTeamLimits(team: string): Promise<boolean> {
    return deleteTeamLimits(this.context, team);
  }

  createJobsWithinQuota(items: CreateJobInput[], nowMs: number, quota: CreateQuota): Promise<QuotaCreateOutcome> {
    return createJobsWithinQuota(this.context, items.map((input) => ({ input, nowMs })), nowMs, quota);
  }

  getJob(team: TeamScope, jobId: string): Promise<JobRecord | null> {
    return getJob(this.context, team, jobId);
  }

  listJobs(filter: JobListFilter): Promise<Page<JobRecord>> {
    return listJobs(this.context, filter);
  }

  changeJob(change: JobChange): Promise<JobChangeOutcome> {
    return changeJob(this.context, change);
  }

  cancelJob(team: TeamScope, jobId: string, nowMs: number): Promise<JobRecord | null> {
    return cancelJob(this.context, team, jobId, nowMs);
  }

  cancelJobs(team: TeamScope, jobIds: readonly string[], nowMs: number): Promise<(JobRecord | null)[]> {
    return cancelJobs(this.context, team, jobIds, nowMs);
  }

  cancelJobsByKeyPrefix(team: string, prefix: string, nowMs: number): Promise<number> {
    return cancelJobsByKeyPrefix(this.context, team, prefix, nowMs);
  }

  triggerJob(team: TeamScope, jobId: string, nowMs: number): Promise<RunRecord | null> {
    return triggerJob(this.context, team, jobId, nowMs);
  }

  acquireShardLeases(nodeId: string, shards: readonly number[], ttlMs: number, nowMs: number,
    options?: { force?: boolean }): Promise<ShardLease[]> {
    return acquireShardLeases(this.context, nodeId, shards, ttlMs, nowMs, options?.force ?? false);
  }

  renewShardLeases(nodeId: string, leases: readonly ShardLease[], ttlMs: number, nowMs: number): Promise<ShardLease[]> {
    return renewShardLeases(this.context, nodeId, leases, ttlMs, nowMs);
  }

  releaseShardLeases(nodeId: string, leases: readonly ShardLease[]): Promise<void> {
    return releaseShardLeases(this.context, nodeId, leases);
  }

  listShardLeases(): Promise<ShardLease[]> {
    return listShardLeases(this.context);
  }

  loadTimers(request: LoadTimersQuery): Promise<LoadedTimer[]> {
    return loadTimers(this.context, request);
  }

  dispatch(items: readonly DispatchItem[], nowMs: number): Promise<DispatchResult[]> {
    return dispatch(this.context, items, nowMs, this.claimParkedWaiter);
  }

  writeRunsAhead(items: readonly WriteAheadItem[], nowMs: number): Promise<WriteAheadResult[]> {
    return writeRunsAhead(this.context, items, nowMs, this.claimParkedWaiter);
  }

  finishAhead(items: readonly FinishAheadItem[], nowMs: number): Promise<FinishAheadResult[]> {
    return finishAhead(this.context, items, nowMs, this.claimParkedWaiter);
  }

  setParkedWaiters(claimWaiter: ClaimParkedWaiter | null): void {
    this.claimParkedWaiter = claimWaiter;
  }

  findJobsWithoutTimer(limit: number): Promise<JobRecord[]> {
    return findJobsWithoutTimer(this.context, limit);
  }

  repairJobTimer(jobId: string, expectedVersion: number, timer: TimerWrite, nowMs: number): Promise<boolean> {
    return repairJobTimer(this.context, jobId, expectedVersion, timer, nowMs);
  }

  countJobsWithoutTimer(): Promise<number> {
    return countJobsWithoutTimer(this.context);
  }

  releaseStrandedHeldRuns(nowMs: number, limit: number): Promise<{ runId: string; jobId: string }[]> {
    return releaseStrandedHeldRuns(this.context, nowMs, limit);
  }

  findSilentJobs(team: TeamScope, nowMs: number, limit: number, after?: SilentJobsCursor): Promise<SilentJob[]> {
    return findSilentJobs(this.context, team, nowMs, limit, after);
  }

  listSilenceAnnounced(limit: number): Promise<AnnouncedSilence[]> {
    return listSilenceAnnounced(this.context, limit);
  }

  setSilenceAnnounced(jobId: string, silentSinceMs: number | null): Promise<void> {
    return setSilenceAnnounced(this.context, jobId, silentSinceMs);
  }

  leaseRuns(request: LeaseRunsRequest): Promise<LeasedRun[]> {
    return this.leases.lease(request);
  }

  // Capacity (store.ts CapacityStore; lease-gates.ts) -----------------------------------

  readyLaneTeams(team: TeamScope, pool: string, nowMs: number): Promise<Map<Lane, string[]>> {
    return gates.readyLaneTeams(this.context, team, pool, nowMs);
  }

  putResourceCap(name: string, maxConcurrency: number, nowMs: number): Promise<void> {
    return gates.putResourceCap(this.context, name, maxConcurrency, nowMs);
  }

  deleteResourceCap(name: string): Promise<boolean> {
    return gates.deleteResourceCap(this.context, name);
  }

  resourceUsage(names?: readonly string[]): Promise<ResourceUsage[]> {
    return gates.resourceUsage(this.context, names);
  }

  setPoolPause(pool: string, team: string, paused: boolean, nowMs: number): Promise<void> {
    return gates.setPoolPause(this.context, pool, team, paused, nowMs);
  }

  clearPoolPauses(pool: string): Promise<void> {
    return gates.clearPoolPauses(this.context, pool);
  }

  listPoolPauses(pool: string | null): Promise<PoolPause[]> {
    return gates.listPoolPauses(this.context, pool);
  }

  setLaneDispatchCap(lane: Lane, dispatchPerS: number | null): Promise<void> {
    return gates.setLaneDispatchCap(this.context, lane, dispatchPerS);
  }

  listLaneDispatchCaps(): Promise<Map<Lane, number>> {
    return gates.listLaneDispatchCaps(this.context);
  }

  takeDispatchTokens(key: string, ratePerS: number, wanted: number, nowMs: number): Promise<number> {
    return gates.takeDispatchTokens(this.context, key, ratePerS, wanted, nowMs);
  }

  returnDispatchTokens(key: string, ratePerS: number, count: number): Promise<void> {
    return gates.returnDispatchTokens(this.context, key, ratePerS, count);
  }

  heartbeatRun(team: TeamScope, runId: string, fencingToken: string, nowMs: number): Promise<HeartbeatOutcome> {
    return heartbeatRun(this.context, team, runId, fencingToken, nowMs);
  }

  /**
   * Cuts the leases that nodes outside `liveNodeIds` granted and no worker has heartbeated
   * since, to a third of the lease plus `marginMs` (src/scheduler/orphaned-leases.ts says
   * when); answers how many. The embedded store's counterpart is `shortenOrphanedLeases`.
   */
  shortenLeasesOfGoneNodes(liveNodeIds: readonly string[], nowMs: number, marginMs: number): Promise<number> {
    return shortenLeasesOfGoneNodes(this.context, liveNodeIds, nowMs, marginMs);
  }

  completeRun(request: CompleteRequest): Promise<CompleteOutcome> {
    return this.completions.submit([request]).then((outcomes) => outcomes[0]!);
  }

  expireRunLeases(nowMs: number, limit: number): Promise<ExpiredLease[]> {
    return expireRunLeases(this.context, nowMs, limit);
  }

  nextLeaseExpiryMs(): Promise<number | null> {
    return nextLeaseExpiryMs(this.context);
  }

  nextReadyAtMs(team: TeamScope, pool: string): Promise<number | null> {
    return nextReadyAtMs(this.context, team, pool);
  }

  replayRun(team: TeamScope, runId: string, nowMs: number): Promise<ReplayOutcome> {
    return replayRun(this.context, team, runId, nowMs);
  }

  getRun(team: TeamScope, runId: string): Promise<RunWithEvents | null> {
    return getRun(this.context, team, runId);
  }

  listRuns(filter: RunListFilter): Promise<Page<RunRecord>> {
    return listRuns(this.context, filter);
  }

  async ping(): Promise<void> {
    await query(this.context, 'ping', 'SELECT 1');
  }

  /**
   * Membership tables shared by every process on the database, judged by its clock unless the
   * store is on the caller's (postgres/membership.ts). Its own one-connection pool: a busy
   * store pool must not delay the heartbeat that keeps a node's share.
   */
  openMembership(options: MembershipOptions): Promise<ClusterMembership> {
    return openPostgresMembership({ url: this.url, schema: this.schema, useDatabaseClock: this.context.useDatabaseClock,
      logger: this.context.logger, schedules: options.schedules });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.notifier.close();
    await Promise.all([this.context.pool.end(), this.context.leasePool.end()]);
  }
}

/** The database's clock, for partition maintenance at open. */
async function databaseNowMs(pool: pg.Pool): Promise<number> {
  const result = await queryPool<{ now_ms: number }>(pool, 'open',
    `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms`);
  return result.rows[0]!.now_ms;
}

/** Connects, migrates (safe when several nodes start at once) and starts listening. */
export async function openPostgresStore(options: PostgresStoreOptions): Promise<PostgresStore> {
  const schema = options.schema ?? 'public';
  if (!schemaNamePattern.test(schema)) {
    throw new RangeError(`schema name ${JSON.stringify(schema)} must match ${schemaNamePattern.source}`);
  }
  const logger = options.logger ?? silentLogger();
  const pool = createPool({ url: options.url, schema, poolSize: options.poolSize ?? poolSizeDefault, logger });
  const leasePool = createPool({ url: options.url, schema, poolSize: leasePoolSize, logger });
  let notifier: Notifier | undefined;
  try {
    await withClient(pool, 'open', (client) => migrate(client, schema));
    const hooks: CommitHooks = {
      beforeCommit: (tx) => notifier!.notifyWithin(tx),
      afterCommit: (effects) => notifier!.emitLocal(effects.readyPools, effects.nearTimers),
      notifications: (effects) => notifier!.notificationsOf(effects),
    };
    const context: StoreContext = {
      pool,
      leasePool,
      hooks,
      nearHorizonMs: options.nearHorizonMs ?? timingDefaults.loadHorizonMs,
      random: options.random ?? Math.random,
      useDatabaseClock: options.useDatabaseClock ?? true,
      leaseNodeId: options.leaseNodeId ?? null,
      logger,
    };
    notifier = new Notifier({ url: options.url, schema, logger, loadTimers: (refs) => loadTimersByRef(context, refs) });
    const store = new PostgresStore(context, notifier, schema, options.url);
    await store.maintainPartitions(await databaseNowMs(pool));
    await notifier.start().catch((error: unknown) => mapStoreError(error, 'open'));
    return store;
  } catch (error) {
    await notifier?.close();
    await Promise.all([pool.end(), leasePool.end()]);
    throw unhealableOpenError(error, options.url) ?? error;
  }
}

/**
 * Refusals at open that waiting cannot heal: the credentials (SQLSTATE class 28) or a database
 * that does not exist (3D000). As a FatalError they end the process with one line.
 */
function unhealableOpenError(error: unknown, url: string): FatalError | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code !== 'string' || !(code.startsWith('28') || code === '3D000')) return undefined;
  let shown = 'the given URL';
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') parsed.password = '***';
    shown = parsed.toString();
  } catch (parseError) {
    if (!(parseError instanceof TypeError)) throw parseError;
  }
  return new FatalError(`cannot open the PostgreSQL store at ${shown}: ${(error as Error).message} (SQLSTATE ${code}); ` +
    'check the URL\'s user, password and database', { cause: error });
}
