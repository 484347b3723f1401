/**
 * Team limits and create quotas in the embedded store (docs/API.md "Team limits"): the limits
 * table, and the per-team bucket row that a limited create reads and writes inside its own
 * transaction, before and after `JobWrites.create`. One process writes the file, so the row
 * needs no lock beyond the write transaction itself.
 *
 * The pending count reads two partial indexes (schema v9): the team's active jobs marked as
 * counted (only a limited team's creates mark theirs, so no other create pays for an index
 * entry) and the team's ready runs. Each is read up to `pending_max` entries, and at most once
 * per `pendingRecountIntervalMs` per team; creates in between add to the count kept in the row.
 */
import type Database from 'better-sqlite3';
import { takeTokens, type BucketState } from '../../domain/token-bucket.js';
import {
  defaultLimitsEntry, pendingRecountIntervalMs, type CreateJobOutcome, type CreateQuota, type QuotaCreateOutcome,
  type TeamLimitsEntry,
} from '../store.js';

interface LimitsRow {
  team: string;
  create_per_s: number | null;
  pending_max: number | null;
  dispatch_per_s: number | null;
  weight: number;
}

interface BucketRow {
  tokens: number;
  at_ms: number;
  pending: number | null;
  pending_at_ms: number | null;
}

/** What a quota check decided, and the bucket row to write either way. */
type QuotaDecision =
  | { kind: 'admitted'; row: BucketRow }
  | { kind: 'refused'; row: BucketRow; refusal: Extract<QuotaCreateOutcome, { kind: 'refused' }> };

export class TeamLimitsTable {
  private readonly selectAll: Database.Statement<[], LimitsRow>;
  private readonly upsert: Database.Statement<[string, number | null, number | null, number | null, number, number]>;
  private readonly remove: Database.Statement<[string]>;
  private readonly markTeamCounted: Database.Statement<[string]>;
  private readonly markAllCounted: Database.Statement<[]>;
  private readonly markJobCounted: Database.Statement<[string]>;
  private readonly selectBucket: Database.Statement<[string], BucketRow>;
  private readonly writeBucket: Database.Statement<[string, number, number, number | null, number | null]>;
  private readonly countPending: Database.Statement<[string, number, string, number], number>;

  constructor(private readonly db: Database.Database) {
    this.selectAll = db.prepare('SELECT team, create_per_s, pending_max, dispatch_per_s, weight FROM team_limits ORDER BY team');
    this.upsert = db.prepare(`
      INSERT INTO team_limits (team, create_per_s, pending_max, dispatch_per_s, weight, updated_at) VALUES (?, ?, ?, ?, ?, ?)
      ON CONFLICT (team) DO UPDATE SET create_per_s = excluded.create_per_s, pending_max = excluded.pending_max,
        dispatch_per_s = excluded.dispatch_per_s, weight = excluded.weight, updated_at = excluded.updated_at`);
    this.remove = db.prepare('DELETE FROM team_limits WHERE team = ?');
    this.markTeamCounted = db.prepare(`UPDATE jobs SET quota_counted = 1 WHERE team = ? AND state = 'active' AND quota_counted IS NULL`);
    this.markAllCounted = db.prepare(`UPDATE jobs SET quota_counted = 1 WHERE state = 'active' AND quota_counted IS NULL`);
    this.markJobCounted = db.prepare('UPDATE jobs SET quota_counted = 1 WHERE job_id = ?');
    this.selectBucket = db.prepare('SELECT tokens, at_ms, pending, pending_at_ms FROM team_buckets WHERE team = ?');
    this.writeBucket = db.prepare(`
      INSERT INTO team_buckets (team, tokens, at_ms, pending, pending_at_ms) VALUES (?, ?, ?, ?, ?)
      ON CONFLICT (team) DO UPDATE SET tokens = excluded.tokens, at_ms = excluded.at_ms, pending = excluded.pending,
        pending_at_ms = excluded.pending_at_ms`);
    this.countPending = db.prepare<[string, number, string, number], number>(`
      SELECT (SELECT count(*) FROM (SELECT 1 FROM jobs WHERE team = ? AND quota_counted = 1 AND state = 'active' LIMIT ?))
           + (SELECT count(*) FROM (SELECT 1 FROM runs WHERE team = ? AND status = 'ready' AND team <> '' LIMIT ?))`).pluck();
  }

  list(): TeamLimitsEntry[] {
    return this.selectAll.all().map((row) => ({
      team: row.team, createPerS: row.create_per_s, pendingMax: row.pending_max, dispatchPerS: row.dispatch_per_s, weight: row.weight,
    }));
  }

  put(entries: readonly TeamLimitsEntry[], nowMs: number): void {
    for (const entry of entries) {
      this.upsert.run(entry.team, entry.createPerS, entry.pendingMax, entry.dispatchPerS, entry.weight, nowMs);
      if (entry.pendingMax === null) continue;
      if (entry.team === defaultLimitsEntry) this.markAllCounted.run();
      else this.markTeamCounted.run(entry.team);
    }
  }

  delete(team: string): boolean {
    return this.remove.run(team).changes > 0;
  }

  /**
   * Inside the write transaction: decides whether `count` creates of the quota's team fit, and
   * writes the bucket row as it then stands (a refusal keeps the pending count it made, so
   * that a client knocking at the limit does not count again on every request).
   */
  admit(quota: CreateQuota, count: number, nowMs: number): Extract<QuotaCreateOutcome, { kind: 'refused' }> | null {
    const decision = this.decide(quota, count, nowMs);
    const { row } = decision;
    this.writeBucket.run(quota.team, row.tokens, row.at_ms, row.pending, row.pending_at_ms);
    return decision.kind === 'refused' ? decision.refusal : null;
  }

  /** Marks the jobs a limited create made as counted toward `pending_max` (schema v9, `jobs_quota_pending`). */
  markCounted(outcomes: readonly CreateJobOutcome[]): void {
    for (const outcome of outcomes) if (outcome.kind === 'created' && outcome.job.state === 'active') this.markJobCounted.run(outcome.job.jobId);
  }

  private decide(quota: CreateQuota, count: number, nowMs: number): QuotaDecision {
    const stored = this.selectBucket.get(quota.team);
    const row: BucketRow = stored ?? { tokens: 0, at_ms: nowMs, pending: null, pending_at_ms: null };
    let bucket: BucketState | null = stored === undefined ? null : { tokens: stored.tokens, atMs: stored.at_ms };
    if (quota.createPerS !== null) {
      const take = takeTokens(bucket, quota.createPerS, count, nowMs);
      if (!take.admitted) return { kind: 'refused', row, refusal: { kind: 'refused', limit: 'create_per_s', retryAfterMs: take.retryAfterMs } };
      bucket = take.state;
    }
    if (quota.pendingMax !== null) {
      const fresh = row.pending !== null && row.pending_at_ms !== null &&
        nowMs >= row.pending_at_ms && nowMs - row.pending_at_ms < pendingRecountIntervalMs;
      if (!fresh) {
        row.pending = this.countPending.get(quota.team, quota.pendingMax, quota.team, quota.pendingMax)!;
        row.pending_at_ms = nowMs;
      }
      if (row.pending! + count > quota.pendingMax) {
        return { kind: 'refused', row, refusal: { kind: 'refused', limit: 'pending_max', retryAfterMs: pendingRecountIntervalMs, pending: row.pending! } };
      }
      row.pending = row.pending! + count;
    }
    if (bucket !== null) {
      row.tokens = bucket.tokens;
      row.at_ms = bucket.atMs;
    }
    return { kind: 'admitted', row };
  }
}
