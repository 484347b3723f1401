/**
 * Team limits and create quotas on PostgreSQL (docs/API.md "Team limits", DESIGN.md "Quotas
 * across nodes"). A limited team's create is one transaction that first locks the team's row
 * in `team_buckets` (created on first use): every node's creates of that team queue on that
 * row, so they all take from one bucket of tokens and one pending count, and a team limited
 * to 100 creates a second gets 100 a second from the whole cluster. The row's lock is held for
 * the create's few statements; no other team's creates wait for it, and an unlimited team's
 * creates never read it (they take the group commit of job-create.ts as before).
 *
 * The pending count reads two partial indexes (schema v12): jobs whose generated
 * `quota_pending_team` is set (an active job a limited team's create marked counted) and the
 * team's ready queue rows. Each is read up to `pending_max` entries, and at most once per
 * `pendingRecountIntervalMs` per team; creates in between add to the count kept in the row.
 */
import {
  defaultLimitsEntry, type CreateJobOutcome, type CreateQuota, type QuotaCreateOutcome, type TeamLimitsEntry,
} from '../store.js';
import {
  admitPending, bucketRowAfter, fullBucketTokens, pendingCountDue, takeCreateTokens, type QuotaBucketRow,
} from '../create-quota.js';
import type { Transaction } from './connection.js';
import { query, transaction, type StoreContext } from './context.js';
import { createJobsWithin, type CreateItem } from './job-create.js';

interface LimitsRow {
  team: string;
  create_per_s: number | null;
  pending_max: string | null;
  dispatch_per_s: number | null;
  weight: number;
}

interface BucketRow {
  tokens: number;
  at_ms: string;
  pending: string | null;
  pending_at_ms: string | null;
}

export async function listTeamLimits(context: StoreContext): Promise<TeamLimitsEntry[]> {
  const result = await query<LimitsRow>(context, 'listTeamLimits',
    'SELECT team, create_per_s, pending_max, dispatch_per_s, weight FROM team_limits ORDER BY team');
  return result.rows.map((row) => ({
    team: row.team, createPerS: row.create_per_s, pendingMax: row.pending_max === null ? null : Number(row.pending_max),
    dispatchPerS: row.dispatch_per_s, weight: row.weight,
  }));
}

/**
 * Writes the entries; one with `pending_max` marks the active jobs it covers as counted, so a
 * limit set on a team that has jobs already counts them. A one-off walk of the team's jobs
 * (every team's, for the default entry), under the admin's request.
 */
export async function putTeamLimits(context: StoreContext, entries: readonly TeamLimitsEntry[], nowMs: number): Promise<void> {
  await transaction(context, 'putTeamLimits', async (tx) => {
    for (const entry of entries) {
      await tx.query(`INSERT INTO team_limits (team, create_per_s, pending_max, dispatch_per_s, weight, updated_at)
        VALUES ($1, $2, $3, $4, $5, $6)
        ON CONFLICT (team) DO UPDATE SET create_per_s = excluded.create_per_s, pending_max = excluded.pending_max,
          dispatch_per_s = excluded.dispatch_per_s, weight = excluded.weight, updated_at = excluded.updated_at`,
      [entry.team, entry.createPerS, entry.pendingMax, entry.dispatchPerS, entry.weight, nowMs]);
      if (entry.pendingMax === null) continue;
      if (entry.team === defaultLimitsEntry) {
        await tx.query(`UPDATE jobs SET quota_counted = true WHERE state = 'active' AND quota_counted IS NULL`);
      } else {
        await tx.query(`UPDATE jobs SET quota_counted = true WHERE team = $1 AND state = 'active' AND quota_counted IS NULL`,
          [entry.team]);
      }
    }
  });
}

export async function deleteTeamLimits(context: StoreContext, team: string): Promise<boolean> {
  const result = await query(context, 'deleteTeamLimits', 'DELETE FROM team_limits WHERE team = $1', [team]);
  return (result.rowCount ?? 0) > 0;
}

/**
 * The quota's check (create-quota.ts), the creates (`createJobsWithin`, as a keyed group commit
 * writes them) and the bucket row, in one transaction. A refusal for `pending_max` commits only
 * the row's new pending count, so a client knocking at the limit does not count again on every
 * request; one for `create_per_s` writes nothing.
 */
export function createJobsWithinQuota(context: StoreContext, items: readonly CreateItem[], nowMs: number,
  quota: CreateQuota): Promise<QuotaCreateOutcome> {
  return transaction(context, 'createJobsWithinQuota', async (tx) => {
    const row = await lockBucket(tx, quota.team, nowMs);
    const tokens = takeCreateTokens(row, quota, items.length, nowMs);
    if ('refusal' in tokens) return tokens.refusal;
    const counted = pendingCountDue(row, quota, nowMs) ? await countPending(tx, quota.team, quota.pendingMax!) : null;
    const pending = admitPending(row, quota, items.length, nowMs, counted);
    if (pending.refusal !== null) {
      await writeBucket(tx, quota.team, bucketRowAfter(row, pending, nowMs));
      return pending.refusal;
    }
    const outcomes = await createJobsWithin(tx, items, context.nearHorizonMs);
    if (quota.pendingMax !== null) await markCounted(tx, outcomes);
    await writeBucket(tx, quota.team, bucketRowAfter(tokens.bucket, pending, nowMs));
    return { kind: 'created', outcomes };
  });
}

/** The team's bucket row, locked until the transaction ends; null when the team had none (one is inserted, full). */
async function lockBucket(tx: Transaction, team: string, nowMs: number): Promise<QuotaBucketRow | null> {
  const selectSql = 'SELECT tokens, at_ms, pending, pending_at_ms FROM team_buckets WHERE team = $1 FOR UPDATE';
  const found = await tx.query<BucketRow>(selectSql, [team]);
  if (found.rows[0] !== undefined) return bucketRowOf(found.rows[0]);
  // Two nodes' first creates of a team: one inserts, the other waits for it and then locks its row.
  const inserted = await tx.query(`INSERT INTO team_buckets (team, tokens, at_ms) VALUES ($1, $2, $3)
    ON CONFLICT (team) DO NOTHING`, [team, fullBucketTokens, nowMs]);
  if ((inserted.rowCount ?? 0) > 0) return null;
  const again = await tx.query<BucketRow>(selectSql, [team]);
  return again.rows[0] === undefined ? null : bucketRowOf(again.rows[0]);
}

function bucketRowOf(row: BucketRow): QuotaBucketRow {
  return {
    tokens: row.tokens, atMs: Number(row.at_ms),
    pending: row.pending === null ? null : Number(row.pending), pendingAtMs: row.pending_at_ms === null ? null : Number(row.pending_at_ms),
  };
}

async function writeBucket(tx: Transaction, team: string, row: QuotaBucketRow): Promise<void> {
  await tx.query('UPDATE team_buckets SET tokens = $2, at_ms = $3, pending = $4, pending_at_ms = $5 WHERE team = $1',
    [team, row.tokens, row.atMs, row.pending, row.pendingAtMs]);
}

/** The team's counted active jobs and ready runs, each read up to `limit` index entries. */
async function countPending(tx: Transaction, team: string, limit: number): Promise<number> {
  const result = await tx.query<{ pending: string }>(`SELECT
      (SELECT count(*) FROM (SELECT 1 FROM jobs WHERE quota_pending_team = $1 LIMIT $2) counted_jobs)
    + (SELECT count(*) FROM (SELECT 1 FROM active_runs WHERE team = $1 AND status = 'ready' AND team <> '' LIMIT $2) ready_runs) AS pending`,
  [team, limit]);
  return Number(result.rows[0]!.pending);
}

/** Marks the active jobs a limited create made as counted toward `pending_max`. */
async function markCounted(tx: Transaction, outcomes: readonly CreateJobOutcome[]): Promise<void> {
  const ids = outcomes.filter((outcome) => outcome.kind === 'created' && outcome.job.state === 'active').map((outcome) => outcome.job.jobId);
  if (ids.length === 0) return;
  await tx.query('UPDATE jobs SET quota_counted = true WHERE job_id = ANY($1::text[])', [ids]);
}
