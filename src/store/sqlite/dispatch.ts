/**
 * The dispatch transaction (DESIGN.md flow 5): for a batch of fired timers, in one commit,
 * check each item's shard token against the highest granted (invariant 2), check the timer
 * is still pending and its job active (invariant 7), insert the occurrences' runs with
 * ON CONFLICT DO NOTHING (invariant 1) through the overlap policy, consume the timer and
 * write the job's next one (invariant 3), appending a run event per status change
 * (invariant 6).
 */
import type Database from 'better-sqlite3';
import { runIdOf } from '../../domain/identity.js';
import { decideOverlap } from '../../domain/overlap.js';
import type { JobRecord, RunStatus } from '../../domain/types.js';
import type { DispatchItem, DispatchResult, OccurrenceWrite } from '../store.js';
import type { WriteEffects } from './job-writes.js';
import { jobFromRow, jobSelectSql, parseDecimalId, type JobRow } from './rows.js';
import type { RunTable, TimerTable } from './tables.js';

type DispatchedRun = { runId: string; status: RunStatus; inserted: boolean };

export class Dispatcher {
  private readonly selectShardToken: Database.Statement<[number], number>;
  private readonly selectTimer: Database.Statement<[number], { job_id: string; shard: number }>;
  private readonly selectJob: Database.Statement<[string], JobRow>;
  private readonly deleteTimer: Database.Statement<[number]>;
  private readonly cancelRun: Database.Statement<[number, string]>;
  private readonly finishJob: Database.Statement<[number, string]>;

  constructor(
    private readonly db: Database.Database,
    private readonly runs: RunTable,
    private readonly timers: TimerTable,
  ) {
    this.selectShardToken = db.prepare<[number], number>('SELECT token FROM shard_leases WHERE shard = ?').pluck();
    this.selectTimer = db.prepare('SELECT job_id, shard FROM timers WHERE timer_id = ?');
    this.selectJob = db.prepare(`${jobSelectSql} WHERE j.job_id = ?`);
    this.deleteTimer = db.prepare('DELETE FROM timers WHERE timer_id = ?');
    this.cancelRun = db.prepare(`
      UPDATE runs SET status = 'cancelled', finished_at = ?, held = 0, ready_at = NULL, lease_expires_at = NULL
      WHERE run_id = ?`);
    this.finishJob = db.prepare(
      "UPDATE jobs SET state = 'done', version = version + 1, updated_at = ? WHERE job_id = ?");
  }

  dispatch(items: readonly DispatchItem[], nowMs: number): { results: DispatchResult[]; effects: WriteEffects } {
    const readyPools: string[] = [];
    const apply = this.db.transaction(() => items.map((item) => this.dispatchOne(item, nowMs, readyPools)));
    const results = apply.immediate();
    // The next timers are not announced as near timers: the dispatching node wheels them
    // itself from `nextTimerId`, and an echo would only put them in its wheel twice.
    return { results, effects: { nearTimers: [], readyPools } };
  }

  private dispatchOne(item: DispatchItem, nowMs: number, readyPools: string[]): DispatchResult {
    const token = parseDecimalId(item.shardToken);
    const highestToken = this.selectShardToken.get(item.shard);
    if (token === null || (highestToken !== undefined && token < highestToken)) {
      return { kind: 'stale_token', timerId: item.timerId };
    }
    const timerId = parseDecimalId(item.timerId);
    const timer = timerId === null ? undefined : this.selectTimer.get(timerId);
    if (timerId === null || timer === undefined || timer.job_id !== item.jobId || timer.shard !== item.shard) {
      return { kind: 'timer_gone', timerId: item.timerId };
    }
    const row = this.selectJob.get(item.jobId);
    if (row === undefined || row.state !== 'active') {
      // A pending timer of a job that is not active should not exist; drop it so no wheel
      // loads it again, and fire nothing (invariant 7).
      this.deleteTimer.run(timerId);
      return { kind: 'timer_gone', timerId: item.timerId };
    }
    const job = jobFromRow(row);
    const runs = item.occurrences.map((occurrence) => this.recordOccurrence(job, occurrence, nowMs, readyPools, item.shardToken));
    if (item.summary !== undefined) {
      const summaryRunId = runs.at(-1)?.runId ?? runIdOf(job.jobId, item.summary.toScheduledAtMs);
      this.runs.event(summaryRunId, nowMs, 'catch_up_summary', null, null, { ...item.summary });
    }
    this.deleteTimer.run(timerId);
    let nextTimerId: number | null = null;
    if (item.nextTimer === null) {
      this.finishJob.run(nowMs, job.jobId);
    } else {
      // The consumed timer was the job's only one, so this insert is the replacement. The job
      // row is not touched: its next fire time is read from this timer.
      nextTimerId = this.timers.insertNew(job.jobId, job.shard, item.nextTimer);
    }
    return {
      kind: 'dispatched', timerId: item.timerId, runs, pool: job.spec.pool,
      nextTimerId: nextTimerId === null ? null : String(nextTimerId),
    };
  }

  private recordOccurrence(job: JobRecord, occurrence: OccurrenceWrite, nowMs: number, readyPools: string[],
    shardToken: string): DispatchedRun {
    const runId = runIdOf(job.jobId, occurrence.scheduledAtMs);
    const existing = this.runs.get(runId);
    if (existing !== undefined) return { runId, status: existing.status as RunStatus, inserted: false };
    const base = {
      runId, jobId: job.jobId, team: job.team, pool: job.spec.pool, lane: job.spec.lane,
      scheduledAtMs: occurrence.scheduledAtMs, fireAtMs: occurrence.fireAtMs, dispatchedAtMs: nowMs,
    };
    if (occurrence.status !== 'ready') {
      const reason = occurrence.reason ?? occurrence.status;
      this.runs.insertIfAbsent({ ...base, status: occurrence.status, lastError: reason, readyAtMs: null,
        finishedAtMs: nowMs, held: false });
      this.runs.event(runId, nowMs, 'skipped', null, occurrence.status, { reason });
      return { runId, status: occurrence.status, inserted: true };
    }
    // `allow` never looks at earlier runs; skipping the query is a measurable share of dispatch.
    const activeRuns = job.spec.overlap === 'allow' ? [] : this.runs.activeRunsOf(job.jobId);
    const decision = decideOverlap(job.spec.overlap, activeRuns);
    if (decision.action === 'skip') {
      const reason = `overlap ${job.spec.overlap}: an earlier run is still active`;
      this.runs.insertIfAbsent({ ...base, status: 'skipped_overlap', lastError: reason, readyAtMs: null,
        finishedAtMs: nowMs, held: false });
      this.runs.event(runId, nowMs, 'skipped', null, 'skipped_overlap', { reason });
      return { runId, status: 'skipped_overlap', inserted: true };
    }
    if (decision.action === 'replace') {
      for (const cancelRunId of decision.cancelRunIds) {
        const fromStatus = this.runs.get(cancelRunId)!.status as RunStatus;
        this.cancelRun.run(nowMs, cancelRunId);
        this.runs.event(cancelRunId, nowMs, 'cancelled', fromStatus, 'cancelled', { replacedBy: runId });
      }
    }
    const held = decision.action === 'hold';
    this.runs.insertIfAbsent({ ...base, status: 'ready', lastError: null, readyAtMs: nowMs, finishedAtMs: null, held });
    // The shard token in the ledger lets a history checker prove no stale token was accepted.
    this.runs.event(runId, nowMs, 'dispatched', null, 'ready', { shard_token: shardToken, ...(held ? { held: true } : {}) });
    if (!held) readyPools.push(job.spec.pool);
    return { runId, status: 'ready', inserted: true };
  }
}
