/**
 * The heartbeat on PostgreSQL (DESIGN.md flow 6): fenced by the attempt's token in the
 * statement that writes (invariant 4), the lease's new end as run-lifecycle.ts sets it. A
 * heartbeat that matches nothing reads the run to say why (`leaseMissOf`).
 */
import { heartbeatLeaseEndSql, leaseMissOf, leasedStatus } from '../../domain/run-lifecycle.js';
import type { RunStatus } from '../../domain/types.js';
import type { HeartbeatOutcome, TeamScope } from '../store.js';
import { query, type StoreContext } from './context.js';

/** A token as the store issues it: a decimal bigint. Anything else matches no run. */
export const tokenPattern = /^\d{1,19}$/;

/**
 * Not prepared: it runs alone, with sequential scans allowed, and its generic plan on a
 * small table walks runs_running (every running run) instead of probing the primary key.
 * A heartbeat proves the worker got its lease, so the lease no longer depends on the node
 * that granted it (`lease_node` cleared: its death does not cut this lease).
 */
const heartbeatSql = `WITH extended AS (
    UPDATE runs SET lease_expires_at = ${heartbeatLeaseEndSql('$4::bigint', 'lease_ms')}
     WHERE run_id = $1 AND ($2::text IS NULL OR team = $2) AND status = '${leasedStatus}' AND fencing_token = $3::bigint
    RETURNING run_id, job_id, lease_expires_at
  ), queued AS (
    UPDATE active_runs q SET due_at = extended.lease_expires_at, lease_node = NULL
      FROM extended WHERE q.job_id = extended.job_id AND q.run_id = extended.run_id
  )
  SELECT lease_expires_at FROM extended`;

const runStatusSql = 'SELECT status FROM runs WHERE run_id = $1 AND ($2::text IS NULL OR team = $2)';

export async function heartbeatRun(context: StoreContext, team: TeamScope, runId: string, fencingToken: string,
  nowMs: number): Promise<HeartbeatOutcome> {
  if (tokenPattern.test(fencingToken)) {
    // No run event per heartbeat: there would be one every lease_s / 3 per running attempt.
    const extended = await query<{ lease_expires_at: number }>(context, 'heartbeatRun', heartbeatSql,
      [runId, team, fencingToken, nowMs]);
    const row = extended.rows[0];
    if (row !== undefined) return { kind: 'extended', leaseExpiresAtMs: row.lease_expires_at };
  }
  const current = await query<{ status: RunStatus }>(context, 'heartbeatRun', runStatusSql, [runId, team]);
  return leaseMissOf(current.rows[0]);
}
