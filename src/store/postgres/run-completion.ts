/**
 * Completing an attempt (DESIGN.md flow 7): success ends the run; a failure waits for a
 * retry with backoff while attempts are left, otherwise the run is dead (the DLQ).
 *
 * The outcome is computed here (retry backoff is domain logic, not SQL) from a plain read,
 * then written by one statement that carries the fence: it changes the run only while it
 * is still `running` under the same token and attempt, and appends the run event in the same
 * statement (invariant 4 and 6). That is one commit, without an explicit transaction, per
 * completion: completions are the busiest write of a loaded cluster. A `buffer_one` job
 * also releases its held run, which must commit with the completion, so those complete
 * inside a transaction that locks the job row as dispatch does.
 */
import { hasAttemptsLeft, retryDelayMs } from '../../domain/retry.js';
import type { RetrySpec, RunStatus } from '../../domain/types.js';
import type { CompleteOutcome, CompleteRequest } from '../store.js';
import type pg from 'pg';
import { query, transaction, type StoreContext } from './context.js';
import { jsonParam, runColumns, runFromRow, type RunRow } from './rows.js';
import { classifyMiss, releaseHeldOf, tokenPattern } from './worker-runs.js';

interface RunForCompletion {
  status: RunStatus;
  fencing_token: string | null;
  attempt: number;
  attempt_base: number;
  job_id: string;
  retry: RetrySpec;
  overlap: string;
}

interface CompletionPlan {
  status: RunStatus;
  readyAtMs: number | null;
  eventType: string;
  detail: Record<string, unknown> | null;
}

function planCompletion(run: RunForCompletion, request: CompleteRequest, random: () => number): CompletionPlan {
  const attemptsUsed = run.attempt - run.attempt_base;
  if (request.status === 'succeeded') return { status: 'succeeded', readyAtMs: null, eventType: 'succeeded', detail: null };
  if (request.status === 'failed' && hasAttemptsLeft(run.retry, attemptsUsed)) {
    const delayMs = retryDelayMs(run.retry, attemptsUsed, random());
    return {
      status: 'retry_wait', readyAtMs: request.nowMs + delayMs, eventType: 'retry_scheduled',
      detail: { error: request.error, delayMs },
    };
  }
  return { status: 'dead', readyAtMs: null, eventType: 'dead', detail: { error: request.error, completion: request.status } };
}

const selectForCompletion = `SELECT r.status, r.fencing_token::text AS fencing_token, r.attempt, r.attempt_base, r.job_id,
         j.spec->'retry' AS retry, j.spec->>'overlap' AS overlap
    FROM runs r JOIN jobs j ON j.job_id = r.job_id
   WHERE r.run_id = $1 AND ($2::text IS NULL OR r.team = $2)`;

type Execute = (text: string, values: unknown[]) => Promise<pg.QueryResult<RunRow>>;

/** The fenced write: nothing changes unless the run is still running under this token and attempt. */
async function writeCompletion(execute: Execute, run: RunForCompletion, request: CompleteRequest,
  plan: CompletionPlan): Promise<RunRow | undefined> {
  const final = plan.status !== 'retry_wait';
  const result = await execute(
    `WITH updated AS (
       UPDATE runs r SET status = $4, ready_at = $5, finished_at = $6, lease_expires_at = NULL, last_error = $7,
                         result = $8::json
        WHERE r.run_id = $1 AND r.status = 'running' AND r.fencing_token = $2::bigint AND r.attempt = $3
        RETURNING ${runColumns}
     ), event AS (
       INSERT INTO run_events (run_id, at_ms, type, from_status, to_status, detail)
       SELECT run_id, $9, $10, 'running', $4, $11::json FROM updated
     )
     SELECT * FROM updated`,
    [request.runId, request.fencingToken, run.attempt, plan.status, plan.readyAtMs, final ? request.nowMs : null,
      plan.status === 'succeeded' ? null : request.error, jsonParam(request.result ?? null), request.nowMs,
      plan.eventType, plan.detail === null ? null : jsonParam(plan.detail)]);
  return result.rows[0];
}

function isCurrentAttempt(run: RunForCompletion | undefined, fencingToken: string): run is RunForCompletion {
  return run !== undefined && run.status === 'running' && run.fencing_token === fencingToken;
}

export async function completeRun(context: StoreContext, request: CompleteRequest): Promise<CompleteOutcome> {
  const read = await query<RunForCompletion>(context, 'completeRun', selectForCompletion, [request.runId, request.team]);
  const run = read.rows[0];
  if (!tokenPattern.test(request.fencingToken) || !isCurrentAttempt(run, request.fencingToken)) return classifyMiss(run);
  if (run.overlap === 'buffer_one') return completeReleasingHeld(context, request);
  const plan = planCompletion(run, request, context.random);
  const updated = await writeCompletion((text, values) => query<RunRow>(context, 'completeRun', text, values),
    run, request, plan);
  if (updated !== undefined) return { kind: 'completed', run: runFromRow(updated) };
  // The run moved between the read and the write (its lease expired, it was replaced): say how.
  const after = await query<RunForCompletion>(context, 'completeRun', selectForCompletion, [request.runId, request.team]);
  return classifyMiss(after.rows[0]);
}

/** The `buffer_one` path: the completion and the release of the held run commit together. */
function completeReleasingHeld(context: StoreContext, request: CompleteRequest): Promise<CompleteOutcome> {
  return transaction(context, 'completeRun', async (tx) => {
    const locked = await tx.query<RunForCompletion>(`${selectForCompletion} FOR UPDATE OF r`, [request.runId, request.team]);
    const run = locked.rows[0];
    if (!isCurrentAttempt(run, request.fencingToken)) return classifyMiss(run);
    const plan = planCompletion(run, request, context.random);
    const updated = await writeCompletion((text, values) => tx.query<RunRow>(text, values), run, request, plan);
    if (updated === undefined) return classifyMiss(run);
    if (plan.status !== 'retry_wait') await releaseHeldOf(tx, [{ jobId: run.job_id, overlap: run.overlap }], request.nowMs);
    return { kind: 'completed', run: runFromRow(updated) };
  });
}
