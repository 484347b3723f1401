/**
 * The run lifecycle (DESIGN.md flows 5–7): every transition of a run, decided here and only
 * here. Pure: no I/O, no clock; times come in as `nowMs`, the retry jitter as a draw. Each
 * store carries the decisions out, one file per transition with the same name in both
 * (store/sqlite/ and store/postgres/: run-lease.ts, run-heartbeat.ts, run-complete.ts,
 * run-expire.ts, run-replay.ts): it reads the rows, asks this module, writes the outcome and
 * its run event (invariant 6), fenced by the worker's token in the same statement or
 * transaction (invariant 4). Where a batch decides inside SQL (a lease claims and writes in
 * one statement), the statement is built from the constants and fragments exported here.
 *
 *   (occurrence fired, triggered, or created at its time)
 *        │
 *        ├── catch-up plan or overlap policy: skip ──► skipped_outage | skipped_dst | skipped_overlap
 *        │
 *        ▼  overlap dispatch (hold: held, not leasable until the run before it ends, then released)
 *   ┌──► ready ◄──────────────────────── replay (same run id, fresh retry budget) ──────┐
 *   │      │                                                                            │
 *   │      │ lease (attempt + 1, token from the sequence)                               │
 *   │      ▼                                                                            │
 *   │   running ──── heartbeat (same token): lease end moved, status kept ──┐           │
 *   │      │  ▲                                                            │           │
 *   │      │  └────────────────────────────────────────────────────────────┘           │
 *   │      ├── complete succeeded ─────────────────────────────────► succeeded         │
 *   │      ├── complete failed, attempts left ────► retry_wait ─┐                       │
 *   │      │                                       (ready after │ the retry delay)     │
 *   │      │                                           lease ───┘─► running            │
 *   │      ├── complete failed_permanent, or failed with none left ──────────────► dead ┘
 *   │      ├── lease expired, job unsafe (at-most-once) ──────────────────► abandoned
 *   │      ├── lease expired, no attempts left ───────────────────────────► dead
 *   └──────┴── lease expired, attempts left (re-offered now)
 *
 *   ready | running | retry_wait ── cancel (overlap replace; a run written ahead taken back
 *                                    with its job before its fire time) ──► cancelled
 *
 * Final: succeeded, dead, abandoned, cancelled and the skipped ones. Nothing leaves a final
 * status except replay, and replay leaves only dead. A heartbeat or completion whose token is
 * not the running attempt's changes nothing (`leaseMissOf` says why).
 *
 * The ways a run is leased (each ends in the same claim: a leasable run, `ready` or
 * `retry_wait`, not held, whose ready time has come, becomes `running` with the next attempt):
 * 1. A worker's lease (`Store.leaseRuns`, POST /v1/workers/lease): lane by lane, oldest ready
 *    first, up to `max`. store/sqlite/run-lease.ts `RunLease.lease`; store/postgres/run-lease.ts
 *    `leaseRuns`, one `FOR UPDATE SKIP LOCKED` statement (`leaseStatementText`).
 * 2. A lease ahead of its ready time (`aheadMs`, at most `readyMax` runs ready now): runs ready
 *    within `aheadMs` are leased too, in a second pass after the ready ones (`leasePasses`); the
 *    lease runs from the ready time (`leaseExpiresAtMsOf`) and its event carries `readyAt`.
 *    Same files and functions as 1.
 * 3. A lease served inside a firing's transaction (`Store.setParkedWaiters`): a firing
 *    that makes runs ready leases them to the long-poll waiters parked for their pools before
 *    it commits. SQLite: sqlite-store.ts `leaseToParkedWaiters` calls `RunLease.lease` in the group
 *    transaction; PostgreSQL: dispatch.ts `leaseToParkedWaiters` calls run-lease.ts `leaseRunsWithin`.
 * 4. A shared lease for several parked requests (PostgreSQL only, `leaseRunsShared`): leases of
 *    one pool arriving while one is in flight on a node go together as one statement
 *    (lease-sharing.ts queues them), the runs shared out in claim order, each written with its
 *    own worker id. store/postgres/run-lease.ts `leaseRunsShared`.
 *
 * Catch-up (which occurrences of a timer to fire, which to skip) is planned before dispatch
 * (`planFiring`, firing-plan.ts) and the overlap policy decided inside it (`decideOverlap`,
 * overlap.ts); both are re-exported here, as the first transitions of a run.
 */
import assert from 'node:assert/strict';
import { hasAttemptsLeft, retryDelayMs } from './retry.js';
import type { CompletionStatus, IdempotencyClass, RetrySpec, RunStatus } from './types.js';

export { decideOverlap, queuedBehindLateReason, type ActiveRun, type OverlapDecision } from './overlap.js';
export { firstTimer, planFiring, type FiringPlan } from './firing-plan.js';

// Statuses --------------------------------------------------------------------------------

/** Statuses no transition leaves, except replay of `dead`. */
export const finalRunStatuses: readonly RunStatus[] = [
  'succeeded', 'dead', 'abandoned', 'cancelled', 'skipped_overlap', 'skipped_outage', 'skipped_dst',
];

export function isFinalStatus(status: RunStatus): boolean {
  return status !== 'ready' && status !== 'running' && status !== 'retry_wait';
}

/** What a lease may take (when not held and its ready time has come). */
export const leasableStatuses: readonly RunStatus[] = ['ready', 'retry_wait'];

/** The status of a leased run: the only one a heartbeat or completion is accepted in. */
export const leasedStatus = 'running' satisfies RunStatus;

/** A list of statuses as SQL, `('ready', 'retry_wait')`, for statements that filter or write in batches. */
export function statusListSql(statuses: readonly RunStatus[]): string {
  return `(${statuses.map((status) => `'${status}'`).join(', ')})`;
}

export const leasableStatusesSql = statusListSql(leasableStatuses);

// Lease -----------------------------------------------------------------------------------

/** What of a lease request decides its passes (the store's `LeaseRunsRequest` is one). */
export interface LeaseShape {
  max: number;
  /** At most this many ready now; the rest only leased ahead. Absent: all `max`. */
  readyMax?: number;
  aheadMs?: number;
  nowMs: number;
}

/** The ready part of a lease (`readyMax`, never above `max`). */
export function readyMaxOf(request: LeaseShape): number {
  return Math.min(request.readyMax ?? request.max, request.max);
}

/** Below every ready time: a pass's lower bound when it has none. */
export const noLowerBoundMs = Number.MIN_SAFE_INTEGER;

/** One claim of a lease: runs with `afterMs < ready time <= untilMs`, until the lease holds `upToCount` in all. */
export interface LeasePass {
  afterMs: number;
  untilMs: number;
  upToCount: number;
}

/**
 * A lease's passes, in order: one up to `max` when all may be ready now; otherwise the runs
 * ready now up to `readyMax`, then (with `aheadMs`) those ready within `aheadMs` up to `max`.
 * Empty when the lease can take nothing.
 */
export function leasePasses(request: LeaseShape): LeasePass[] {
  if (request.max <= 0) return [];
  const aheadUntilMs = request.nowMs + Math.max(0, request.aheadMs ?? 0);
  const readyMax = readyMaxOf(request);
  if (readyMax >= request.max) return [{ afterMs: noLowerBoundMs, untilMs: aheadUntilMs, upToCount: request.max }];
  const passes: LeasePass[] = [];
  if (readyMax > 0) passes.push({ afterMs: noLowerBoundMs, untilMs: request.nowMs, upToCount: readyMax });
  if (aheadUntilMs > request.nowMs) passes.push({ afterMs: request.nowMs, untilMs: aheadUntilMs, upToCount: request.max });
  return passes;
}

/** Whether a run may be leased by a pass reaching `untilMs`. */
export function isLeasable(status: RunStatus, held: boolean, readyAtMs: number | null, untilMs: number): boolean {
  return (status === 'ready' || status === 'retry_wait') && !held && readyAtMs !== null && readyAtMs <= untilMs;
}

/** The attempt a lease starts. */
export function leasedAttemptOf(attempt: number): number {
  return attempt + 1;
}

/** `leasedAttemptOf` as SQL. */
export function leasedAttemptSql(attemptSql: string): string {
  return `${attemptSql} + 1`;
}

/** A lease runs from now, or from the run's ready time when it was leased ahead. */
export function leaseExpiresAtMsOf(nowMs: number, readyAtMs: number, leaseMs: number): number {
  return Math.max(nowMs, readyAtMs) + leaseMs;
}

/** `leaseExpiresAtMsOf` as SQL; `greatest` is the dialect's two-argument maximum (`GREATEST`, SQLite's `MAX`). */
export function leaseExpiresAtSql(greatest: 'GREATEST' | 'MAX', nowSql: string, readyAtSql: string, leaseMsSql: string): string {
  return `${greatest}(${nowSql}, ${readyAtSql}) + ${leaseMsSql}`;
}

/**
 * The `leased` event's detail: the attempt and worker, and for a run leased ahead of its
 * ready time, `readyAt` (epoch ms), when its worker may start it.
 */
export function leasedEventDetail(attempt: number, request: { nowMs: number; workerId: string | null }, readyAtMs: number):
  { attempt: number; workerId: string | null; readyAt?: number } {
  return readyAtMs > request.nowMs
    ? { attempt, workerId: request.workerId, readyAt: readyAtMs }
    : { attempt, workerId: request.workerId };
}

// Heartbeat and the fence ------------------------------------------------------------------

/** Why a heartbeat or completion changed nothing. */
export type LeaseMiss = { kind: 'not_found' } | { kind: 'stale_token' } | { kind: 'cancelled' };

/** Why a fenced write matched nothing: no such run (for this caller), a cancelled (replaced) run, or a stale token. */
export function leaseMissOf(run: { status: RunStatus } | undefined): LeaseMiss {
  if (run === undefined) return { kind: 'not_found' };
  return run.status === 'cancelled' ? { kind: 'cancelled' } : { kind: 'stale_token' };
}

/** The fence of invariant 4: the run is running and `fencingToken` is its attempt's. */
export function fenceHolds(status: RunStatus, currentToken: string | null, fencingToken: string): boolean {
  return status === leasedStatus && currentToken === fencingToken;
}

/**
 * A heartbeat moves the lease's end to now plus the lease length. A lease past its expiry that
 * no sweep has taken yet still extends: the token is still the current one, so no other
 * worker can hold the run.
 */
export function heartbeatLeaseEndMs(nowMs: number, leaseMs: number): number {
  return nowMs + leaseMs;
}

/** `heartbeatLeaseEndMs` as SQL. */
export function heartbeatLeaseEndSql(nowSql: string, leaseMsSql: string): string {
  return `${nowSql} + ${leaseMsSql}`;
}

/**
 * The heartbeat as one decision. The stores carry it out as one fenced UPDATE (the fence in
 * its WHERE, the end from `heartbeatLeaseEndSql`) and, when it matches nothing, `leaseMissOf`.
 */
export function decideHeartbeat(run: { status: RunStatus; fencingToken: string | null; leaseMs: number } | undefined,
  fencingToken: string, nowMs: number): { kind: 'extended'; leaseExpiresAtMs: number } | LeaseMiss {
  if (run === undefined || !fenceHolds(run.status, run.fencingToken, fencingToken)) return leaseMissOf(run);
  return { kind: 'extended', leaseExpiresAtMs: heartbeatLeaseEndMs(nowMs, run.leaseMs) };
}

// Completion ------------------------------------------------------------------------------

export const succeededStatus = 'succeeded' satisfies RunStatus;

/** A completion's outcome, written as it stands: the run's new status and its event. */
export type CompletionChange =
  | { status: 'succeeded'; readyAtMs: null; finishedAtMs: number; lastError: null; eventType: 'succeeded'; detail: null }
  | {
    status: 'retry_wait'; readyAtMs: number; finishedAtMs: null; lastError: string | null; eventType: 'retry_scheduled';
    detail: { error: string | null; delayMs: number };
  }
  | {
    status: 'dead'; readyAtMs: null; finishedAtMs: number; lastError: string | null; eventType: 'dead';
    detail: { error: string | null; completion: CompletionStatus };
  };

/**
 * A completion of a run whose fence held (`fenceHolds`): success ends it; a failure waits
 * for a retry while the policy has attempts left (`attemptsUsed` counts since the last
 * replay), its ready time `retryDelayMs` away; `failed_permanent` or no attempts left, dead.
 * `retry` is read only for a failure, and `uniform01` drawn only for a retry.
 */
export function decideCompletion(completion: { status: CompletionStatus; error: string | null; nowMs: number },
  attemptsUsed: number, retry: RetrySpec | undefined, uniform01: () => number): CompletionChange {
  const { nowMs, error } = completion;
  if (completion.status === 'succeeded') {
    return { status: 'succeeded', readyAtMs: null, finishedAtMs: nowMs, lastError: null, eventType: 'succeeded', detail: null };
  }
  assert.ok(retry !== undefined, 'a failed completion needs the job\'s retry policy');
  if (completion.status === 'failed' && hasAttemptsLeft(retry, attemptsUsed)) {
    const delayMs = retryDelayMs(retry, attemptsUsed, uniform01());
    return { status: 'retry_wait', readyAtMs: nowMs + delayMs, finishedAtMs: null, lastError: error,
      eventType: 'retry_scheduled', detail: { error, delayMs } };
  }
  return { status: 'dead', readyAtMs: null, finishedAtMs: nowMs, lastError: error, eventType: 'dead',
    detail: { error, completion: completion.status } };
}

// Lease expiry ----------------------------------------------------------------------------

export type ExpiryStatus = 'ready' | 'dead' | 'abandoned';

export const leaseExpiredError = 'worker lease expired';

/** A lease ends at its expiry: a sweep at or after it takes the run. */
export function isLeaseExpired(leaseExpiresAtMs: number, nowMs: number): boolean {
  return leaseExpiresAtMs <= nowMs;
}

/**
 * An expired lease re-offers the run now (at least once), unless the job is `unsafe`
 * (at-most-once: abandoned) or the attempt that lapsed was its last (dead). Never running.
 */
export function decideExpiry(idempotency: IdempotencyClass, retry: RetrySpec, attemptsUsed: number): ExpiryStatus {
  if (idempotency === 'unsafe') return 'abandoned';
  return hasAttemptsLeft(retry, attemptsUsed) ? 'ready' : 'dead';
}

/** The ready time an expiry writes: now for a run re-offered, none for one it ends. */
export function expiryReadyAtMs(toStatus: ExpiryStatus, nowMs: number): number | null {
  return toStatus === 'ready' ? nowMs : null;
}

/** The finish time an expiry writes: now for a run it ends, none for one re-offered. */
export function expiryFinishedAtMs(toStatus: ExpiryStatus, nowMs: number): number | null {
  return toStatus === 'ready' ? null : nowMs;
}

/** The expiry's event type: `lease_expired` for a re-offer, else the final status. */
export function expiryEventType(toStatus: ExpiryStatus): string {
  return toStatus === 'ready' ? 'lease_expired' : toStatus;
}

// Cancel and replay -----------------------------------------------------------------------

export const cancelledStatus = 'cancelled' satisfies RunStatus;

/** A cancel (overlap `replace`, a run written ahead taken back) ends an active run; a final one is left alone. */
export function decideCancel(status: RunStatus): typeof cancelledStatus | null {
  return isFinalStatus(status) ? null : cancelledStatus;
}

export type ReplayDecision =
  | { kind: 'replay'; toStatus: 'ready'; readyAtMs: number; attemptBase: number; eventType: 'replayed'; detail: { attempt: number } }
  | { kind: 'invalid_state' };

/**
 * Only a dead run is replayed: ready now, same run id, its attempt number counting on and its
 * retry budget afresh (`attemptBase` = the attempts so far), unheld.
 */
export function decideReplay(run: { status: RunStatus; attempt: number }, nowMs: number): ReplayDecision {
  if (run.status !== 'dead') return { kind: 'invalid_state' };
  return { kind: 'replay', toStatus: 'ready', readyAtMs: nowMs, attemptBase: run.attempt, eventType: 'replayed',
    detail: { attempt: run.attempt } };
}
