/**
 * Replay on PostgreSQL (API.md "Dead letters"): a dead run back to ready under the same run
 * id, queued again, as run-lifecycle.ts `decideReplay` says; any other status is answered
 * `invalid_state`.
 */
import { decideReplay } from '../../domain/run-lifecycle.js';
import type { ReplayOutcome, TeamScope } from '../store.js';
import { transaction, type StoreContext } from './context.js';
import { runColumns, runFromRow, type RunRow } from './rows.js';
import { appendEvents } from './writes.js';

const lockRunSql = `SELECT ${runColumns} FROM runs r WHERE r.run_id = $1 AND ($2::text IS NULL OR r.team = $2) FOR UPDATE`;

const replaySql = `WITH replayed AS (
     UPDATE runs r SET status = $2, ready_at = $3, finished_at = NULL, lease_expires_at = NULL, attempt_base = $4, held = false
      WHERE r.run_id = $1 RETURNING ${runColumns}
   ), queued AS (
     INSERT INTO active_runs (run_id, job_id, team, pool, lane, status, held, due_at)
     SELECT run_id, job_id, team, pool, lane, status, false, ready_at FROM replayed
   )
   SELECT * FROM replayed`;

/** Its attempt number keeps counting, its retry budget starts afresh (`attemptBase`). */
export function replayRun(context: StoreContext, team: TeamScope, runId: string, nowMs: number): Promise<ReplayOutcome> {
  return transaction(context, 'replayRun', async (tx) => {
    const row = (await tx.query<RunRow>(lockRunSql, [runId, team])).rows[0];
    if (row === undefined) return { kind: 'not_found' };
    const decided = decideReplay(row, nowMs);
    if (decided.kind === 'invalid_state') return { kind: 'invalid_state', run: runFromRow(row) };
    const updated = await tx.query<RunRow>(replaySql, [runId, decided.toStatus, decided.readyAtMs, decided.attemptBase]);
    await appendEvents(tx, [{ runId, atMs: nowMs, type: decided.eventType, fromStatus: row.status, toStatus: decided.toStatus,
      detail: decided.detail }]);
    tx.readyPools.add(row.pool);
    return { kind: 'replayed', run: runFromRow(updated.rows[0]!) };
  });
}
