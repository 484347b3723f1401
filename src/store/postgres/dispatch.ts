/**
 * The sink (DESIGN.md flow 5): one transaction per call, whatever the number of timers.
 *
 * 1. The shard rows are locked FOR KEY SHARE: an acquire that grants a newer token waits for
 *    this transaction, and this transaction sees any newer token that committed first; a
 *    renewal of the lease does not wait for it (`shardFenceSql`). An
 *    item whose token is below the shard's current one writes nothing (invariant 2).
 * 2. The jobs are locked FOR UPDATE in job_id order (so concurrent dispatches cannot
 *    deadlock). A timer is still pending only if its job still names it (`jobs.timer_id`);
 *    a cancelled, paused or patched job no longer does (invariant 7).
 *    A one-shot job's firing may come in two calls: `writeRunsAhead` writes the run, leasable
 *    from its fire time, and names it on the job (`jobs.ahead_run_id`, schema v7) while the
 *    timer stays pending; `finishAhead`, at the fire time, consumes that timer and ends the
 *    job. A change to the job in between takes back or moves the run (jobs.ts).
 * 3. Each occurrence becomes a run (`ON CONFLICT (run_id) DO NOTHING`, invariant 1), after
 *    the job's overlap policy; the timer is deleted and the next one written in the same
 *    transaction (invariant 3); every new status appends a run event (invariant 6).
 *
 * Planning happens in memory between the reads and the writes, so the writes are a fixed
 * handful of batched statements.
 */
import { decideOverlap, type ActiveRun } from '../../domain/overlap.js';
import { runIdOf } from '../../domain/identity.js';
import type { JobSpec, JobState, RunStatus } from '../../domain/types.js';
import {
  leaseCameBackShort, type ClaimParkedWaiter, type DispatchItem, type DispatchResult, type FencedTimer, type FinishAheadItem, type FiredRun,
  type FinishAheadResult, type FiringRefused, type OccurrenceWrite, type ServedWaiter, type WriteAheadItem, type WriteAheadResult,
} from '../store.js';
import { numberArray, textArray } from './array-literals.js';
import { prepared, type Transaction } from './connection.js';
import { transaction, type StoreContext } from './context.js';
import { leaseRunsWithin } from './run-lease.js';
import {
  appendEvents, deleteTimers, insertRuns, insertTimers, newTimerId, occurrenceRun, type NewRun, type NewRunEvent, type NewTimer,
} from './writes.js';

interface LockedJob {
  jobId: string;
  team: string;
  state: JobState;
  spec: JobSpec;
  shard: number;
  version: number;
  timerId: string | null;
  /** The run written ahead for the pending timer (`writeRunsAhead`), until the timer is consumed. */
  aheadRunId: string | null;
  nextFireAtMs: number | null;
  nextScheduledAtMs: number | null;
  changed: boolean;
}

type RunOutcome = FiredRun;

/** Everything one dispatch call will write, built in memory from what it read. */
class DispatchPlan {
  readonly newRuns = new Map<string, { run: NewRun; outcome: RunOutcome }>();
  readonly cancelRunIds = new Set<string>();
  readonly events: NewRunEvent[] = [];
  readonly consumedTimers: { timerId: string; fireAtMs: number }[] = [];
  readonly nextTimers: NewTimer[] = [];
  readonly readyPools = new Set<string>();

  constructor(readonly nowMs: number, readonly existingStatus: Map<string, RunStatus>,
    readonly activeByJob: Map<string, ActiveRun[]>) {}
}

/** `Store.dispatch`: timers fired whole. */
export function dispatch(context: StoreContext, items: readonly DispatchItem[], nowMs: number,
  claimWaiter: ClaimParkedWaiter | null = null): Promise<DispatchResult[]> {
  return fire(context, 'dispatch', items, nowMs, claimWaiter, planItem);
}

/** `Store.writeRunsAhead`: one-shot runs written before their fire time. */
export function writeRunsAhead(context: StoreContext, items: readonly WriteAheadItem[], nowMs: number,
  claimWaiter: ClaimParkedWaiter | null = null): Promise<WriteAheadResult[]> {
  return fire(context, 'writeRunsAhead', items, nowMs, claimWaiter, planAhead);
}

/** `Store.finishAhead`: timers whose runs were written ahead, consumed. */
export function finishAhead(context: StoreContext, items: readonly FinishAheadItem[], nowMs: number,
  claimWaiter: ClaimParkedWaiter | null = null): Promise<FinishAheadResult[]> {
  return fire(context, 'finishAhead', items, nowMs, claimWaiter, planFinish);
}

/**
 * One firing transaction: the fence, the locks and reads, each item planned by `planOne` (for
 * a pending timer of an active job), the plan written, and parked waiters served.
 */
function fire<Item extends FencedTimer & { occurrences?: readonly OccurrenceWrite[] }, Result>(context: StoreContext,
  operation: string, items: readonly Item[], nowMs: number, claimWaiter: ClaimParkedWaiter | null,
  planOne: (plan: DispatchPlan, job: LockedJob, item: Item) => Result): Promise<(Result | FiringRefused)[]> {
  if (items.length === 0) return Promise.resolve([]);
  const served: ServedWaiter[] = [];
  return transaction(context, operation, async (tx) => {
    const currentTokens = await lockShardTokens(tx, items.map((item) => item.shard));
    const fenced = items.map((item) => !isStale(item.shardToken, currentTokens.get(item.shard)));
    const jobIds = [...new Set(items.filter((_, index) => fenced[index]).map((item) => item.jobId))];
    const jobs = await lockJobs(tx, jobIds);
    const runIds = items.flatMap((item, index) =>
      (fenced[index] ? (item.occurrences ?? []).map((occurrence) => runIdOf(item.jobId, occurrence.scheduledAtMs)) : []));
    const { existingStatus, activeByJob } = await readRuns(tx, runIds, jobIds);
    const plan = new DispatchPlan(nowMs, existingStatus, activeByJob);
    const results = items.map((item, index): Result | FiringRefused => {
      if (!fenced[index]) return { kind: 'stale_token', timerId: item.timerId };
      const job = jobs.get(item.jobId);
      if (job === undefined || job.timerId !== item.timerId || job.nextFireAtMs === null) {
        return { kind: 'timer_gone', timerId: item.timerId };
      }
      if (job.state !== 'active') {
        // A pending timer of a job that is not active should not exist; drop it so no wheel
        // loads it again, and fire nothing (invariant 7).
        plan.consumedTimers.push({ timerId: job.timerId, fireAtMs: job.nextFireAtMs });
        Object.assign(job, { timerId: null, aheadRunId: null, nextFireAtMs: null, nextScheduledAtMs: null, changed: true });
        return { kind: 'timer_gone', timerId: item.timerId };
      }
      return planOne(plan, job, item);
    });
    await writePlan(tx, plan, [...jobs.values()].filter((job) => job.changed));
    if (claimWaiter !== null) await leaseToParkedWaiters(tx, claimWaiter, plan.readyPools, nowMs, served, context.leaseNodeId);
    for (const pool of plan.readyPools) tx.readyPools.add(pool);
    return results;
  }).then((results) => {
    for (const { claim, runs } of served) claim.settle(runs);
    return results;
  }, (error: unknown) => {
    // Nothing leased was committed: the claimed waiters go back to waiting.
    for (const { claim } of served) claim.settle([]);
    throw error;
  });
}

/**
 * Inside a firing's transaction: leases the runs it made ready to the waiters parked for
 * their pools, in the waiters' order, until one is answered short, as the embedded store
 * does. Each waiter served saves a lease statement (a round trip and a commit) after the
 * dispatch; those it does not serve are woken by onRunsReady as before.
 */
async function leaseToParkedWaiters(tx: Transaction, claimWaiter: ClaimParkedWaiter, readyPools: ReadonlySet<string>,
  nowMs: number, served: ServedWaiter[], leaseNodeId: string | null): Promise<void> {
  for (const pool of readyPools) {
    for (let claim = claimWaiter(pool, nowMs); claim !== null; claim = claimWaiter(pool, nowMs)) {
      // Pushed before leasing, so that a failure settles this claim too.
      const entry: ServedWaiter = { claim, runs: [] };
      served.push(entry);
      entry.runs = await leaseRunsWithin(tx, claim.request, leaseNodeId);
      if (leaseCameBackShort(claim.request, entry.runs)) break;
    }
  }
}

/** A token below the highest granted for its shard; a shard never leased fences nothing. */
function isStale(token: string, currentToken: string | undefined): boolean {
  if (currentToken === undefined) return false;
  let held: bigint;
  try {
    held = BigInt(token);
  } catch {
    return true; // not a token this store issued
  }
  return held < BigInt(currentToken);
}

/**
 * The dispatch fence's read of its shards' tokens. `FOR KEY SHARE` conflicts only with a
 * change of `token` (a key: it has a unique index, schema version 2), so an acquire that
 * bumps the token waits for the dispatches in flight on its shards, and they commit before
 * it or see its token; a renewal or release, which changes only `expires_at` or `node_id`,
 * never waits behind a dispatch (a renewal stuck behind dispatches on a busy node let its
 * leases lapse locally, and the node stopped firing).
 */
export const shardFenceSql =
  'SELECT shard, token::text AS token FROM shard_leases WHERE shard = ANY($1::int[]) ORDER BY shard FOR KEY SHARE';

const shardFenceStatement = prepared(shardFenceSql);

async function lockShardTokens(tx: Transaction, shards: number[]): Promise<Map<number, string>> {
  const result = await tx.query<{ shard: number; token: string }>(shardFenceStatement, [numberArray([...new Set(shards)])]);
  return new Map(result.rows.map((row) => [row.shard, row.token]));
}

const lockJobsSql = prepared(
  `SELECT job_id, team, state, spec, shard, version, timer_id, ahead_run_id, next_fire_at, next_scheduled_at
     FROM jobs WHERE job_id = ANY($1::text[]) ORDER BY job_id FOR UPDATE`);

async function lockJobs(tx: Transaction, jobIds: string[]): Promise<Map<string, LockedJob>> {
  if (jobIds.length === 0) return new Map();
  const result = await tx.query<{
    job_id: string; team: string; state: JobState; spec: JobSpec; shard: number; version: number;
    timer_id: string | null; ahead_run_id: string | null; next_fire_at: number | null; next_scheduled_at: number | null;
  }>(lockJobsSql, [textArray(jobIds)]);
  return new Map(result.rows.map((row) => [row.job_id, {
    jobId: row.job_id, team: row.team, state: row.state, spec: row.spec, shard: row.shard, version: row.version,
    timerId: row.timer_id, aheadRunId: row.ahead_run_id, nextFireAtMs: row.next_fire_at, nextScheduledAtMs: row.next_scheduled_at, changed: false,
  }]));
}

const readRunsSql = prepared(
  `SELECT run_id, job_id, status, held, dispatched_at FROM runs WHERE run_id = ANY($1::text[])
   UNION
   SELECT q.run_id, q.job_id, q.status, q.held, r.dispatched_at
     FROM active_runs q LEFT JOIN runs r ON r.run_id = q.run_id WHERE q.job_id = ANY($2::text[])`);

/**
 * Runs that already exist (a duplicate dispatch answers them, inserted: false) and each
 * job's active runs for its overlap policy. Active runs are read, not locked: a completion
 * racing this transaction either committed first (and is seen) or finds the held run this
 * transaction writes when it releases (it locks the job row first, see runs.ts).
 */
async function readRuns(tx: Transaction, runIds: string[], jobIds: string[]): Promise<{
  existingStatus: Map<string, RunStatus>; activeByJob: Map<string, ActiveRun[]>;
}> {
  const existingStatus = new Map<string, RunStatus>();
  const activeByJob = new Map<string, ActiveRun[]>();
  if (jobIds.length === 0) return { existingStatus, activeByJob };
  const result = await tx.query<{ run_id: string; job_id: string; status: RunStatus; held: boolean; dispatched_at: number | null }>(
    readRunsSql,
    [textArray(runIds), textArray(jobIds)]);
  const wanted = new Set(runIds);
  for (const row of result.rows) {
    if (wanted.has(row.run_id)) existingStatus.set(row.run_id, row.status);
    if (row.status === 'ready' || row.status === 'running' || row.status === 'retry_wait') {
      const list = activeByJob.get(row.job_id) ?? [];
      list.push({ runId: row.run_id, status: row.status, held: row.held,
        dispatchedAtMs: row.dispatched_at === null ? Number.NEGATIVE_INFINITY : Number(row.dispatched_at) });
      activeByJob.set(row.job_id, list);
    }
  }
  return { existingStatus, activeByJob };
}

function planItem(plan: DispatchPlan, job: LockedJob, item: DispatchItem): DispatchResult {
  const runs: RunOutcome[] = [];
  for (const occurrence of item.occurrences) runs.push(planOccurrence(plan, job, occurrence, item.shardToken));
  if (item.summary !== undefined && runs.length > 0) {
    plan.events.push({
      runId: runs[runs.length - 1]!.runId, atMs: plan.nowMs, type: 'catch_up_summary', fromStatus: null, toStatus: null,
      detail: { ...item.summary },
    });
  }
  plan.consumedTimers.push({ timerId: job.timerId!, fireAtMs: job.nextFireAtMs! });
  job.changed = true;
  // A whole firing of a timer whose run was written ahead (dispatching ahead turned off
  // meanwhile) found that run above, answered it as not inserted, and consumes the timer.
  job.aheadRunId = null;
  let nextTimerId: string | null = null;
  if (item.nextTimer === null) {
    job.state = 'done';
    job.version += 1;
    job.timerId = null;
    job.nextFireAtMs = null;
    job.nextScheduledAtMs = null;
  } else {
    const timer: NewTimer = { timerId: newTimerId(), jobId: job.jobId, shard: job.shard, ...item.nextTimer };
    plan.nextTimers.push(timer);
    nextTimerId = timer.timerId;
    job.timerId = timer.timerId;
    job.nextFireAtMs = timer.fireAtMs;
    job.nextScheduledAtMs = timer.scheduledAtMs;
  }
  return { kind: 'dispatched', timerId: item.timerId, runs, pool: job.spec.pool, nextTimerId };
}

/**
 * `writeRunsAhead`: the run is written ready from its fire time and named on the job, whose
 * timer stays pending. Only for a job with no active run: overlap with one is judged at the
 * fire time (the run may have ended by then), so such a timer is left as it was, to be fired
 * whole. A timer already written ahead (an earlier pass) is answered as awaiting its finish.
 */
function planAhead(plan: DispatchPlan, job: LockedJob, item: WriteAheadItem): WriteAheadResult {
  if (job.aheadRunId !== null) return { kind: 'written_ahead', timerId: item.timerId, runs: [] };
  if ((plan.activeByJob.get(job.jobId)?.length ?? 0) > 0) return { kind: 'left_for_fire_time', timerId: item.timerId };
  const runs = item.occurrences.map((occurrence) =>
    planOccurrence(plan, job, occurrence, item.shardToken, Math.max(plan.nowMs, occurrence.fireAtMs)));
  job.aheadRunId = runs.at(-1)?.runId ?? null;
  job.changed = true;
  return job.aheadRunId === null
    ? { kind: 'left_for_fire_time', timerId: item.timerId }
    : { kind: 'written_ahead', timerId: item.timerId, runs };
}

/**
 * `finishAhead`: the timer whose run was written ahead is consumed and the job done; the
 * run comes due now, so its pool's parked waiters are served in this transaction. A timer
 * not written ahead is left pending (its whole firing is still to come).
 */
function planFinish(plan: DispatchPlan, job: LockedJob, item: FinishAheadItem): FinishAheadResult {
  if (job.aheadRunId === null) return { kind: 'timer_gone', timerId: item.timerId };
  plan.consumedTimers.push({ timerId: job.timerId!, fireAtMs: job.nextFireAtMs! });
  Object.assign(job, {
    state: 'done', version: job.version + 1, timerId: null, aheadRunId: null, nextFireAtMs: null, nextScheduledAtMs: null,
    changed: true,
  });
  plan.readyPools.add(job.spec.pool);
  return { kind: 'finished', timerId: item.timerId };
}

/** `readyAtMs`: when a ready run becomes leasable (now, or its fire time for one written ahead). */
function planOccurrence(plan: DispatchPlan, job: LockedJob, occurrence: OccurrenceWrite, shardToken: string,
  readyAtMs = plan.nowMs): RunOutcome {
  const runId = runIdOf(job.jobId, occurrence.scheduledAtMs);
  const known = plan.existingStatus.get(runId) ?? plan.newRuns.get(runId)?.outcome.status;
  if (known !== undefined) return { runId, status: known, inserted: false };
  const active = plan.activeByJob.get(job.jobId) ?? [];
  plan.activeByJob.set(job.jobId, active);
  let status: RunStatus = occurrence.status;
  let held = false;
  let heldReason: string | null = null;
  let lastError = occurrence.status === 'ready' ? null : occurrence.reason ?? occurrence.status;
  if (occurrence.status === 'ready') {
    const decision = decideOverlap(job.spec.overlap, active, occurrence.scheduledAtMs);
    if (decision.action === 'skip') {
      status = 'skipped_overlap';
      lastError = decision.reason;
    } else {
      if (decision.action === 'replace') cancelRuns(plan, decision.cancelRunIds, active, runId);
      held = decision.action === 'hold';
      if (decision.action === 'hold') heldReason = decision.reason;
      active.push({ runId, status: 'ready', held, dispatchedAtMs: plan.nowMs });
      // A run written ahead is announced too, though not leasable yet: the pool's parked
      // waiters find nothing and arm a timer for its ready time (lease-waiters.ts): its job's
      // finish, which used to wake them, comes later (TimingConfig.finishAheadDelayMs).
      if (!held) plan.readyPools.add(job.spec.pool);
    }
  }
  const outcome: RunOutcome = { runId, status, inserted: true };
  const { run, event } = occurrenceRun(job, occurrence, runId, plan.nowMs, {
    status, lastError, held, readyAtMs,
    // The shard token in the ledger lets a history checker prove no stale token was accepted.
    dispatchedDetail: status !== 'ready'
      ? null
      : { shard_token: shardToken, ...(held ? { held: true, reason: heldReason } : {}), ...(readyAtMs > plan.nowMs ? { ahead: true } : {}) },
  });
  plan.newRuns.set(runId, { outcome, run });
  plan.events.push(event);
  return outcome;
}

/** `replace`: earlier active runs are cancelled; their fencing tokens stop working. */
function cancelRuns(plan: DispatchPlan, runIds: readonly string[], active: ActiveRun[], replacedBy: string): void {
  for (const runId of runIds) {
    const index = active.findIndex((run) => run.runId === runId);
    const fromStatus = index >= 0 ? active[index]!.status : 'ready';
    if (index >= 0) active.splice(index, 1);
    const planned = plan.newRuns.get(runId);
    if (planned !== undefined) {
      planned.run.status = 'cancelled';
      planned.run.finishedAtMs = plan.nowMs;
      planned.run.readyAtMs = null;
      planned.outcome.status = 'cancelled';
    } else {
      plan.cancelRunIds.add(runId);
    }
    plan.events.push({
      runId, atMs: plan.nowMs, type: 'cancelled', fromStatus, toStatus: 'cancelled',
      detail: { replacedBy },
    });
  }
}

/**
 * The runs row first, then its queue row, as every writer of a run does (worker-runs.ts).
 * The runs were read, not locked (`readRuns`), so each is locked here (in run_id order) and
 * answered with the status its lock found: a completion that held the lock may have ended it
 * meanwhile (it is then not cancelled), a lease may have started it.
 */
const cancelRunsSql = prepared(
  `WITH found AS (
     SELECT run_id, status FROM runs WHERE run_id = ANY($1::text[]) AND status IN ('ready', 'running', 'retry_wait')
      ORDER BY run_id FOR UPDATE
   ), cancelled AS (
     UPDATE runs r SET status = 'cancelled', finished_at = $2, ready_at = NULL, lease_expires_at = NULL
       FROM found WHERE r.run_id = found.run_id
     RETURNING r.run_id, r.job_id, found.status AS from_status
   ), dequeued AS (
     DELETE FROM active_runs q USING cancelled WHERE q.job_id = cancelled.job_id AND q.run_id = cancelled.run_id
   )
   SELECT run_id, from_status FROM cancelled`);

/**
 * The `cancelled` events of the runs `cancelRunsSql` cancelled say the status it found; a run
 * it did not cancel (ended by a completion whose lock it waited for) gets none: the event was
 * planned from the read before the wait, and the ledger said the run was cancelled after its
 * success (test/store/postgres-replace-race.test.ts).
 */
function recordCancelsFound(plan: DispatchPlan, fromStatusByRun: ReadonlyMap<string, RunStatus>): void {
  const replaced = (event: NewRunEvent): boolean => event.type === 'cancelled' && plan.cancelRunIds.has(event.runId);
  const kept = plan.events.filter((event) => !replaced(event) || fromStatusByRun.has(event.runId));
  for (const event of kept) if (replaced(event)) event.fromStatus = fromStatusByRun.get(event.runId)!;
  plan.events.splice(0, plan.events.length, ...kept);
}

const updateJobsSql = prepared(
  `UPDATE jobs j SET timer_id = u.timer_id, next_fire_at = u.next_fire_at, next_scheduled_at = u.next_scheduled_at,
                     updated_at = CASE WHEN j.state <> u.state THEN $8 ELSE j.updated_at END,
                     state = u.state, version = u.version, ahead_run_id = u.ahead_run_id
     FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::int[], $7::text[])
          AS u(job_id, timer_id, next_fire_at, next_scheduled_at, state, version, ahead_run_id)
    WHERE j.job_id = u.job_id`);

async function writePlan(tx: Transaction, plan: DispatchPlan, changedJobs: LockedJob[]): Promise<void> {
  if (plan.cancelRunIds.size > 0) {
    const cancelled = await tx.query<{ run_id: string; from_status: RunStatus }>(cancelRunsSql,
      [textArray([...plan.cancelRunIds]), plan.nowMs]);
    recordCancelsFound(plan, new Map(cancelled.rows.map((row) => [row.run_id, row.from_status])));
  }
  await insertRuns(tx, [...plan.newRuns.values()].map((entry) => entry.run));
  await appendEvents(tx, plan.events);
  await deleteTimers(tx, plan.consumedTimers);
  await insertTimers(tx, plan.nextTimers);
  if (changedJobs.length === 0) return;
  await tx.query(updateJobsSql, [
      textArray(changedJobs.map((job) => job.jobId)),
      textArray(changedJobs.map((job) => job.timerId)),
      numberArray(changedJobs.map((job) => job.nextFireAtMs)),
      numberArray(changedJobs.map((job) => job.nextScheduledAtMs)),
      textArray(changedJobs.map((job) => job.state)),
      numberArray(changedJobs.map((job) => job.version)),
      textArray(changedJobs.map((job) => job.aheadRunId)),
      plan.nowMs,
    ]);
}
