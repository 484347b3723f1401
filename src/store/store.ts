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
import { leasedEventDetail, readyMaxOf } from '../domain/run-lifecycle.js';
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
import type { ClusterMembership, MembershipOptions } from './membership.js';
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
  /** The job's team, for the per-team dispatch counter (`tickler_runs_dispatched_total`); absent where a caller built the timer without it. */
  team?: string;
  /**
   * The timer's run was written ahead of its fire time (`Store.writeRunsAhead`): firing it
   * only finishes the job (`Store.finishAhead`). Absent (or false) for every other timer.
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

/**
 * What every firing item carries: the timer, its job, and the shard token that fences it. Each
 * item is checked against the highest token granted for its shard in the transaction that
 * writes it (invariant 2), and the timer must still be pending and its job's (invariant 7).
 */
export interface FencedTimer {
  shard: number;
  /** The shard lease token this node holds; rejected when below the highest granted. */
  shardToken: string;
  timerId: string;
  jobId: string;
}

/** A timer fired whole, at its fire time (`Store.dispatch`): its occurrences recorded, its job's next timer written. */
export interface DispatchItem extends FencedTimer {
  occurrences: OccurrenceWrite[];
  /** Occurrences summarised in one event instead of a row each (catch-up bound). */
  summary?: { skippedCount: number; fromScheduledAtMs: number; toScheduledAtMs: number; reason: string };
  /** The recurring job's next timer, written in the same transaction (invariant 3). */
  nextTimer: TimerWrite | null;
}

/**
 * A one-shot job's timer whose run is written before its fire time (`Store.writeRunsAhead`), so
 * that a herd's runs are in the ledger before its instant and only leases and completions are
 * left at it. A one-shot has no next timer and no catch-up summary: only its occurrences.
 */
export interface WriteAheadItem extends FencedTimer {
  occurrences: OccurrenceWrite[];
}

/** A timer whose run was written ahead, finished at (or after) its fire time (`Store.finishAhead`). */
export type FinishAheadItem = FencedTimer;

/**
 * The ledger's reason when a change to a job takes back (or moves) a run written ahead of its
 * fire time (`Store.writeRunsAhead`): the same words on every store.
 */
export const jobCancelledBeforeDueReason = 'the job was cancelled before the run came due';
export const jobChangedBeforeDueReason = 'the job was changed before the run came due';

/** A run a firing wrote, or found already there (`inserted: false`, invariant 1), and the status it ended in. */
export interface FiredRun {
  runId: string;
  status: RunStatus;
  inserted: boolean;
}

/** An item of any firing operation that wrote nothing. */
export type FiringRefused =
  /** The shard token was stale. */
  | { kind: 'stale_token'; timerId: string }
  /** The timer was no longer pending (cancelled, paused, patched, or fired already). */
  | { kind: 'timer_gone'; timerId: string };

export type DispatchResult =
  /** Timer consumed; `runs` lists each occurrence's run id and the status it ended in. */
  | {
      kind: 'dispatched';
      timerId: string;
      runs: FiredRun[];
      /** The job's pool. */
      pool: string;
      /** Id of the next timer written from `nextTimer` (null when none), so the owner can wheel it. */
      nextTimerId: string | null;
    }
  | FiringRefused;

export type WriteAheadResult =
  /**
   * The run is written `ready` with its ready time at the fire time (no lease takes it before)
   * and the timer stays pending, marked (`LoadedTimer.dispatchedAhead`), the job active: the
   * owner wheels it to be finished (`Store.finishAhead`). `runs` is empty when an earlier call
   * wrote them (the timer was marked already).
   */
  | { kind: 'written_ahead'; timerId: string; runs: FiredRun[] }
  /**
   * Nothing written: the job has an active run, whose overlap is judged at the fire time (it
   * may have ended by then). The timer stays as it was, to be fired whole (`Store.dispatch`).
   */
  | { kind: 'left_for_fire_time'; timerId: string }
  | FiringRefused;

export type FinishAheadResult =
  /** The marked timer is consumed and its job, if still active, done; no run is written. */
  | { kind: 'finished'; timerId: string }
  /** `timer_gone` too for a timer not marked: its whole firing is still to come. */
  | FiringRefused;

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

/** The ready part of a lease (`readyMax`) and the `leased` event's detail: run-lifecycle.ts decides both. */
export { leasedEventDetail, readyMaxOf };

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
 * A parked long-poll lease, claimed by a firing so that it leases the waiter runs in its own
 * transaction (see `Store.setParkedWaiters`).
 */
export interface ParkedWaiterClaim {
  /** What to lease: the waiter's pool, team, max, lease length and worker, at the firing's time. */
  request: LeaseRunsRequest;
  /**
   * Called once: after the commit with the runs leased (perhaps none: the waiter keeps
   * waiting), or with none when the transaction failed (nothing it leased was committed).
   */
  settle(runs: LeasedRun[]): void;
}

/**
 * Claims the next parked waiter of `pool` that nothing is serving yet, or answers null (the
 * long-poll side, `LeaseWaiters`, implements it).
 */
export type ClaimParkedWaiter = (pool: string, nowMs: number) => ParkedWaiterClaim | null;

/** For the stores: a claim a firing served, with the runs it leased for it; settled after the commit. */
export interface ServedWaiter {
  claim: ParkedWaiterClaim;
  runs: LeasedRun[];
}

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

export interface Store extends StoreNotifications, TeamLimitsStore, CapacityStore {
  readonly kind: 'sqlite' | 'postgres';

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
  /*
   * Firing a timer. Each of the three is one transaction per call, each item fenced by its
   * shard token (invariants 1–3, 7), answered in order. A one-shot job's firing may be split in
   * two (DESIGN.md flow 5, a herd): `writeRunsAhead` before the fire time, `finishAhead` after
   * it; every other timer is fired whole by `dispatch`. Calls made in one event-loop turn share
   * a transaction on the embedded store (its group commit); on PostgreSQL each is its own.
   * A change to the job between the two stages (cancel, pause, a PATCH of its timing or pool)
   * takes back or moves the run not yet due, in the same transaction as the change.
   */
  /**
   * Fires timers whole: records each occurrence's run through the job's overlap policy,
   * consumes the timer and writes the job's next one (or ends a one-shot job). A timer marked
   * by `writeRunsAhead` (written ahead, then dispatching ahead turned off) finds its run
   * already there (`inserted: false`) and is consumed.
   */
  dispatch(items: readonly DispatchItem[], nowMs: number): Promise<DispatchResult[]>;
  /**
   * Writes the runs of one-shot timers before their fire time: `ready`, leasable from the fire
   * time; each timer stays pending, marked, its job active. Only for a job with no active run.
   */
  writeRunsAhead(items: readonly WriteAheadItem[], nowMs: number): Promise<WriteAheadResult[]>;
  /**
   * Finishes timers whose runs were written ahead: consumes each marked timer and marks its job
   * done. Reads no job's spec (a herd's finishes come all at once); the runs come due now, so
   * parked waiters of their pools are served in this transaction (`setParkedWaiters`).
   */
  finishAhead(items: readonly FinishAheadItem[], nowMs: number): Promise<FinishAheadResult[]>;
  /** Active recurring jobs with no pending timer (the silent miss). */
  findJobsWithoutTimer(limit: number): Promise<JobRecord[]>;
  /** Writes the timer only if the job is still active and still has none; answers whether it wrote. */
  repairJobTimer(jobId: string, expectedVersion: number, timer: TimerWrite, nowMs: number): Promise<boolean>;
  countJobsWithoutTimer(): Promise<number>;
  /**
   * Releases `buffer_one` runs still held though no other run of their job is active: what the
   * end of the run before should have released. Answers the runs released, at most `limit`
   * jobs' worth. The reconciler calls it every pass, as the net for this race on PostgreSQL
   * (test/store/postgres-held-race.test.ts):
   *
   * 1. Run A of job J (overlap `allow`) is running; its completion's statement starts, reads
   *    J's overlap and whether J holds a run (as of the statement's snapshot: `allow`, none),
   *    and waits for A's row lock, held by another transaction (a heartbeat, say).
   * 2. Meanwhile a PATCH of J to `buffer_one` commits, and a dispatch of J's next occurrence B
   *    sees A active under `buffer_one` and writes B held behind it.
   * 3. The completion gets A's lock and ends A, but from what it read in step 1 it has nothing
   *    to release: B stays held with no run left to release it.
   *
   * Under READ COMMITTED a statement that waited for a row lock rechecks only that row, not the
   * job it read beside it: closing the race in the completion would need every completion to
   * lock its job row before reading it (today only one that may release a held run does),
   * where this release costs a pass one indexed read of the held runs. The
   * embedded store has one writer and never strands a run this way; it implements the same
   * release all the same.
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
   * Optional: lets `dispatch`, `writeRunsAhead` and `finishAhead` lease the runs they make
   * ready to long-poll waiters parked for their pools, inside their own transaction, instead
   * of a lease transaction per waiter after it (both stores have it; null detaches). A store
   * without it leaves waiters to onRunsReady alone, which is always correct.
   */
  setParkedWaiters?(claimWaiter: ClaimParkedWaiter | null): void;
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

  // Cluster membership (membership.ts) -------------------------------------------------------
  /**
   * One node's membership of the cluster, for its heartbeats (`ClusterMembership`): the members
   * every node of the database sees (PostgreSQL), or the nodes of this process, the one the
   * data-directory lock lets in (SQLite; membership.ts says what each store answers). Close it
   * before the store.
   */
  openMembership(options: MembershipOptions): Promise<ClusterMembership>;
}

/** Lanes in the order workers are served. */
export const laneOrder: readonly Lane[] = ['P0', 'P1', 'P2'];

// Team limits and create quotas --------------------------------------------------------------
// (docs/API.md "Team limits", DESIGN.md "Quotas across nodes")

/** The entry every team without one of its own takes (`PUT /v1/teams/default/limits`, `default` in `--limits FILE`). */
export const defaultLimitsEntry = 'default';

/** A team's limits as stored; null is unlimited. */
export interface TeamLimitsEntry {
  /** The team, or `defaultLimitsEntry`. */
  team: string;
  createPerS: number | null;
  pendingMax: number | null;
  dispatchPerS: number | null;
  /** Its share in fair leasing (1 unless set). */
  weight: number;
}

/** What a create of one team is held to; built by the service from its limits. */
export interface CreateQuota {
  team: string;
  createPerS: number | null;
  pendingMax: number | null;
}

export type QuotaLimitName = 'create_per_s' | 'pending_max';

export type QuotaCreateOutcome =
  | { kind: 'created'; outcomes: CreateJobOutcome[] }
  /** Nothing written; the client may send the same request again after `retryAfterMs`. */
  | { kind: 'refused'; limit: QuotaLimitName; retryAfterMs: number; pending?: number };

/**
 * How long a team's pending count (its active counted jobs and its ready runs, counted up to
 * `pending_max`) serves its creates before it is counted again; creates in between add to it.
 * A drain (runs leased) is seen at most this late, and a refusal for `pending_max` says to
 * come back after it.
 */
export const pendingRecountIntervalMs = 1000;

export interface TeamLimitsStore {
  /** Every stored entry, the default's included. */
  listTeamLimits(): Promise<TeamLimitsEntry[]>;
  /**
   * Writes each entry, replacing the team's. An entry with `pendingMax` marks the team's active
   * jobs as counted (every team's, for the default entry), so its pending count sees jobs created
   * before it had the limit.
   */
  putTeamLimits(entries: readonly TeamLimitsEntry[], nowMs: number): Promise<void>;
  /** Removes the team's entry; answers whether there was one. */
  deleteTeamLimits(team: string): Promise<boolean>;
  /**
   * `createJobs` for one team held to its quota, in one transaction with the team's bucket row
   * (locked on PostgreSQL, so every node takes from the same tokens): the items all fit and are
   * created (their jobs counted toward `pending_max` when the quota has one), or nothing is
   * written. Every item counts, a keyed repeat of a job that exists as well.
   */
  createJobsWithinQuota(items: CreateJobInput[], nowMs: number, quota: CreateQuota): Promise<QuotaCreateOutcome>;
}

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
