/**
 * The worker side of runs (DESIGN.md flow 6–7): lease in batches with `FOR UPDATE SKIP
 * LOCKED` (one statement claims up to `max` runs, writes their events and reads their
 * payloads), heartbeat fenced by the attempt's token in the statement that writes
 * (invariant 4), lease expiry. Completion is in run-completion.ts.
 *
 * Lock order, to stay clear of deadlocks with dispatch (which locks the job row, then
 * writes runs): a transaction here locks runs first, and locks a job row only to release a
 * `buffer_one` held run, after which it touches no run it had not locked already except
 * that held run, which dispatch never locks.
 *
 * A run's queue row (active_runs, schema version 3) is written only by a transaction that
 * holds the run's runs row: every writer locks (or updates) the runs row first. The lease
 * and the expiry skip runs rows others hold, so they never wait for a lock at all.
 */
import { hasAttemptsLeft } from '../../domain/retry.js';
import type { RetrySpec, RunStatus } from '../../domain/types.js';
import { readyMaxOf, type ExpiredLease, type HeartbeatOutcome, type LeaseRunsRequest, type LeasedRun, type TeamScope } from '../store.js';
import { prepared, type Transaction } from './connection.js';
import { numberArray, textArray } from './array-literals.js';
import { query, transaction, type StoreContext } from './context.js';
import { oneStatementOf } from './lease-sharing.js';
import { appendEvents, releaseHeldRuns } from './writes.js';
import type { Lane } from '../../domain/types.js';
import { leaseGateConditions, leaseThroughGates, resourceCapsDeclared, type LeaseKit, type LeasePick } from './lease-gates.js';

export const tokenPattern = /^\d{1,19}$/;

/**
 * The claim, lease and its events in one statement.
 *
 * The claim walks active_runs_leasable in (lane, due_at) order, so it reads only the rows it
 * takes (plus those skipped because another claimer holds them), and locks the runs rows,
 * SKIP LOCKED: a lease never waits for a lock, and every other writer of a run locks its
 * runs row before its queue row. The lock rechecks the join on the run's newest version, so
 * a run another lease took after this statement's snapshot (whose queue row, as of that
 * snapshot, still says ready) is skipped. Status and hold are join conditions, not filters
 * on runs: as filters, the generic plan built on an empty schema scanned runs sequentially.
 *
 * The runs row then takes a HOT update (no index of runs covers a column a lease writes,
 * schema version 3), found by the ctid of the version just locked, which no other
 * transaction can replace while the lock is held. The queue row is found by its key, right
 * whatever version of it the snapshot saw. `json_to_record` reads `lease_s` and the payload
 * from one parse of the job's spec (each `->` on a json column parses the whole document
 * again), and the payload is returned by the UPDATE itself rather than by joining the job a
 * second time, as its JSON text (`json` keeps the text it was given), which the lease answer
 * carries to the worker unparsed.
 */
const leaseRunsSql = prepared(leaseStatementText('single'), { autocommit: true });

/**
 * The same lease for several requests at once (`leaseRunsShared`): up to the sum of their
 * `max` runs, numbered in claim order and shared out in that order, each request's share
 * written with its own worker id (`$6`, one per request) and answered with its 1-based index
 * (`share`); `$10` holds the cumulative bounds (request k takes rows up to `$10[k]`).
 */
const leaseRunsSharedSql = prepared(leaseStatementText('shared'), { autocommit: true });

/**
 * Capacity hook (lease-gates.ts), the claim's source: the pool's queue (`queue`), one lane of it
 * (`lane`, `$10`), one team's runs of one lane (`lane-team`: `$3` names the team), or the runs
 * named by `$10` (job ids) and `$11` (run ids) that the gate admitted under resource caps (`named`).
 */
function leaseStatementText(form: 'single' | 'shared', pick: LeasePick = 'queue'): string {
  const shared = form === 'shared';
  // A window function cannot sit beside FOR UPDATE: rows are numbered once claimed.
  const claimed = shared
    ? `, numbered AS (
     SELECT c.*, (SELECT b.i FROM unnest($10::int[]) WITH ORDINALITY AS b(upto, i) WHERE b.upto >= c.rn ORDER BY b.i LIMIT 1)
              AS share
       FROM (SELECT picked.*, row_number() OVER (ORDER BY lane, ready_at, run_id) AS rn FROM picked) c
   )`
    : '';
  const source = shared ? 'numbered' : 'picked';
  const workerId = shared ? '($6::text[])[p.share]' : '$6';
  return `WITH picked AS (
     SELECT r.ctid AS run_ctid, r.run_id, r.job_id, r.status AS from_status, q.due_at AS ready_at${shared ? ', q.lane' : ''}
       FROM active_runs q JOIN runs r ON r.run_id = q.run_id AND r.status = q.status AND r.held = q.held
${pick === 'named' ? '       JOIN unnest($10::text[], $11::text[]) AS w(job_id, run_id) ON q.job_id = w.job_id AND q.run_id = w.run_id\n' : ''
}      WHERE q.pool = $1 AND q.status IN ('ready', 'retry_wait') AND NOT q.held AND q.due_at > $9::bigint AND q.due_at <= $2::bigint + $7::bigint
        AND ${pick === 'lane-team' ? 'q.team = $3' : '($3::text IS NULL OR q.team = $3)'}${pick === 'lane' || pick === 'lane-team' ? ' AND q.lane = $10' : ''}
        ${leaseGateConditions(pick === 'named')}
      ORDER BY q.lane, q.due_at
      LIMIT $4
      FOR UPDATE OF r SKIP LOCKED
   )${claimed}, leased AS (
     UPDATE runs r SET status = 'running', attempt = r.attempt + 1, fencing_token = nextval('tickler_tokens'),
                       lease_ms = COALESCE($5::int, s.lease_s * 1000),
                       lease_expires_at = GREATEST($2::bigint, p.ready_at) + COALESCE($5::int, s.lease_s * 1000),
                       started_at = $2, worker_id = ${workerId}, ready_at = NULL
       FROM ${source} p JOIN jobs j ON j.job_id = p.job_id
            CROSS JOIN LATERAL json_to_record(j.spec) AS s(lease_s int, payload json)
      WHERE r.ctid = p.run_ctid
     RETURNING r.run_id, r.job_id, r.team, r.lane, r.attempt, r.scheduled_at, r.fire_at, r.dispatched_at,
               r.fencing_token::text AS fencing_token, r.lease_expires_at, p.from_status, s.payload::text AS payload,
               p.ready_at, r.worker_id${shared ? ', p.share' : ''}
   ), queued AS (
     UPDATE active_runs q SET status = 'running', due_at = leased.lease_expires_at, lease_node = $8
       FROM leased WHERE q.job_id = leased.job_id AND q.run_id = leased.run_id
   ), events AS (
     INSERT INTO run_events (run_id, at_ms, type, from_status, to_status, detail)
     SELECT run_id, $2, 'leased', from_status, 'running',
            CASE WHEN ready_at > $2::bigint
                 THEN json_build_object('attempt', attempt, 'workerId', worker_id, 'readyAt', ready_at)
                 ELSE json_build_object('attempt', attempt, 'workerId', worker_id) END
       FROM leased
   )
   SELECT run_id, job_id, team, attempt, scheduled_at, fire_at, dispatched_at, fencing_token, lease_expires_at, payload,
          ready_at, lane${shared ? ', share' : ''}
     FROM leased
    ORDER BY lane, scheduled_at`;
}

interface LeasedRow {
  run_id: string; job_id: string; team: string; attempt: number; scheduled_at: number; fire_at: number;
  dispatched_at: number; fencing_token: string; lease_expires_at: number; payload: string | null; ready_at: number;
  lane: Lane;
}

/** Capacity hook (lease-gates.ts): runs under resource caps and a lease plan, around the plain lease. */
export function leaseRuns(context: StoreContext, request: LeaseRunsRequest): Promise<LeasedRun[]> {
  return leaseThroughGates(context, request, leaseKit, (rest) => leaseRunsPlain(context, rest));
}

const leaseKit: LeaseKit = {
  statements: {
    lane: prepared(leaseStatementText('single', 'lane'), { autocommit: true }),
    'lane-team': prepared(leaseStatementText('single', 'lane-team'), { autocommit: true }),
    named: prepared(leaseStatementText('single', 'named')),
  },
  parameters: (...args) => leaseParameters(...args),
  runOf: (row: LeasedRow) => leasedRunOf(row),
  noLowerBound: Number.MIN_SAFE_INTEGER,
};

async function leaseRunsPlain(context: StoreContext, request: LeaseRunsRequest): Promise<LeasedRun[]> {
  // Two statements share a transaction: a failure between them must not leave the first's
  // leases committed and unanswered (their runs would wait out the lease).
  if (readyMaxOf(request) < request.max && (request.aheadMs ?? 0) > 0) {
    return transaction(context, 'leaseRuns', (tx) => leaseRunsWithin(tx, request, context.leaseNodeId));
  }
  return leaseInPasses(request, context.leaseNodeId,
    async (parameters) => (await query<LeasedRow>(context, 'leaseRuns', leaseRunsSql, parameters)).rows);
}

/**
 * Leases that share a share key (lease-sharing.ts: one team scope, lease length and
 * look-ahead, each one statement) as one statement: the runs are claimed in order and shared
 * out in request order, each request's written with its own worker id. Taken at the latest
 * of the requests' times, which are all past by now.
 */
export async function leaseRunsShared(context: StoreContext, requests: readonly LeaseRunsRequest[]):
  Promise<LeasedRun[][]> {
  // Capacity hook: with resource caps declared, each lease goes through the gates in turn.
  if (await resourceCapsDeclared(context, Math.max(...requests.map((request) => request.nowMs)))) {
    const answers: LeasedRun[][] = [];
    for (const request of requests) answers.push(await leaseRuns(context, request));
    return answers;
  }
  const first = requests[0]!;
  const bounds: number[] = [];
  let runs = 0;
  for (const request of requests) {
    runs += oneStatementOf(request)!.max;
    bounds.push(runs);
  }
  const nowMs = Math.max(...requests.map((request) => request.nowMs));
  const rows = (await query<LeasedRow & { share: number }>(context, 'leaseRuns', leaseRunsSharedSql, [
    first.pool, nowMs, first.team, runs, first.leaseMs, textArray(requests.map((request) => request.workerId)),
    oneStatementOf(first)!.aheadMs, context.leaseNodeId, noLowerBound, numberArray(bounds),
  ])).rows;
  const answers = requests.map((): LeasedRun[] => []);
  for (const row of rows) answers[row.share - 1]!.push(leasedRunOf(row));
  return answers;
}

/**
 * One statement, or with a `readyMax` below `max` (and `aheadMs`) two: runs ready now up to
 * `readyMax`, then runs ready within `aheadMs` up to `max`.
 */
async function leaseInPasses(request: LeaseRunsRequest, leaseNodeId: string | null,
  lease: (parameters: unknown[]) => Promise<LeasedRow[]>): Promise<LeasedRun[]> {
  if (request.max <= 0) return [];
  const aheadMs = request.aheadMs ?? 0;
  const readyMax = readyMaxOf(request);
  if (readyMax >= request.max) {
    return (await lease(leaseParameters(request, leaseNodeId, request.max, aheadMs, noLowerBound))).map(leasedRunOf);
  }
  const ready = readyMax <= 0 ? [] : await lease(leaseParameters(request, leaseNodeId, readyMax, 0, noLowerBound));
  if (aheadMs <= 0) return ready.map(leasedRunOf);
  const ahead = await lease(leaseParameters(request, leaseNodeId, request.max - ready.length, aheadMs, request.nowMs));
  return [...ready, ...ahead].map(leasedRunOf);
}

/** Below every `due_at`: the lease's lower bound when it has none. */
const noLowerBound = Number.MIN_SAFE_INTEGER;

/**
 * The same lease inside a transaction of the caller's: a dispatch serving parked waiters
 * (`Store.setDispatchLeaser`). The runs it inserted are its own to lock.
 */
export async function leaseRunsWithin(tx: Transaction, request: LeaseRunsRequest, leaseNodeId: string | null):
  Promise<LeasedRun[]> {
  return leaseInPasses(request, leaseNodeId, async (parameters) => (await tx.query<LeasedRow>(leaseRunsSql, parameters)).rows);
}

/** `due_at` within (`afterMs`, now + `aheadMs`], up to `max` runs. */
function leaseParameters(request: LeaseRunsRequest, leaseNodeId: string | null, max: number, aheadMs: number,
  afterMs: number): unknown[] {
  return [request.pool, request.nowMs, request.team, max, request.leaseMs, request.workerId, aheadMs, leaseNodeId, afterMs];
}

function leasedRunOf(row: LeasedRow): LeasedRun {
  return {
    runId: row.run_id,
    jobId: row.job_id,
    team: row.team,
    attempt: row.attempt,
    scheduledAtMs: row.scheduled_at,
    fireAtMs: row.fire_at,
    dispatchedAtMs: row.dispatched_at,
    payloadJson: row.payload ?? 'null',
    fencingToken: row.fencing_token,
    leaseExpiresAtMs: row.lease_expires_at,
    readyAtMs: row.ready_at,
    lane: row.lane,
  };
}

/** Why a fenced write matched nothing: unknown run, a cancelled (replaced) run, or a stale token. */
export function classifyMiss(run: { status: RunStatus } | undefined): { kind: 'not_found' } | { kind: 'stale_token' } | { kind: 'cancelled' } {
  if (run === undefined) return { kind: 'not_found' };
  return run.status === 'cancelled' ? { kind: 'cancelled' } : { kind: 'stale_token' };
}

/**
 * Not prepared: it runs alone, with sequential scans allowed, and its generic plan on a
 * small table walks runs_running (every running run) instead of probing the primary key.
 * A heartbeat proves the worker got its lease, so the lease no longer depends on the node
 * that granted it (`lease_node` cleared: its death does not cut this lease).
 */
const heartbeatSql = `WITH extended AS (
    UPDATE runs SET lease_expires_at = $4::bigint + lease_ms
     WHERE run_id = $1 AND ($2::text IS NULL OR team = $2) AND status = 'running' AND fencing_token = $3::bigint
    RETURNING run_id, job_id, lease_expires_at
  ), queued AS (
    UPDATE active_runs q SET due_at = extended.lease_expires_at, lease_node = NULL
      FROM extended WHERE q.job_id = extended.job_id AND q.run_id = extended.run_id
  )
  SELECT lease_expires_at FROM extended`;

const runStatusSql =
  'SELECT status, fencing_token::text AS fencing_token FROM runs WHERE run_id = $1 AND ($2::text IS NULL OR team = $2)';

export async function heartbeatRun(context: StoreContext, team: TeamScope, runId: string, fencingToken: string,
  nowMs: number): Promise<HeartbeatOutcome> {
  if (tokenPattern.test(fencingToken)) {
    // No run event per heartbeat: there would be one every lease_s / 3 per running attempt.
    const extended = await query<{ lease_expires_at: number }>(context, 'heartbeatRun', heartbeatSql,
      [runId, team, fencingToken, nowMs]);
    const row = extended.rows[0];
    if (row !== undefined) return { kind: 'extended', leaseExpiresAtMs: row.lease_expires_at };
  }
  const current = await query<{ status: RunStatus; fencing_token: string | null }>(context, 'heartbeatRun',
    runStatusSql, [runId, team]);
  return classifyMiss(current.rows[0]);
}

const lockJobsSql = prepared('SELECT 1 FROM jobs WHERE job_id = ANY($1::text[]) ORDER BY job_id FOR UPDATE');

/**
 * The column `releases_held` of a read of run `r` whose job's overlap is `overlap`: whether
 * ending the run may release a held run of its job. A `buffer_one` job's may (a dispatch may
 * be holding one now, hence the lock in `releaseHeldOf`); so may any job that has a held run
 * already: one held under `buffer_one` before a PATCH changed the overlap waited forever when
 * only the spec was read (the embedded store always looks for one).
 */
export function releasesHeldColumn(overlap: string): string {
  return `(${overlap} = 'buffer_one' OR EXISTS (SELECT 1 FROM active_runs h WHERE h.job_id = r.job_id AND h.held)) AS releases_held`;
}

/**
 * The negation of `releasesHeldColumn`, for a WHERE: a job that is not `buffer_one` (a NULL
 * overlap is not) and holds no run. The held run is looked for by a correlated scalar
 * subquery, which probes `active_runs_held` per row; a `NOT EXISTS` here was planned as a
 * hashed subplan that reads the whole queue.
 */
export function holdsNothingToRelease(overlap: string): string {
  return `${overlap} IS DISTINCT FROM 'buffer_one'
          AND (SELECT true FROM active_runs h WHERE h.job_id = r.job_id AND h.held LIMIT 1) IS NULL`;
}

/** Locks the jobs that may hold a run (serialising with dispatch, which may be holding a new run) and releases. */
export async function releaseHeldOf(tx: Transaction, jobs: readonly { jobId: string; releasesHeld: boolean }[], nowMs: number):
  Promise<void> {
  const jobIds = [...new Set(jobs.filter((job) => job.releasesHeld).map((job) => job.jobId))].sort();
  if (jobIds.length === 0) return;
  await tx.query(lockJobsSql, [textArray(jobIds)]);
  await releaseHeldRuns(tx, jobIds, nowMs);
}

/**
 * Held runs whose job has no other active run (`Store.releaseStrandedHeldRuns`): found through
 * the queue, then released as a completion releases them, under their jobs' locks (in job_id
 * order), by a statement that checks again what it found. The reconciler runs it every pass,
 * and held runs are few: they are read in job_id order down active_runs_held (schema version
 * 10), whose predicate `q.held` implies; it walked every queue row before (17-35 ms at 25,000
 * to 45,000, with fresh statistics too; 1.5-2.6 ms now; bench/probes/pg-stale-plan-cost.ts).
 */
export function releaseStrandedHeldRuns(context: StoreContext, nowMs: number, limit: number):
  Promise<{ runId: string; jobId: string }[]> {
  return transaction(context, 'releaseStrandedHeldRuns', async (tx) => {
    const stranded = await tx.query<{ job_id: string }>(
      `SELECT DISTINCT q.job_id FROM active_runs q
        WHERE q.held AND q.status = 'ready'
          AND NOT EXISTS (SELECT 1 FROM active_runs a WHERE a.job_id = q.job_id AND NOT a.held)
        ORDER BY q.job_id LIMIT $1`, [limit]);
    const jobIds = stranded.rows.map((row) => row.job_id);
    if (jobIds.length === 0) return [];
    await tx.query(lockJobsSql, [textArray(jobIds)]);
    return releaseHeldRuns(tx, jobIds, nowMs);
  });
}

/**
 * The expired leases are read in due order down active_runs_deadline, and the read stops at
 * `limit`. A bitmap scan has no order: with active_runs analyzed before the leases were granted,
 * the planner guessed 52 expired where 4,925 were, took them all that way, joined each to its
 * run and job and sorted them to keep 50 (163 ms against 2.7; for the sweeper's 1,000, 171
 * against 44), and a sweep of n expired leases cost n²/limit.
 */
const expiredInDueOrderSql = 'SET LOCAL enable_bitmapscan = off';

export function expireRunLeases(context: StoreContext, nowMs: number, limit: number): Promise<ExpiredLease[]> {
  if (limit <= 0) return Promise.resolve([]);
  return transaction(context, 'expireRunLeases', async (tx) => {
    await tx.query(expiredInDueOrderSql);
    // Locks the runs rows, not the queue rows, first (as completions and heartbeats do), and
    // skips those held: a running run's queue row is then written only by whoever holds its
    // runs row. The runs row is checked again under the lock (a heartbeat may have extended it).
    const expired = await tx.query<{
      run_id: string; job_id: string; pool: string; attempt: number; attempt_base: number; worker_id: string | null;
      idempotency: string; retry: RetrySpec; releases_held: boolean;
    }>(
      `SELECT r.run_id, r.job_id, r.pool, r.attempt, r.attempt_base, r.worker_id, j.spec->>'idempotency' AS idempotency,
              j.spec->'retry' AS retry, ${releasesHeldColumn("j.spec->>'overlap'")}
         FROM active_runs q JOIN runs r ON r.run_id = q.run_id JOIN jobs j ON j.job_id = r.job_id
        WHERE q.status = 'running' AND q.due_at <= $1 AND r.status = 'running' AND r.lease_expires_at <= $1
        ORDER BY q.due_at LIMIT $2 FOR UPDATE OF r SKIP LOCKED`, [nowMs, limit]);
    if (expired.rows.length === 0) return [];
    const outcomes: ExpiredLease[] = expired.rows.map((row) => ({
      runId: row.run_id,
      pool: row.pool,
      toStatus: row.idempotency === 'unsafe' ? 'abandoned'
        : hasAttemptsLeft(row.retry, row.attempt - row.attempt_base) ? 'ready' : 'dead',
    }));
    await tx.query(
      `WITH expired AS (
         UPDATE runs r SET status = u.status, lease_expires_at = NULL,
                           ready_at = CASE WHEN u.status = 'ready' THEN $3::bigint END,
                           finished_at = CASE WHEN u.status = 'ready' THEN NULL ELSE $3::bigint END,
                           last_error = 'worker lease expired'
           FROM unnest($1::text[], $2::text[]) AS u(run_id, status) WHERE r.run_id = u.run_id
         RETURNING r.run_id, r.job_id, r.status
       ), requeued AS (
         UPDATE active_runs q SET status = 'ready', due_at = $3::bigint, lease_node = NULL
           FROM expired WHERE q.job_id = expired.job_id AND q.run_id = expired.run_id AND expired.status = 'ready'
       )
       DELETE FROM active_runs q USING expired
        WHERE q.job_id = expired.job_id AND q.run_id = expired.run_id AND expired.status <> 'ready'`,
      [outcomes.map((outcome) => outcome.runId), outcomes.map((outcome) => outcome.toStatus), nowMs]);
    await appendEvents(tx, outcomes.map((outcome, index) => ({
      runId: outcome.runId, atMs: nowMs, type: outcome.toStatus === 'ready' ? 'lease_expired' : outcome.toStatus,
      fromStatus: 'running', toStatus: outcome.toStatus,
      detail: { attempt: expired.rows[index]!.attempt, workerId: expired.rows[index]!.worker_id },
    })));
    for (const outcome of outcomes) if (outcome.toStatus === 'ready') tx.readyPools.add(outcome.pool);
    const finalJobs = expired.rows.filter((_, index) => outcomes[index]!.toStatus !== 'ready')
      .map((row) => ({ jobId: row.job_id, releasesHeld: row.releases_held }));
    await releaseHeldOf(tx, finalJobs, nowMs);
    return outcomes;
  });
}

/**
 * Cuts the leases granted by nodes that are not among `liveNodeIds` and never heartbeated
 * (`lease_node` still set) to a third of each lease plus `marginMs` from `nowMs`, or from the
 * run's ready time when it was leased ahead; a lease already ending sooner keeps its end.
 * Runs rows are locked before queue rows, as every writer of a running run does; a heartbeat
 * that lands between the scan and the lock is cut as well, which its worker's next heartbeat
 * (within a third of the lease) undoes. Answers how many leases were cut.
 */
export async function shortenLeasesOfGoneNodes(context: StoreContext, liveNodeIds: readonly string[], nowMs: number,
  marginMs: number): Promise<number> {
  const result = await query<{ count: string }>(context, 'shortenLeasesOfGoneNodes',
    `WITH orphaned AS (
       SELECT q.run_id, q.job_id FROM active_runs q
        WHERE q.status = 'running' AND q.lease_node IS NOT NULL AND q.lease_node <> ALL($1::text[])
     ), cut AS (
       UPDATE runs r SET lease_expires_at = GREATEST($2::bigint, r.lease_expires_at - r.lease_ms) + r.lease_ms / 3 + $3::bigint
         FROM orphaned o
        WHERE r.run_id = o.run_id AND r.status = 'running'
          AND r.lease_expires_at > GREATEST($2::bigint, r.lease_expires_at - r.lease_ms) + r.lease_ms / 3 + $3::bigint
       RETURNING r.run_id, r.job_id, r.lease_expires_at
     ), queued AS (
       UPDATE active_runs q SET due_at = cut.lease_expires_at, lease_node = NULL
         FROM cut WHERE q.job_id = cut.job_id AND q.run_id = cut.run_id
     )
     SELECT count(*) FROM cut`, [textArray([...liveNodeIds]), nowMs, marginMs]);
  return Number(result.rows[0]?.count ?? 0);
}

export async function nextLeaseExpiryMs(context: StoreContext): Promise<number | null> {
  const result = await query<{ at: number | null }>(context, 'nextLeaseExpiryMs',
    `SELECT min(due_at) AS at FROM active_runs WHERE status = 'running'`);
  return result.rows[0]?.at ?? null;
}

export async function nextReadyAtMs(context: StoreContext, team: TeamScope, pool: string): Promise<number | null> {
  // One index probe per lane rather than a scan of the pool's whole backlog.
  const result = await query<{ at: number | null }>(context, 'nextReadyAtMs',
    `SELECT min(first_ready) AS at FROM unnest(ARRAY['P0', 'P1', 'P2']) AS l(lane),
            LATERAL (SELECT q.due_at AS first_ready FROM active_runs q
                      WHERE q.pool = $1 AND q.lane = l.lane AND q.status IN ('ready', 'retry_wait') AND NOT q.held
                        AND ($2::text IS NULL OR q.team = $2)
                      ORDER BY q.due_at LIMIT 1) AS f`, [pool, team]);
  return result.rows[0]?.at ?? null;
}
