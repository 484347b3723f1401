/**
 * The dispatch transaction (DESIGN.md flow 5): for a batch of fired timers, in one commit,
 * check each item's shard token against the highest granted (invariant 2), check the timer
 * is still pending and its job active (invariant 7), insert the occurrences' runs with
 * ON CONFLICT DO NOTHING (invariant 1) through the overlap policy, consume the timer and
 * write the job's next one (invariant 3), appending a run event per status change
 * (invariant 6). A one-shot timer may instead be fired in two calls (`Store.writeRunsAhead`,
 * then `Store.finishAhead`): its run written before its fire time and the timer kept, marked
 * (`timers.dispatched_ahead`), then the marked timer consumed and the job ended.
 *
 * Few statements per item, because a herd dispatches thousands of them per commit: the
 * shard token is read once per shard and batch, the timer is consumed by one DELETE that
 * checks it is still this job's, the job is read without its spec (SQLite pulls out the two
 * fields dispatch needs), the active runs the overlap policy looks at are read for the whole
 * batch in one query (and kept current as the batch writes), and a run is inserted without
 * a read first — the insert's change count says whether it was new. Measured on a 100,000-timer herd: multi-row INSERTs
 * (VALUES (...), (...)) and INSERT ... RETURNING were both slower per row than one prepared
 * single-row INSERT each, so runs and events go in one by one.
 */
import type Database from 'better-sqlite3';
import { runIdOf } from '../../domain/identity.js';
import { decideOverlap, type ActiveRun } from '../../domain/overlap.js';
import type { Lane, OverlapPolicy, RunStatus } from '../../domain/types.js';
import type {
  DispatchItem, DispatchResult, FencedTimer, FinishAheadItem, FinishAheadResult, FiredRun, FiringRefused, OccurrenceWrite,
  WriteAheadItem, WriteAheadResult,
} from '../store.js';
import type { WriteEffects } from './job-writes.js';
import { parseDecimalId } from './rows.js';
import { runOfOccurrence, skippedDetailJson, type NewRun, type RunTable, type TimerTable } from './tables.js';
import { atomically } from './atomically.js';


/** What dispatch needs of a job; `lane_overlap` is `[lane, overlap]` as JSON, read out of the spec by SQLite. */
interface DispatchJobRow {
  job_seq: number;
  state: string;
  team: string;
  pool: string;
  lane_overlap: string;
}

interface ActiveRunRow {
  job_id: string;
  run_id: string;
  status: string;
  held: number;
  dispatched_at: number | null;
}

/** What one dispatch call keeps across its items. */
interface BatchState {
  nowMs: number;
  readyPools: string[];
  highestTokens: Map<number, number | undefined>;
  /** The active runs of the batch's jobs, read once and kept current as runs are written. */
  activeRuns: Map<string, ActiveRun[]>;
  /** The `dispatched` event's detail per shard token, serialised once. */
  dispatchedDetails: Map<string, string>;
}

/** A firing operation's answers, and what its commit announces. */
export interface Fired<Result> {
  results: Result[];
  effects: WriteEffects;
}

interface DispatchJob {
  jobId: string;
  jobSeq: number;
  team: string;
  shard: number;
  pool: string;
  lane: Lane;
  overlap: OverlapPolicy;
}

export class Dispatcher {
  private readonly selectShardToken: Database.Statement<[number], number>;
  private readonly consumeTimer: Database.Statement<[number, number, number]>;
  private readonly markTimerAhead: Database.Statement<[number, number, number]>;
  private readonly selectTimerAhead: Database.Statement<[number], number>;
  private readonly consumeAheadTimer: Database.Statement<[number, number], number>;
  private readonly finishActiveJob: Database.Statement<[number, number], string>;
  private readonly selectJob: Database.Statement<[string], DispatchJobRow>;
  private readonly selectRunStatus: Database.Statement<[string], string>;
  private readonly selectActiveRuns: Database.Statement<[string], ActiveRunRow>;
  private readonly cancelRun: Database.Statement<[number, string]>;
  private readonly finishJob: Database.Statement<[number, number]>;

  constructor(
    private readonly db: Database.Database,
    private readonly runs: RunTable,
    private readonly timers: TimerTable,
  ) {
    this.selectShardToken = db.prepare<[number], number>('SELECT token FROM shard_leases WHERE shard = ?').pluck();
    // Consumes the timer only if it is still pending and still this job's (by its seq, schema
    // v4) on this shard.
    this.consumeTimer = db.prepare('DELETE FROM timers WHERE timer_id = ? AND job_seq = ? AND shard = ?');
    // writeRunsAhead keeps the timer, marked; finishAhead consumes only a marked one.
    this.markTimerAhead = db.prepare(
      'UPDATE timers SET dispatched_ahead = 1 WHERE timer_id = ? AND job_seq = ? AND shard = ? AND dispatched_ahead = 0');
    this.selectTimerAhead = db.prepare<[number], number>('SELECT dispatched_ahead FROM timers WHERE timer_id = ?').pluck();
    // The finish reads no job row (a herd's finishes run at its instant): the timer names it.
    this.consumeAheadTimer = db.prepare<[number, number], number>(
      'DELETE FROM timers WHERE timer_id = ? AND shard = ? AND dispatched_ahead = 1 RETURNING job_seq').pluck();
    this.finishActiveJob = db.prepare<[number, number], string>(
      "UPDATE jobs SET state = 'done', version = version + 1, updated_at = ? WHERE job_seq = ? AND state = 'active' RETURNING pool")
      .pluck();
    this.selectJob = db.prepare(`
      SELECT job_seq, state, team, pool, json_extract(spec, '$.lane', '$.overlap') AS lane_overlap FROM jobs WHERE job_id = ?`);
    this.selectRunStatus = db.prepare<[string], string>('SELECT status FROM runs WHERE run_id = ?').pluck();
    // Through the job's seq with finished_at IS NULL, runs_active_by_job's key and condition, so
    // that partial index serves each job; the status list says the same and guards it.
    this.selectActiveRuns = db.prepare(`
      SELECT j.job_id, r.run_id, r.status, r.held, r.dispatched_at
      FROM jobs j JOIN runs r ON r.job_seq = j.job_seq AND r.finished_at IS NULL
      WHERE j.job_id IN (SELECT value FROM json_each(?)) AND r.status IN ('ready', 'running', 'retry_wait')`);
    this.cancelRun = db.prepare(`
      UPDATE runs SET status = 'cancelled', finished_at = ?, held = 0, ready_at = NULL, lease_expires_at = NULL
      WHERE run_id = ?`);
    // By the job's seq (its rowid): the row is found without a seek in the job id's index.
    this.finishJob = db.prepare(
      "UPDATE jobs SET state = 'done', version = version + 1, updated_at = ? WHERE job_seq = ?");
  }

  /** `Store.dispatch`: timers fired whole. */
  dispatch(items: readonly DispatchItem[], nowMs: number): Fired<DispatchResult> {
    return this.fire(items, nowMs, (item, batch) => this.dispatchOne(item, batch));
  }

  /** `Store.writeRunsAhead`: one-shot runs written before their fire time. */
  writeRunsAhead(items: readonly WriteAheadItem[], nowMs: number): Fired<WriteAheadResult> {
    return this.fire(items, nowMs, (item, batch) => this.writeAheadOne(item, batch));
  }

  /** `Store.finishAhead`: timers whose runs were written ahead, consumed. */
  finishAhead(items: readonly FinishAheadItem[], nowMs: number): Fired<FinishAheadResult> {
    return this.fire(items, nowMs, (item, batch) => this.finishAheadOne(item, batch));
  }

  private fire<Item extends FencedTimer & { occurrences?: readonly OccurrenceWrite[] }, Result>(items: readonly Item[],
    nowMs: number, fireOne: (item: Item, batch: BatchState) => Result): Fired<Result> {
    const batch: BatchState = {
      nowMs, readyPools: [], highestTokens: new Map(), activeRuns: new Map(), dispatchedDetails: new Map(),
    };
    const apply = () => {
      this.readActiveRuns(items, batch.activeRuns);
      return items.map((item) => fireOne(item, batch));
    };
    const results = atomically(this.db, apply);
    // The next timers are not announced as near timers: the dispatching node wheels them
    // itself from `nextTimerId`, and an echo would only put them in its wheel twice.
    return { results, effects: { nearTimers: [], readyPools: batch.readyPools } };
  }

  /** The active runs of every job that may fire a ready occurrence in this batch, in one query. */
  private readActiveRuns(items: readonly (FencedTimer & { occurrences?: readonly OccurrenceWrite[] })[],
    activeRuns: Map<string, ActiveRun[]>): void {
    const jobIds: string[] = [];
    for (const item of items) {
      if (activeRuns.has(item.jobId) || !(item.occurrences ?? []).some((occurrence) => occurrence.status === 'ready')) continue;
      activeRuns.set(item.jobId, []);
      jobIds.push(item.jobId);
    }
    if (jobIds.length === 0) return;
    for (const row of this.selectActiveRuns.all(JSON.stringify(jobIds))) {
      activeRuns.get(row.job_id)!.push({ runId: row.run_id, status: row.status as RunStatus, held: row.held === 1,
        dispatchedAtMs: row.dispatched_at ?? Number.NEGATIVE_INFINITY });
    }
  }

  /**
   * The shard token checked (once per shard and batch) and the timer id parsed; a refusal, or
   * the timer's row id to go on with.
   */
  private fence(item: FencedTimer, batch: BatchState): FiringRefused | number {
    const token = parseDecimalId(item.shardToken);
    if (!batch.highestTokens.has(item.shard)) batch.highestTokens.set(item.shard, this.selectShardToken.get(item.shard));
    const highestToken = batch.highestTokens.get(item.shard);
    if (token === null || (highestToken !== undefined && token < highestToken)) {
      return { kind: 'stale_token', timerId: item.timerId };
    }
    return parseDecimalId(item.timerId) ?? { kind: 'timer_gone', timerId: item.timerId };
  }

  private dispatchOne(item: DispatchItem, batch: BatchState): DispatchResult {
    const timerId = this.fence(item, batch);
    if (typeof timerId !== 'number') return timerId;
    // The job is read first: the timer names it by its seq. A job without a row has no timer.
    const row = this.selectJob.get(item.jobId);
    // A pending timer of a job that is not active should not exist: it is consumed all the
    // same, so no wheel loads it again, and fires nothing (invariant 7).
    if (row === undefined || this.consumeTimer.run(timerId, row.job_seq, item.shard).changes !== 1) {
      return { kind: 'timer_gone', timerId: item.timerId };
    }
    if (row.state !== 'active') return { kind: 'timer_gone', timerId: item.timerId };
    const [lane, overlap] = JSON.parse(row.lane_overlap) as [Lane, OverlapPolicy];
    const job: DispatchJob = { jobId: item.jobId, jobSeq: row.job_seq, team: row.team, shard: item.shard, pool: row.pool, lane, overlap };
    const runs = item.occurrences.map((occurrence) => this.recordOccurrence(job, occurrence, item.shardToken, batch));
    if (item.summary !== undefined) {
      const summaryRunId = runs.at(-1)?.runId ?? runIdOf(job.jobId, item.summary.toScheduledAtMs);
      this.runs.event(summaryRunId, batch.nowMs, 'catch_up_summary', null, null, { ...item.summary });
    }
    let nextTimerId: number | null = null;
    if (item.nextTimer === null) {
      this.finishJob.run(batch.nowMs, job.jobSeq);
    } else {
      // The consumed timer was the job's only one, so this insert is the replacement. The job
      // row is not touched: its next fire time is read from this timer.
      nextTimerId = this.timers.insertNew(job.jobSeq, job.shard, item.nextTimer);
    }
    return {
      kind: 'dispatched', timerId: item.timerId, runs, pool: job.pool,
      nextTimerId: nextTimerId === null ? null : String(nextTimerId),
    };
  }

  /**
   * The run is written ready from its fire time and the timer stays, marked. Only for a job
   * with no active run: overlap with one is judged at the fire time (the run may have ended by
   * then), so such a timer is left as it was, to be fired whole.
   */
  private writeAheadOne(item: WriteAheadItem, batch: BatchState): WriteAheadResult {
    const timerId = this.fence(item, batch);
    if (typeof timerId !== 'number') return timerId;
    const row = this.selectJob.get(item.jobId);
    if (row?.state !== 'active') {
      // Consumed as a whole firing would consume it, firing nothing (invariant 7).
      if (row !== undefined) this.consumeTimer.run(timerId, row.job_seq, item.shard);
      return { kind: 'timer_gone', timerId: item.timerId };
    }
    const hasActiveRun = (batch.activeRuns.get(item.jobId)?.length ?? 0) > 0;
    if (hasActiveRun || this.markTimerAhead.run(timerId, row.job_seq, item.shard).changes !== 1) {
      // Gone; marked by an earlier pass (whose run stands: it only awaits its finish); or
      // left as it was for the fire time.
      const mark = this.selectTimerAhead.get(timerId);
      if (mark === undefined) return { kind: 'timer_gone', timerId: item.timerId };
      return mark === 1 ? { kind: 'written_ahead', timerId: item.timerId, runs: [] } : { kind: 'left_for_fire_time', timerId: item.timerId };
    }
    const [lane, overlap] = JSON.parse(row.lane_overlap) as [Lane, OverlapPolicy];
    const job: DispatchJob = { jobId: item.jobId, jobSeq: row.job_seq, team: row.team, shard: item.shard, pool: row.pool, lane, overlap };
    const runs = item.occurrences.map((occurrence) => this.recordOccurrence(job, occurrence, item.shardToken, batch,
      Math.max(batch.nowMs, occurrence.fireAtMs)));
    return { kind: 'written_ahead', timerId: item.timerId, runs };
  }

  /**
   * The marked timer is consumed and the job, if still active, done; its run was written
   * ahead. A timer is only ever its job's (the job_seq it names), so the finish needs no read
   * of the job: at a herd's instant that read was half of each finish.
   */
  private finishAheadOne(item: FinishAheadItem, batch: BatchState): FinishAheadResult {
    const timerId = this.fence(item, batch);
    if (typeof timerId !== 'number') return timerId;
    const jobSeq = this.consumeAheadTimer.get(timerId, item.shard);
    if (jobSeq === undefined) return { kind: 'timer_gone', timerId: item.timerId };
    const pool = this.finishActiveJob.get(batch.nowMs, jobSeq);
    // Its run comes due now: parked waiters are served in this transaction, as by a whole
    // dispatch, not by a lease transaction of their own after the ready timer wakes them.
    if (pool !== undefined) batch.readyPools.push(pool);
    return { kind: 'finished', timerId: item.timerId };
  }

  /** `readyAtMs`: when a ready run becomes leasable (now, or its fire time for one written ahead). */
  private recordOccurrence(job: DispatchJob, occurrence: OccurrenceWrite, shardToken: string,
    batch: BatchState, readyAtMs = batch.nowMs): FiredRun {
    const { nowMs } = batch;
    const runId = runIdOf(job.jobId, occurrence.scheduledAtMs);
    if (occurrence.status !== 'ready') {
      const reason = occurrence.reason ?? occurrence.status;
      return this.insertRun(runOfOccurrence(job, occurrence, runId, nowMs, occurrence.status, reason, false), 'skipped',
        skippedDetailJson(reason));
    }
    // `allow` never looks at earlier runs.
    const activeRuns = batch.activeRuns.get(job.jobId) ?? [];
    const decision = decideOverlap(job.overlap, job.overlap === 'allow' ? [] : activeRuns, occurrence.scheduledAtMs);
    if (decision.action === 'skip') {
      return this.insertRun(runOfOccurrence(job, occurrence, runId, nowMs, 'skipped_overlap', decision.reason, false), 'skipped',
        skippedDetailJson(decision.reason));
    }
    if (decision.action === 'replace') {
      // Cancelling writes to other runs, so it must not happen for an occurrence already
      // dispatched: look first.
      const existing = this.selectRunStatus.get(runId);
      if (existing !== undefined) return { runId, status: existing as RunStatus, inserted: false };
      for (const cancelRunId of decision.cancelRunIds) {
        const fromStatus = this.selectRunStatus.get(cancelRunId) as RunStatus;
        this.cancelRun.run(nowMs, cancelRunId);
        this.runs.event(cancelRunId, nowMs, 'cancelled', fromStatus, 'cancelled', { replacedBy: runId });
      }
      activeRuns.length = 0;
    }
    const held = decision.action === 'hold';
    const run = this.insertRun(runOfOccurrence(job, occurrence, runId, nowMs, 'ready', null, held, readyAtMs), 'dispatched',
      decision.action === 'hold'
        ? JSON.stringify({ shard_token: shardToken, held: true, reason: decision.reason })
        : dispatchedDetail(batch, shardToken, readyAtMs > nowMs));
    if (run.inserted) {
      // A later occurrence of this job in the batch sees this one as active.
      activeRuns.push({ runId, status: 'ready', held, dispatchedAtMs: nowMs });
      batch.activeRuns.set(job.jobId, activeRuns);
      // A run written ahead is announced too, though not leasable yet: the pool's parked
      // waiters find nothing and arm a timer for its ready time (lease-waiters.ts): its job's
      // finish, which used to wake them, comes later (TimingConfig.finishAheadDelayMs).
      if (!held) batch.readyPools.push(job.pool);
    }
    return run;
  }

  /**
   * Inserts the run and its first event unless the run exists (invariant 1): then nothing is
   * written and the existing run's status is answered.
   */
  private insertRun(run: NewRun, eventType: string, detailJson: string): FiredRun {
    if (this.runs.insertWithFirstEvent(run, eventType, detailJson) === null) {
      return { runId: run.runId, status: this.selectRunStatus.get(run.runId) as RunStatus, inserted: false };
    }
    return { runId: run.runId, status: run.status, inserted: true };
  }
}

/**
 * The shard token in the ledger lets a history checker prove no stale token was accepted; a
 * run written ahead of its fire time says so (`ahead`), its `ready_at` being the fire time.
 */
function dispatchedDetail(batch: BatchState, shardToken: string, ahead: boolean): string {
  const cacheKey = ahead ? `${shardToken} ahead` : shardToken;
  let detail = batch.dispatchedDetails.get(cacheKey);
  if (detail === undefined) {
    detail = JSON.stringify(ahead ? { shard_token: shardToken, ahead: true } : { shard_token: shardToken });
    batch.dispatchedDetails.set(cacheKey, detail);
  }
  return detail;
}
