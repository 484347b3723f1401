/**
 * The run ledger (invariant 6): one run with its events in order, and runs listed newest
 * first by scheduled time with keyset cursors. Replay of a dead run is in run-replay.ts.
 */
import type { Page, RunRecord } from '../../domain/types.js';
import type { RunListFilter, RunWithEvents, TeamScope } from '../store.js';
import { query, type StoreContext } from './context.js';
import { decodeCursor, encodeCursor } from '../cursor.js';
import {
  runColumns, runEventFromRow, runFromRow, type RunEventRow, type RunRow,
} from './rows.js';

export async function getRun(context: StoreContext, team: TeamScope, runId: string): Promise<RunWithEvents | null> {
  const result = await query<RunRow>(context, 'getRun',
    `SELECT ${runColumns} FROM runs r WHERE r.run_id = $1 AND ($2::text IS NULL OR r.team = $2)`, [runId, team]);
  const row = result.rows[0];
  if (row === undefined) return null;
  // Sequence numbers are the events' order within the run, counted from 1.
  const events = await query<RunEventRow>(context, 'getRun',
    `SELECT run_id, (row_number() OVER (ORDER BY event_id))::int AS sequence, at_ms, type, from_status, to_status, detail
       FROM run_events WHERE run_id = $1 ORDER BY event_id`, [runId]);
  return { ...runFromRow(row), events: events.rows.map(runEventFromRow) };
}

export async function listRuns(context: StoreContext, filter: RunListFilter): Promise<Page<RunRecord>> {
  const conditions: string[] = [];
  const values: unknown[] = [];
  const bind = (value: unknown): string => {
    values.push(value);
    return `$${values.length}`;
  };
  // A job's runs are read through runs_job alone: its team is matched with `IS NOT DISTINCT
  // FROM` (the same, as `team` is never null), which no index serves. With `team =` and the
  // statistics behind the table (a schema analyzed empty, then filled), the plan ANDed the
  // team's whole runs_team range with the job's entries: 231,000 read for 1 run, 37 ms against
  // 0.1 (bench/probes/pg-plan-audit.ts).
  if (filter.team !== null) {
    conditions.push(filter.jobId === undefined ? `r.team = ${bind(filter.team)}` : `r.team IS NOT DISTINCT FROM ${bind(filter.team)}`);
  }
  if (filter.jobId !== undefined) conditions.push(`r.job_id = ${bind(filter.jobId)}`);
  if (filter.pool !== undefined) conditions.push(`r.pool = ${bind(filter.pool)}`);
  if (filter.status !== undefined) conditions.push(`r.status = ${bind(filter.status)}`);
  if (filter.sinceMs !== undefined) conditions.push(`r.scheduled_at >= ${bind(filter.sinceMs)}`);
  if (filter.untilMs !== undefined) conditions.push(`r.scheduled_at < ${bind(filter.untilMs)}`);
  if (filter.cursor !== undefined) {
    const cursor = decodeCursor(filter.cursor);
    conditions.push(`(r.scheduled_at, r.run_id) < (${bind(cursor.timeMs)}, ${bind(cursor.id)})`);
  }
  const where = conditions.length === 0 ? '' : `WHERE ${conditions.join(' AND ')}`;
  const result = await query<RunRow>(context, 'listRuns',
    `SELECT ${runColumns} FROM runs r ${where} ORDER BY r.scheduled_at DESC, r.run_id DESC LIMIT ${bind(filter.limit + 1)}`,
    values);
  const items = result.rows.slice(0, filter.limit).map(runFromRow);
  const last = items[items.length - 1];
  const nextCursor = result.rows.length > filter.limit && last !== undefined
    ? encodeCursor(last.scheduledAtMs, last.runId) : null;
  return { items, nextCursor };
}
