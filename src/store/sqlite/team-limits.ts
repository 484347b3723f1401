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
import { defaultLimitsEntry, type CreateJobOutcome, type CreateQuota, type TeamLimitsEntry } from '../store.js';
import {
  admitPending, bucketRowAfter, pendingCountDue, takeCreateTokens, type QuotaBucketRow, type QuotaRefusal,
} from '../create-quota.js';

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
   * Inside the write transaction: decides whether `count` creates of the quota's team fit
   * (create-quota.ts), and writes the bucket row as it then stands (a refusal keeps the pending
   * count it made, so that a client knocking at the limit does not count again every request).
   */
  admit(quota: CreateQuota, count: number, nowMs: number): QuotaRefusal | null {
    const stored = this.selectBucket.get(quota.team);
    const row: QuotaBucketRow | null = stored === undefined ? null
      : { tokens: stored.tokens, atMs: stored.at_ms, pending: stored.pending, pendingAtMs: stored.pending_at_ms };
    const tokens = takeCreateTokens(row, quota, count, nowMs);
    if ('refusal' in tokens) return tokens.refusal;
    const counted = pendingCountDue(row, quota, nowMs)
      ? this.countPending.get(quota.team, quota.pendingMax!, quota.team, quota.pendingMax!)! : null;
    const pending = admitPending(row, quota, count, nowMs, counted);
    const written = bucketRowAfter(pending.refusal === null ? tokens.bucket : row, pending, nowMs);
    this.writeBucket.run(quota.team, written.tokens, written.atMs, written.pending, written.pendingAtMs);
    return pending.refusal;
  }

  /** Marks the jobs a limited create made as counted toward `pending_max` (schema v9, `jobs_quota_pending`). */
  markCounted(outcomes: readonly CreateJobOutcome[]): void {
    for (const outcome of outcomes) if (outcome.kind === 'created' && outcome.job.state === 'active') this.markJobCounted.run(outcome.job.jobId);
  }
}
