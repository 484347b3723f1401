/**
 * Reads of the embedded store: jobs, timers for the loader, runs and their history, and
 * the reconciler's "jobs without a timer". Lists are keyset-paged, newest first, with
 * opaque cursors; a team-scoped read of another team's object answers as for an unknown id.
 */
import assert from 'node:assert/strict';
import type Database from 'better-sqlite3';
import { laneOrder } from '../store.js';
import { shardCount } from '../../limits.js';
import { runStatuses, type JobRecord, type Page, type RunRecord } from '../../domain/types.js';
import type {
  JobListFilter, LoadTimersQuery, LoadedTimer, RunListFilter, RunWithEvents, AnnouncedSilence, SilentJob, SilentJobsCursor, TeamScope,
} from '../store.js';
import {
  jobFromRow, jobSelectSql, loadedTimerFromRow, parseDecimalId, runEventFromRow, runFromRow,
  type JobRow, type RunEventRow, type RunRow, type TimerWithJobRow,
} from './rows.js';
import { boundLimit } from './tables.js';
import { decodeCursor, encodeCursor } from '../cursor.js';

type Param = string | number | null;

/** Filters vary per call; each distinct SQL text is prepared once and kept. */
class StatementCache {
  private readonly statements = new Map<string, Database.Statement<Param[]>>();

  constructor(private readonly db: Database.Database) {}

  get(sql: string): Database.Statement<Param[]> {
    let statement = this.statements.get(sql);
    if (statement === undefined) {
      statement = this.db.prepare<Param[]>(sql);
      this.statements.set(sql, statement);
    }
    return statement;
  }
}

/**
 * The tie-breaking rowid of a list cursor's last item, found by the id the cursor carries (a
 * job or run id, as before v2, so cursors stay valid across the upgrade and a VACUUM that
 * renumbers rowids). Jobs and runs are never deleted; were the row gone, the cursor would
 * skip the rest of its tie rather than repeat items.
 */
function rowidOfCursor(selectRowidById: string): string {
  return `coalesce((${selectRowidById}), -1)`;
}

export class StoreReads {
  private readonly cache: StatementCache;
  private readonly selectJob: Database.Statement<[string], JobRow>;
  private readonly selectRun: Database.Statement<[string], RunRow>;
  private readonly selectEvents: Database.Statement<[string, number], RunEventRow>;
  private readonly countJobsWithoutTimerStatement: Database.Statement<[], number>;
  private readonly selectJobsWithoutTimerIn: Database.Statement<[number, number, number], JobRow>;
  private readonly selectLastJobSeq: Database.Statement<[], number | null>;
  private readonly selectSilenceAnnounced: Database.Statement<[number], JobRow & { silence_announced_since: number }>;
  private readonly selectSilentJobs: Database.Statement<[{
    team: string | null; nowMs: number; limit: number; afterMs: number | null; afterJobId: string;
  }],
    JobRow & { last_success_at: number | null; silent_since: number }>;
  private readonly selectNextLeaseExpiry: Database.Statement<[], number | null>;
  private readonly selectNextReady: Database.Statement<[{ pool: string; team: string | null }], number | null>;

  constructor(db: Database.Database) {
    this.cache = new StatementCache(db);
    this.selectJob = db.prepare(`${jobSelectSql} WHERE j.job_id = ?`);
    this.selectRun = db.prepare('SELECT * FROM runs WHERE run_id = ?');
    // Events are keyed by the run's seq; the run id they answer with is the one asked for.
    this.selectEvents = db.prepare(`
      SELECT event_id, ? AS run_id, at, type, from_status, to_status, detail FROM run_events
      WHERE run_seq = ? ORDER BY event_id`);
    // Every active job, one-shot or recurring, should have its pending timer: one without is
    // a silent miss either way.
    const withoutTimer = `FROM jobs j WHERE j.state = 'active'
      AND NOT EXISTS (SELECT 1 FROM timers t WHERE t.job_seq = j.job_seq)`;
    this.countJobsWithoutTimerStatement = db.prepare<[], number>(`SELECT count(*) ${withoutTimer}`).pluck();
    // The same check over one range of job seqs (a range of the table's rowid), so a caller
    // can give the event loop a turn between ranges.
    this.selectJobsWithoutTimerIn = db.prepare(`SELECT j.*, NULL AS next_fire_at, NULL AS next_scheduled_at
      FROM jobs j WHERE j.job_seq > ? AND j.job_seq <= ? AND j.state = 'active'
        AND NOT EXISTS (SELECT 1 FROM timers t WHERE t.job_seq = j.job_seq) LIMIT ?`);
    this.selectLastJobSeq = db.prepare<[], number | null>('SELECT max(job_seq) FROM jobs').pluck();
    // Only the watched jobs, through jobs_watched (schema v5), once per reconciler pass; each
    // looks up its latest success on runs_job_history (job_seq, scheduled_at) from the newest
    // run back, which finds it at once for a job that usually succeeds.
    this.selectSilentJobs = db.prepare(`
      SELECT * FROM (
        SELECT *, max(coalesce(last_success_at, updated_at), updated_at) + max_silence_s * 1000 AS silent_since
        FROM (
          SELECT j.*, t.fire_at AS next_fire_at, t.scheduled_at AS next_scheduled_at,
            (SELECT r.finished_at FROM runs r WHERE r.job_seq = j.job_seq AND r.status = 'succeeded'
              ORDER BY r.scheduled_at DESC LIMIT 1) AS last_success_at
          FROM jobs j INDEXED BY jobs_watched LEFT JOIN timers t ON t.job_seq = j.job_seq
          WHERE j.max_silence_s IS NOT NULL AND j.state = 'active' AND (@team IS NULL OR j.team = @team)))
      WHERE silent_since <= @nowMs AND (@afterMs IS NULL OR (silent_since, job_id) > (@afterMs, @afterJobId))
      ORDER BY silent_since, job_id LIMIT @limit`);
    this.selectSilenceAnnounced = db.prepare(
      `${jobSelectSql} WHERE j.silence_announced_since IS NOT NULL ORDER BY j.job_seq LIMIT ?`);
    this.selectNextLeaseExpiry = db.prepare<[], number | null>(
      "SELECT min(lease_expires_at) FROM runs WHERE status = 'running'").pluck();
    // Per lane, in ready_at order, first match: a seek on runs_leasable (pool, lane, ready_at).
    // A min() over the whole pool walked every leasable run of it instead — measured 4 s of a
    // 40 s, 20,000-run drain, as each long-poll wake-up asked it. The lanes' seeks are one
    // statement (every lease request asks this first): 3.5 µs against 8.4 µs for three.
    const firstReadyOfLane = (lane: string): string => `(
      SELECT ready_at FROM runs
      WHERE pool = @pool AND lane = '${lane}' AND status IN ('ready', 'retry_wait') AND held = 0
        AND (@team IS NULL OR team = @team)
      ORDER BY ready_at LIMIT 1)`;
    this.selectNextReady = db.prepare<[{ pool: string; team: string | null }], number | null>(
      `SELECT min(ready_at) FROM (${laneOrder.map((lane) => `SELECT ${firstReadyOfLane(lane)} AS ready_at`).join(' UNION ALL ')})`,
    ).pluck();
  }

  getJob(team: TeamScope, jobId: string): JobRecord | null {
    const row = this.selectJob.get(jobId);
    return row !== undefined && (team === null || row.team === team) ? jobFromRow(row) : null;
  }

  listJobs(filter: JobListFilter): Page<JobRecord> {
    const where: string[] = [];
    const params: Param[] = [];
    if (filter.team !== null) { where.push('j.team = ?'); params.push(filter.team); }
    if (filter.state !== undefined) { where.push('j.state = ?'); params.push(filter.state); }
    if (filter.pool !== undefined) { where.push('j.pool = ?'); params.push(filter.pool); }
    if (filter.key !== undefined) { where.push('j.key = ?'); params.push(filter.key); }
    if (filter.keyPrefix !== undefined) {
      // An exact test, no pattern language: keys may hold % _ and anything else.
      where.push('substr(j.key, 1, ?) = ?');
      params.push([...filter.keyPrefix].length, filter.keyPrefix);
    }
    if (filter.label !== undefined) {
      const separator = filter.label.indexOf('=');
      if (separator === -1) {
        where.push("EXISTS (SELECT 1 FROM json_each(j.spec, '$.labels') WHERE key = ?)");
        params.push(filter.label);
      } else {
        where.push("EXISTS (SELECT 1 FROM json_each(j.spec, '$.labels') WHERE key = ? AND value = ?)");
        params.push(filter.label.slice(0, separator), filter.label.slice(separator + 1));
      }
    }
    if (filter.cursor !== undefined) {
      const cursor = decodeCursor(filter.cursor);
      where.push(`(j.created_at, j.rowid) < (?, ${rowidOfCursor('SELECT rowid FROM jobs WHERE job_id = ?')})`);
      params.push(cursor.timeMs, cursor.id);
    }
    // Ties on created_at fall to the rowid (insertion order), which ends the (team,
    // created_at) and (created_at) indexes: read backwards, they answer in this order.
    const sql = `${jobSelectSql} ${where.length > 0 ? `WHERE ${where.join(' AND ')}` : ''}
      ORDER BY j.created_at DESC, j.rowid DESC ${boundLimit}`;
    const rows = this.cache.get(sql).all(...params, filter.limit + 1) as JobRow[];
    const items = rows.slice(0, filter.limit).map(jobFromRow);
    const last = items.at(-1);
    return {
      items,
      nextCursor: rows.length > filter.limit && last !== undefined ? encodeCursor(last.createdAtMs, last.jobId) : null,
    };
  }

  /**
   * Pending timers of the given shards due before `untilMs`, in (fire_at, timer_id) order.
   * The shard set travels as one JSON parameter (never 1,024 bound values), and is dropped
   * altogether when it is every shard.
   */
  loadTimers(query: LoadTimersQuery): LoadedTimer[] {
    if (query.shards.length === 0 || query.limit <= 0) return [];
    const where = ['t.fire_at < ?'];
    const params: Param[] = [query.untilMs];
    if (new Set(query.shards).size < shardCount) {
      where.push('t.shard IN (SELECT value FROM json_each(?))');
      params.push(JSON.stringify(query.shards));
    }
    if (query.after !== undefined) {
      const afterTimerId = parseDecimalId(query.after.timerId) ?? Number.MAX_SAFE_INTEGER;
      where.push('(t.fire_at > ? OR (t.fire_at = ? AND t.timer_id > ?))');
      params.push(query.after.fireAtMs, query.after.fireAtMs, afterTimerId);
    }
    // Timers name their job by its seq (schema v4): the join is a rowid lookup in jobs.
    const sql = `SELECT t.timer_id, j.job_id, t.shard, t.fire_at, t.scheduled_at, j.version, j.spec, t.dispatched_ahead, j.team
      FROM timers t JOIN jobs j ON j.job_seq = t.job_seq
      WHERE ${where.join(' AND ')} ORDER BY t.fire_at, t.timer_id ${boundLimit}`;
    const rows = this.cache.get(sql).all(...params, query.limit) as TimerWithJobRow[];
    return rows.map(loadedTimerFromRow);
  }

  /** `findJobsWithoutTimer` over the jobs with `afterSeq < job_seq <= uptoSeq`. */
  findJobsWithoutTimerIn(afterSeq: number, uptoSeq: number, limit: number): JobRecord[] {
    return this.selectJobsWithoutTimerIn.all(afterSeq, uptoSeq, limit).map(jobFromRow);
  }

  lastJobSeq(): number {
    return this.selectLastJobSeq.get() ?? 0;
  }

  countJobsWithoutTimer(): number {
    return this.countJobsWithoutTimerStatement.get() ?? 0;
  }

  findSilentJobs(team: TeamScope, nowMs: number, limit: number, after?: SilentJobsCursor): SilentJob[] {
    const cursor = { afterMs: after?.silentSinceMs ?? null, afterJobId: after?.jobId ?? '' };
    return this.selectSilentJobs.all({ team, nowMs, limit, ...cursor }).map((row) => ({
      job: jobFromRow(row), lastSuccessAtMs: row.last_success_at, silentSinceMs: row.silent_since,
    }));
  }

  listSilenceAnnounced(limit: number): AnnouncedSilence[] {
    return this.selectSilenceAnnounced.all(limit).map((row) => ({ job: jobFromRow(row), silentSinceMs: row.silence_announced_since }));
  }

  getRun(team: TeamScope, runId: string): RunWithEvents | null {
    const row = this.selectRun.get(runId);
    if (row === undefined || (team !== null && row.team !== team)) return null;
    return { ...runFromRow(row), events: this.selectEvents.all(row.run_id, row.run_seq).map(runEventFromRow) };
  }

  listRuns(filter: RunListFilter): Page<RunRecord> {
    const where: string[] = [];
    const params: Param[] = [];
    if (filter.team !== null) {
      // With a job named, the unary plus keeps SQLite off runs_team_history: left to itself it
      // walked the team's whole history for one job's runs instead of seeking runs_job_history.
      where.push(filter.jobId === undefined ? 'team = ?' : '+team = ?');
      params.push(filter.team);
    }
    if (filter.jobId !== undefined) {
      // runs_job_history is keyed by the job's seq (schema v3); an unknown job has none and no runs.
      where.push('job_seq = (SELECT job_seq FROM jobs WHERE job_id = ?)');
      params.push(filter.jobId);
    }
    if (filter.pool !== undefined) { where.push('pool = ?'); params.push(filter.pool); }
    if (filter.status !== undefined) {
      // Inlined, not bound: only a literal lets SQLite pick the partial runs_dead index.
      assert.ok(runStatuses.includes(filter.status), 'a known run status');
      where.push(`status = '${filter.status}'`);
    }
    if (filter.sinceMs !== undefined) { where.push('scheduled_at >= ?'); params.push(filter.sinceMs); }
    if (filter.untilMs !== undefined) { where.push('scheduled_at < ?'); params.push(filter.untilMs); }
    if (filter.cursor !== undefined) {
      const cursor = decodeCursor(filter.cursor);
      where.push(`(scheduled_at, run_seq) < (?, ${rowidOfCursor('SELECT run_seq FROM runs WHERE run_id = ?')})`);
      params.push(cursor.timeMs, cursor.id);
    }
    // Ties on scheduled_at (a herd's runs all share it) fall to run_seq, dispatch order, which
    // ends the history indexes: read backwards, they answer in this order.
    const sql = `SELECT * FROM runs ${where.length > 0 ? `WHERE ${where.join(' AND ')}` : ''}
      ORDER BY scheduled_at DESC, run_seq DESC ${boundLimit}`;
    const rows = this.cache.get(sql).all(...params, filter.limit + 1) as RunRow[];
    const items = rows.slice(0, filter.limit).map(runFromRow);
    const last = items.at(-1);
    return {
      items,
      nextCursor: rows.length > filter.limit && last !== undefined ? encodeCursor(last.scheduledAtMs, last.runId) : null,
    };
  }

  nextLeaseExpiryMs(): number | null {
    return this.selectNextLeaseExpiry.get() ?? null;
  }

  nextReadyAtMs(team: TeamScope, pool: string): number | null {
    return this.selectNextReady.get({ pool, team }) ?? null;
  }
}
