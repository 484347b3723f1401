/**
 * The Store contract: every durable operation tickler performs, named as a domain
 * operation (STYLE.md §2). Each method is one atomic transition with its fence inside it:
 * a shard token is checked in the same transaction that dispatches, a worker token in the
 * same statement that heartbeats or completes. SQLite and PostgreSQL implement this file;
 * `test/store/conformance.ts` holds both to it.
 *
 * Times are epoch milliseconds passed in by the caller (the store never reads a clock,
 * except PostgreSQL's shard-lease expiry, which is judged by the database's clock when the
 * store is configured for real time).
 */
import type {
  JobRecord,
  JobSpec,
  JobState,
  Lane,
  Page,
  RunEvent,
  RunRecord,
  RunStatus,
  CompletionStatus,
  OccurrenceWrite,
  TimerWrite,
} from '../domain/types.js';
import type { LeasePlan } from '../domain/lease-policy.js';
// The firing plan (domain) builds these; the store writes them.
export type { OccurrenceWrite, TimerWrite } from '../domain/types.js';

/** A timer to write: the store derives `bucket` from `fireAtMs`. */

export interface CreateJobInput {
  job: JobRecord;
  /** The first timer, or null when the schedule has no occurrence to wait for. */
  timer: TimerWrite | null;
  /**
   * A one-shot job whose fire time had come when it was created is dispatched by its create
   * (docs/API.md, "Jobs due when created"): its occurrence, planned as a timer firing now would plan it,
   * is written as its run (with its `dispatched` or `skipped` event) in the create's
   * transaction; `timer` is then null and the job `done`. Only a job that is created writes
   * it (`existing` and `key_conflict` write nothing).
   */
  dueNow?: readonly OccurrenceWrite[];
  /**
   * A keyed create's body text as sent, hashed: a job stored before request hashes were
   * canonical is matched by it (identity.ts `isSameRequest`).
   */
  legacyTextHash?: string;
}

/** The `dispatched` event's detail of a run dispatched by its job's create (`CreateJobInput.dueNow`). */
export const dispatchedAtCreateDetail = { at_create: true } as const;

export type CreateJobOutcome =
  | { kind: 'created'; job: JobRecord }
  /** `key` repeated with the same request hash: the existing job. */
  | { kind: 'existing'; job: JobRecord }
  /** `key` repeated with another request hash. */
  | { kind: 'key_conflict'; job: JobRecord };

/**
 * `team: null` means an admin acting across teams. Team-scoped reads of another team's
 * object answer null, exactly as for an unknown id.
 */
export type TeamScope = string | null;

export interface JobListFilter {
  team: TeamScope;
  state?: JobState;
  pool?: string;
  /** `name=value` or `name` (has the label). */
  label?: string;
  /** The job with exactly this key (a team's key names one job). */
  key?: string;
  /** Jobs whose key starts with this text. */
  keyPrefix?: string;
  cursor?: string;
  limit: number;
}

/**
 * A read-compute-write change to one job (PATCH, pause, resume). Applied only when the job
 * still has `expectedVersion`; otherwise `version_conflict` and the caller recomputes.
 * `timer: 'keep'` leaves the pending timer; a TimerWrite or null replaces it (null deletes).
 */
export interface JobChange {
  team: TeamScope;
  jobId: string;
  expectedVersion: number;
  spec?: JobSpec;
  requestHash?: string;
  state?: JobState;
  timer: TimerWrite | null | 'keep';
  nowMs: number;
}

export type JobChangeOutcome =
  | { kind: 'changed'; job: JobRecord }
  | { kind: 'not_found' }
  | { kind: 'version_conflict'; job: JobRecord };

/** A pending timer as the loader sees it, with what the scheduler needs to fire it. */
export interface LoadedTimer {
  timerId: string;
  jobId: string;
  shard: number;
  fireAtMs: number;
  scheduledAtMs: number;
  /** The job's version when the timer was read; dispatch re-checks state, not version. */
  jobVersion: number;
  spec: JobSpec;
  /**
   * The timer's run was written ahead of its fire time (`DispatchItem.stage` `ahead`): firing
   * it only finishes the job. Absent (or false) for every other timer.
   */
  dispatchedAhead?: boolean;
}

export interface LoadTimersQuery {
  /** Shards this node holds; the store answers only timers of these shards. */
  shards: readonly number[];
  /** Timers with `fireAtMs < untilMs` (overdue ones included). */
  untilMs: number;
  /** Keyset cursor: continue after this (fireAtMs, timerId). */
  after?: { fireAtMs: number; timerId: string };
  limit: number;
}

/** One occurrence to record when a timer fires. */

export interface DispatchItem {
  shard: number;
  /** The shard lease token this node holds; rejected when below the highest granted. */
  shardToken: string;
  timerId: string;
  jobId: string;
  occurrences: OccurrenceWrite[];
  /** Occurrences summarised in one event instead of a row each (catch-up bound). */
  summary?: { skippedCount: number; fromScheduledAtMs: number; toScheduledAtMs: number; reason: string };
  /** The recurring job's next timer, written in the same transaction (invariant 3). */
  nextTimer: TimerWrite | null;
  /**
   * How much of the firing this item does (absent: `whole`). A one-shot job's firing may be
   * split in two, for stores with `dispatchesAhead`, so that a herd's runs are written before
   * its instant and only leases and completions are left at it:
   * - `ahead`, before the fire time: the occurrence's run is written `ready` with its
   *   `ready_at` at the fire time (no lease takes it before), and the timer stays pending,
   *   marked, with the job active. The answer's `nextTimerId` is that same timer.
   * - `finish`, at the fire time, for a marked timer: the timer is consumed and the job is
   *   done; no run is written (`runs` is empty).
   * A change to the job in between (cancel, or a PATCH of its timing or pool) takes back or
   * moves the run not yet due, in the same transaction as the change.
   */
  stage?: 'whole' | 'ahead' | 'finish';
}

/**
 * The ledger's reason when a change to a job takes back (or moves) a run written ahead of its
 * fire time (`DispatchItem.stage` `ahead`): the same words on every store.
 */
export const jobCancelledBeforeDueReason = 'the job was cancelled before the run came due';
export const jobChangedBeforeDueReason = 'the job was changed before the run came due';

export type DispatchResult =
  /** Timer consumed; `runs` lists each occurrence's run id and the status it ended in. */
  | {
      kind: 'dispatched';
      timerId: string;
      runs: { runId: string; status: RunStatus; inserted: boolean }[];
      /** The job's pool; empty for a `finish`, which reads no job row. */
      pool: string;
      /**
       * Id of the next timer written from `nextTimer` (null when none), so the owner can wheel
       * it; for an `ahead` item, the item's own timer, kept pending.
       */
      nextTimerId: string | null;
      /**
       * An `ahead` item's timer is kept marked (its run written): the owner wheels it at its
       * fire time to be finished. False or absent when the store wrote no run ahead (the job
       * had an active run, whose overlap is judged at the fire time instead): the timer stays
       * as it was, to be fired whole.
       */
      nextTimerDispatchedAhead?: boolean;
    }
  /** The shard token was stale: nothing written. */
  | { kind: 'stale_token'; timerId: string }
  /** The timer was no longer pending (cancelled, paused, patched, or fired already). */
  | { kind: 'timer_gone'; timerId: string };

/**
 * An active job with `max_silence_s` whose last success is older than that (DESIGN.md flow 8,
 * the dead man's switch). The silence is counted from the job's latest succeeded run, or from
 * its last change (create, PATCH, pause, resume) when that is later or it never succeeded:
 * a job just created or resumed is not silent before its own `max_silence_s` has passed.
 */
export interface SilentJob {
  job: JobRecord;
  /** `finished_at` of its latest succeeded run (by scheduled time); null when none. */
  lastSuccessAtMs: number | null;
  /** When the switch tripped: the later of the last success and the last change, plus `max_silence_s`. */
  silentSinceMs: number;
}

/** A job whose silence an alert announced (`Store.listSilenceAnnounced`). */
export interface AnnouncedSilence {
  job: JobRecord;
  silentSinceMs: number;
}

/** Where a page of silent jobs ended: the last item's `silentSinceMs` and job id. */
export interface SilentJobsCursor {
  silentSinceMs: number;
  jobId: string;
}

export interface ShardLease {
  shard: number;
  nodeId: string;
  /** Decimal string of a number that only grows (a sequence). */
  token: string;
  expiresAtMs: number;
}

export interface LeaseRunsRequest {
  team: TeamScope;
  pool: string;
  max: number;
  /** Overrides the job's `lease_s` when given. */
  leaseMs: number | null;
  workerId: string | null;
  nowMs: number;
  /**
   * Also lease runs that become ready within this many ms (POST /v1/workers/lease `ahead_ms`;
   * 0 when absent): the worker holds each until its `readyAtMs` before starting it, and the
   * lease runs from then. Only runs already in the ledger can be taken so (a one-shot herd or
   * a dense stream written ahead, a retry waiting out its delay).
   */
  aheadMs?: number;
  /**
   * At most this many of the `max` runs may be ready now (POST /v1/workers/lease `max_ready`);
   * the rest only runs leased ahead (`aheadMs`), which the worker holds for their ready time.
   * Absent: all `max` may be ready. With it the ready runs are taken first, then the ahead
   * ones, each lane by lane.
   */
  readyMax?: number;
  /**
   * How the lease is shared among lanes and teams (lease-policy.ts `planLease`): executed
   * slice by slice. Absent: lane by lane, in ready order. Every lease, planned or not, takes
   * no run of a paused (pool, team) and no run over a resource cap (`CapacityStore`).
   */
  plan?: LeasePlan;
}

/** The ready part of a lease (`readyMax`), and whether its answer leaves the pool drained. */
export function readyMaxOf(request: LeaseRunsRequest): number {
  return Math.min(request.readyMax ?? request.max, request.max);
}

/**
 * Whether a lease's answer says the pool has nothing more for this caller: fewer runs than it
 * asked for, and fewer ready ones than its `readyMax` (ready runs refused for that cap may remain).
 */
export function leaseCameBackShort(request: LeaseRunsRequest, runs: readonly LeasedRun[]): boolean {
  if (runs.length >= request.max) return false;
  const readyMax = readyMaxOf(request);
  if (readyMax >= request.max) return true;
  let ready = 0;
  for (const run of runs) if (run.readyAtMs <= request.nowMs) ready++;
  return ready < readyMax;
}

export interface LeasedRun {
  runId: string;
  jobId: string;
  team: string;
  attempt: number;
  scheduledAtMs: number;
  fireAtMs: number;
  dispatchedAtMs: number;
  /**
   * The job's payload as JSON text, as stored: the lease answer carries it to the worker
   * without parsing it and serialising it again (a herd's lease read and re-wrote every
   * job's whole spec for it).
   */
  payloadJson: string;
  fencingToken: string;
  leaseExpiresAtMs: number;
  /** When the run became (or becomes) ready: a run leased ahead must not start before it. */
  readyAtMs: number;
  /** The run's lane, for the lease metrics (both stores answer it). */
  lane?: Lane;
}

/**
 * The `leased` event's detail: the attempt and worker, and for a run leased ahead of its
 * ready time, `readyAt` (epoch ms), when its worker may start it.
 */
export function leasedEventDetail(attempt: number, request: LeaseRunsRequest, readyAtMs: number):
  { attempt: number; workerId: string | null; readyAt?: number } {
  return readyAtMs > request.nowMs
    ? { attempt, workerId: request.workerId, readyAt: readyAtMs }
    : { attempt, workerId: request.workerId };
}

/**
 * A parked long-poll lease, handed to the store so that a dispatch can lease it runs in its
 * own transaction (see `Store.setDispatchLeaser`).
 */
export interface DispatchLeaseClaim {
  /** What to lease: the waiter's pool, team, max, lease length and worker, at the dispatch's time. */
  request: LeaseRunsRequest;
  /**
   * Called once: after the commit with the runs leased (perhaps none: the waiter keeps
   * waiting), or with none when the dispatch failed (nothing it leased was committed).
   */
  settle(runs: LeasedRun[]): void;
}

/** A claim a dispatch served, with the runs it leased for it; settled after the commit. */
export interface ServedClaim {
  claim: DispatchLeaseClaim;
  runs: LeasedRun[];
}

/** Claims the next parked waiter of `pool` not already being served, or answers null. */
export type DispatchLeaser = (pool: string, nowMs: number) => DispatchLeaseClaim | null;

export type HeartbeatOutcome =
  | { kind: 'extended'; leaseExpiresAtMs: number }
  | { kind: 'not_found' }
  | { kind: 'stale_token' }
  | { kind: 'cancelled' };

export interface CompleteRequest {
  team: TeamScope;
  runId: string;
  fencingToken: string;
  status: CompletionStatus;
  error: string | null;
  result: unknown;
  nowMs: number;
  /**
   * False when the caller answers only whether the completion was recorded (`answer:
   * "status"`): a store may then skip reading the run back and answer `accepted` instead of
   * `completed`. Reading every column back (`RETURNING *`) was ~6 us of a ~14 us success
   * UPDATE on SQLite (bench/probes/sqlite-store-cost.ts).
   */
  wantRun?: boolean;
}

export type CompleteOutcome =
  | { kind: 'completed'; run: RunRecord }
  /** Recorded, as `completed`, without the run read back (only when `wantRun` is false). */
  | { kind: 'accepted' }
  | { kind: 'not_found' }
  | { kind: 'stale_token' }
  | { kind: 'cancelled' };

/** What a lease-expiry sweep did to one run. */
export interface ExpiredLease {
  runId: string;
  pool: string;
  toStatus: 'ready' | 'dead' | 'abandoned';
}

export interface RunListFilter {
  team: TeamScope;
  jobId?: string;
  pool?: string;
  status?: RunStatus;
  sinceMs?: number;
  untilMs?: number;
  cursor?: string;
  limit: number;
}

export type RunWithEvents = RunRecord & { events: RunEvent[] };

export type ReplayOutcome =
  | { kind: 'replayed'; run: RunRecord }
  | { kind: 'not_found' }
  | { kind: 'invalid_state'; run: RunRecord };

export interface StoreNotifications {
  /**
   * Runs became leasable in `pool`, or were given a later ready time there (dispatch, re-offer,
   * replay, trigger, a retry scheduled): a long-poll waiter re-reads `nextReadyAtMs` and arms
   * itself for it, so a retry wakes a worker parked before the failure was recorded.
   */
  onRunsReady(listener: (pool: string) => void): () => void;
  /** Timers due within the near horizon were written (create, patch, resume, repair). */
  onNearTimers(listener: (timers: LoadedTimer[]) => void): () => void;
  /**
   * Near-timer announcements may have been lost (PostgreSQL: the LISTEN connection was down,
   * or loading announced timers failed): a loader should reread its whole window. The
   * embedded store announces in-process after its own commits and never loses one.
   */
  onNearTimersMissed(listener: () => void): () => void;
}

export interface Store extends StoreNotifications, CapacityStore {
  readonly kind: 'sqlite' | 'postgres';
  /** Takes `ahead` and `finish` dispatch items (DispatchItem.stage); the scheduler asks. */
  readonly dispatchesAhead: boolean;

  // Jobs ---------------------------------------------------------------------------------
  /** Creates jobs with their first timers, several callers sharing one commit. */
  createJobs(items: CreateJobInput[], nowMs: number): Promise<CreateJobOutcome[]>;
  getJob(team: TeamScope, jobId: string): Promise<JobRecord | null>;
  listJobs(filter: JobListFilter): Promise<Page<JobRecord>>;
  changeJob(change: JobChange): Promise<JobChangeOutcome>;
  /** Cancels the job and deletes its pending timer; idempotent (a cancelled job answers as is). */
  cancelJob(team: TeamScope, jobId: string, nowMs: number): Promise<JobRecord | null>;
  /**
   * `cancelJob` for each id, in one transaction; answers in order (null: no such job in the
   * scope). An id given twice answers the same cancelled job twice.
   */
  cancelJobs(team: TeamScope, jobIds: readonly string[], nowMs: number): Promise<(JobRecord | null)[]>;
  /** Cancels every non-cancelled job of `team` whose key starts with `prefix`; answers the count. */
  cancelJobsByKeyPrefix(team: string, prefix: string, nowMs: number): Promise<number>;
  /** A run outside the schedule, ready now (`POST /v1/jobs/{id}/trigger`). */
  triggerJob(team: TeamScope, jobId: string, nowMs: number): Promise<RunRecord | null>;

  // Shard ownership ------------------------------------------------------------------------
  /**
   * Grants this node every listed shard that is free, expired or already its own, each with
   * a new token above any granted before. `force` takes shards from a holder known dead
   * (embedded mode, after the data-directory lock proved the previous process gone).
   */
  acquireShardLeases(nodeId: string, shards: readonly number[], ttlMs: number, nowMs: number,
    options?: { force?: boolean }): Promise<ShardLease[]>;
  /** Extends the leases this node still holds with these tokens; answers the ones extended. */
  renewShardLeases(nodeId: string, leases: readonly ShardLease[], ttlMs: number, nowMs: number): Promise<ShardLease[]>;
  releaseShardLeases(nodeId: string, leases: readonly ShardLease[]): Promise<void>;
  listShardLeases(): Promise<ShardLease[]>;

  // Timers and dispatch --------------------------------------------------------------------
  loadTimers(query: LoadTimersQuery): Promise<LoadedTimer[]>;
  /** One transaction per call; each item fenced by its shard token (invariants 1–3, 7). */
  dispatch(items: readonly DispatchItem[], nowMs: number): Promise<DispatchResult[]>;
  /** Active recurring jobs with no pending timer (the silent miss). */
  findJobsWithoutTimer(limit: number): Promise<JobRecord[]>;
  /** Writes the timer only if the job is still active and still has none; answers whether it wrote. */
  repairJobTimer(jobId: string, expectedVersion: number, timer: TimerWrite, nowMs: number): Promise<boolean>;
  countJobsWithoutTimer(): Promise<number>;
  /**
   * Releases `buffer_one` runs still held though no other run of their job is active: what the
   * end of the run before should have released. The reconciler's net for a release missed
   * (PostgreSQL: a PATCH to `buffer_one` committed while a completion of the job ran, and a
   * dispatch held the next run in the same instant; the completion read the old overlap).
   * Answers the runs released, at most `limit` jobs' worth.
   */
  releaseStrandedHeldRuns(nowMs: number, limit: number): Promise<{ runId: string; jobId: string }[]>;
  /**
   * Silent jobs of `team` (every team for null) at `nowMs`, the longest silent first (by
   * `silentSinceMs`, then job id); `after` continues past that key (keyset paging).
   */
  findSilentJobs(team: TeamScope, nowMs: number, limit: number, after?: SilentJobsCursor): Promise<SilentJob[]>;
  /**
   * Jobs whose silence was announced (by the alert webhook) and whose end was not yet: each
   * with the `silentSinceMs` announced. By job, at most `limit`.
   */
  listSilenceAnnounced(limit: number): Promise<AnnouncedSilence[]>;
  /** Records that a job's silence since `silentSinceMs` was announced, or (null) that its end was. */
  setSilenceAnnounced(jobId: string, silentSinceMs: number | null): Promise<void>;

  // Workers --------------------------------------------------------------------------------
  leaseRuns(request: LeaseRunsRequest): Promise<LeasedRun[]>;
  /**
   * Optional: lets a dispatch lease the runs it makes ready to parked waiters in its own
   * transaction, instead of a lease transaction per waiter after it (both stores have it).
   * A store without it leaves waiters to onRunsReady alone, which is always correct.
   */
  setDispatchLeaser?(leaser: DispatchLeaser | null): void;
  heartbeatRun(team: TeamScope, runId: string, fencingToken: string, nowMs: number): Promise<HeartbeatOutcome>;
  completeRun(request: CompleteRequest): Promise<CompleteOutcome>;
  /** Re-offers, kills or abandons runs whose worker lease ran out before `nowMs`. */
  expireRunLeases(nowMs: number, limit: number): Promise<ExpiredLease[]>;
  /**
   * Earliest worker-lease expiry of a running run, or null: when `expireRunLeases` next has
   * work. Retries are not deadlines here: a `retry_wait` run is leasable from its ready time
   * with no write, and waiters arm for it through `nextReadyAtMs`.
   */
  nextLeaseExpiryMs(): Promise<number | null>;
  /** Earliest `readyAtMs` of a leasable run in the pool, for long-poll waiters. */
  nextReadyAtMs(team: TeamScope, pool: string): Promise<number | null>;
  replayRun(team: TeamScope, runId: string, nowMs: number): Promise<ReplayOutcome>;

  // History --------------------------------------------------------------------------------
  getRun(team: TeamScope, runId: string): Promise<RunWithEvents | null>;
  listRuns(filter: RunListFilter): Promise<Page<RunRecord>>;

  // Health ---------------------------------------------------------------------------------
  ping(): Promise<void>;
  close(): Promise<void>;
}

/** Lanes in the order workers are served. */
export const laneOrder: readonly Lane[] = ['P0', 'P1', 'P2'];


// Capacity: pauses, resource caps, dispatch caps ------------------------------------------
// (docs/API.md "Capacity"; lease-gates.ts in each store.) A lease takes no run of a paused
// (pool, team) and no run tagged with a resource whose cap is reached; a resource slot is
// held while the run is `running` under the attempt that took it, so completion, failure,
// lease expiry and cancel free it in their own transaction with no write of their own.

/** The team of a pause that stops every team's runs in the pool (an admin's pause). */
export const allTeamsPause = '*';

export interface ResourceUsage {
  name: string;
  /** Null: no cap declared (unlimited). */
  maxConcurrency: number | null;
  inUse: number;
}

export interface PoolPause {
  pool: string;
  /** A team, or `allTeamsPause`. */
  team: string;
  atMs: number;
}

export interface CapacityStore {
  /** Teams with runs ready by `nowMs` in each lane of the pool (within the scope): the lease planner's input. */
  readyLaneTeams(team: TeamScope, pool: string, nowMs: number): Promise<Map<Lane, string[]>>;
  putResourceCap(name: string, maxConcurrency: number, nowMs: number): Promise<void>;
  /** Answers whether a cap was there to delete. */
  deleteResourceCap(name: string): Promise<boolean>;
  /** Each named resource (every capped one when `names` is absent) with its cap and the runs holding a slot. */
  resourceUsage(names?: readonly string[]): Promise<ResourceUsage[]>;
  /** Pauses (`paused`) or resumes the team's runs in the pool; `allTeamsPause` for every team. */
  setPoolPause(pool: string, team: string, paused: boolean, nowMs: number): Promise<void>;
  /** Resumes every pause of the pool (an admin's resume). */
  clearPoolPauses(pool: string): Promise<void>;
  listPoolPauses(pool: string | null): Promise<PoolPause[]>;
  setLaneDispatchCap(lane: Lane, dispatchPerS: number | null): Promise<void>;
  listLaneDispatchCaps(): Promise<Map<Lane, number>>;
  /**
   * Takes up to `wanted` tokens from the bucket `key` (refilled at `ratePerS`, holding at most a
   * second's worth); answers how many were granted. Shared by every node of the store.
   */
  takeDispatchTokens(key: string, ratePerS: number, wanted: number, nowMs: number): Promise<number>;
  /** Gives back tokens taken and not used (a lease that found fewer runs). */
  returnDispatchTokens(key: string, ratePerS: number, count: number): Promise<void>;
}
