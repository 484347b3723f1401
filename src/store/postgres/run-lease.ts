/**
 * The lease on PostgreSQL (DESIGN.md flow 6; run-lifecycle.ts decides what may be leased and
 * how, and lists the ways a run is leased): in batches with `FOR UPDATE SKIP LOCKED`, one
 * statement claiming up to `max` runs, writing their events and reading their payloads. A
 * worker's lease (`leaseRuns`, ahead of the ready time too), several parked requests of one
 * pool together (`leaseRunsShared`, lease-sharing.ts) and a lease inside a dispatch's
 * transaction (`leaseRunsWithin`) all run the statement `leaseStatementText` builds.
 *
 * Lock order (worker-runs.ts): the lease locks runs rows first, and skips those others hold,
 * so it never waits for a lock at all.
 */
import {
  leaseExpiresAtSql, leasePasses, leasableStatusesSql, leasedAttemptSql, leasedStatus, noLowerBoundMs, type LeasePass,
} from '../../domain/run-lifecycle.js';
import type { LeaseRunsRequest, LeasedRun } from '../store.js';
import { prepared, type Transaction } from './connection.js';
import { numberArray, textArray } from './array-literals.js';
import { query, transaction, type StoreContext } from './context.js';
import { oneStatementOf } from './lease-sharing.js';
import type { Lane } from '../../domain/types.js';
import { leaseGateConditions, leaseThroughGates, resourceCapsDeclared, type LeaseKit, type LeasePick } from './lease-gates.js';

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
  const leaseMs = 'COALESCE($5::int, s.lease_s * 1000)';
  return `WITH picked AS (
     SELECT r.ctid AS run_ctid, r.run_id, r.job_id, r.status AS from_status, q.due_at AS ready_at${shared ? ', q.lane' : ''}
       FROM active_runs q JOIN runs r ON r.run_id = q.run_id AND r.status = q.status AND r.held = q.held
${pick === 'named' ? '       JOIN unnest($10::text[], $11::text[]) AS w(job_id, run_id) ON q.job_id = w.job_id AND q.run_id = w.run_id\n' : ''
}      WHERE q.pool = $1 AND q.status IN ${leasableStatusesSql} AND NOT q.held AND q.due_at > $9::bigint AND q.due_at <= $2::bigint + $7::bigint
        AND ${pick === 'lane-team' ? 'q.team = $3' : '($3::text IS NULL OR q.team = $3)'}${pick === 'lane' || pick === 'lane-team' ? ' AND q.lane = $10' : ''}
        ${leaseGateConditions(pick === 'named')}
      ORDER BY q.lane, q.due_at
      LIMIT $4
      FOR UPDATE OF r SKIP LOCKED
   )${claimed}, leased AS (
     UPDATE runs r SET status = '${leasedStatus}', attempt = ${leasedAttemptSql('r.attempt')},
                       fencing_token = nextval('tickler_tokens'), lease_ms = ${leaseMs},
                       lease_expires_at = ${leaseExpiresAtSql('GREATEST', '$2::bigint', 'p.ready_at', leaseMs)},
                       started_at = $2, worker_id = ${workerId}, ready_at = NULL
       FROM ${source} p JOIN jobs j ON j.job_id = p.job_id
            CROSS JOIN LATERAL json_to_record(j.spec) AS s(lease_s int, payload json)
      WHERE r.ctid = p.run_ctid
     RETURNING r.run_id, r.job_id, r.team, r.lane, r.attempt, r.scheduled_at, r.fire_at, r.dispatched_at,
               r.fencing_token::text AS fencing_token, r.lease_expires_at, p.from_status, s.payload::text AS payload,
               p.ready_at, r.worker_id${shared ? ', p.share' : ''}
   ), queued AS (
     UPDATE active_runs q SET status = '${leasedStatus}', due_at = leased.lease_expires_at, lease_node = $8
       FROM leased WHERE q.job_id = leased.job_id AND q.run_id = leased.run_id
   ), events AS (
     INSERT INTO run_events (run_id, at_ms, type, from_status, to_status, detail)
     SELECT run_id, $2, 'leased', from_status, '${leasedStatus}',
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
  noLowerBound: noLowerBoundMs,
};

async function leaseRunsPlain(context: StoreContext, request: LeaseRunsRequest): Promise<LeasedRun[]> {
  const passes = leasePasses(request);
  // Two statements share a transaction: a failure between them must not leave the first's
  // leases committed and unanswered (their runs would wait out the lease).
  if (passes.length > 1) {
    return transaction(context, 'leaseRuns', (tx) => leaseInPasses(request, passes, context.leaseNodeId,
      async (parameters) => (await tx.query<LeasedRow>(leaseRunsSql, parameters)).rows));
  }
  return leaseInPasses(request, passes, context.leaseNodeId,
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
    oneStatementOf(first)!.aheadMs, context.leaseNodeId, noLowerBoundMs, numberArray(bounds),
  ])).rows;
  const answers = requests.map((): LeasedRun[] => []);
  for (const row of rows) answers[row.share - 1]!.push(leasedRunOf(row));
  return answers;
}

/** The lease's passes (`leasePasses`), each one statement: up to `readyMax` ready now, then ahead up to `max`. */
async function leaseInPasses(request: LeaseRunsRequest, passes: readonly LeasePass[], leaseNodeId: string | null,
  lease: (parameters: unknown[]) => Promise<LeasedRow[]>): Promise<LeasedRun[]> {
  const leased: LeasedRun[] = [];
  for (const pass of passes) {
    const max = pass.upToCount - leased.length;
    if (max <= 0) break;
    const rows = await lease(leaseParameters(request, leaseNodeId, max, pass.untilMs - request.nowMs, pass.afterMs));
    for (const row of rows) leased.push(leasedRunOf(row));
  }
  return leased;
}

/**
 * The same lease inside a transaction of the caller's: a dispatch serving parked waiters
 * (`Store.setParkedWaiters`). The runs it inserted are its own to lock.
 */
export async function leaseRunsWithin(tx: Transaction, request: LeaseRunsRequest, leaseNodeId: string | null):
  Promise<LeasedRun[]> {
  return leaseInPasses(request, leasePasses(request), leaseNodeId,
    async (parameters) => (await tx.query<LeasedRow>(leaseRunsSql, parameters)).rows);
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

