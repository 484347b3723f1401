/**
 * Job writes of the embedded store: create (grouped), change, cancel, cancel by key prefix,
 * trigger and timer repair. Each public method is one transaction; the job row and its
 * pending timer always change together (invariant 3), and cancel deletes the timer in the
 * same commit that marks the job (invariant 7 starts here; dispatch finishes it).
 */
import type Database from 'better-sqlite3';
import { bucketOf, isSameRequest, runIdOf } from '../../domain/identity.js';
import { specJsonForWrite } from '../../domain/spec-json.js';
import type { JobRecord, RunRecord } from '../../domain/types.js';
import {
  dispatchedAtCreateDetail, jobCancelledBeforeDueReason, jobChangedBeforeDueReason,
  type CreateJobInput, type CreateJobOutcome, type JobChange, type JobChangeOutcome, type LoadedTimer, type TeamScope,
  type OccurrenceWrite, type TimerWrite,
} from '../store.js';
import { jobFromRow, jobSelectSql, jobToParams, runFromRow, type JobColumns, type JobRow } from './rows.js';
import { NearTimerBatch, runOfOccurrence, skippedDetailJson, type RunTable, type TimerTable } from './tables.js';
import { atomically } from './atomically.js';

export interface WriteEffects {
  nearTimers: LoadedTimer[];
  readyPools: string[];
}

/** A run written ahead of its fire time, not due yet (`JobWrites.selectRunAhead`). */
interface RunAheadRow {
  run_seq: number;
  scheduled_at: number;
  fire_at: number;
  pool: string;
  lane: string;
}

/**
 * Above every key starting with `prefix`: its UTF-8 bytes, then 0xFF, a byte no UTF-8 text
 * holds, bound as a blob and read as text (`CAST(? AS TEXT)`), since keys compare bytewise
 * (BINARY). `prefix` + U+10FFFF, the highest code point, was not: it left out the keys that
 * continue with that code point and more (test/store/conformance.ts, "at the edges").
 */
function keyPrefixEnd(prefix: string): Buffer {
  return Buffer.concat([Buffer.from(prefix, 'utf8'), Buffer.from([0xff])]);
}

const jobColumns =
  '(job_seq, job_id, team, key, pool, state, spec, request_hash, shard, version, created_at, updated_at, max_silence_s)';
const jobColumnCount = 13;
const timerColumns = '(job_seq, shard, bucket, fire_at, scheduled_at)';
const timerColumnCount = 5;
/**
 * Rows per multi-row INSERT of a create. One statement per row cost ~1 us a job more in
 * statement calls than one per 100 rows (raw inserts of 1,000-job batches into this schema,
 * CPU time: 5.8 -> 4.7 us a job; 10 rows a statement gained little, 200 no more than 100).
 * 100 rows bind 1,200 parameters, far below SQLite's limit of 32,766.
 */
const rowsPerInsert = 100;

const dispatchedAtCreateJson = JSON.stringify(dispatchedAtCreateDetail);

function insertSql(table: string, columns: string, columnCount: number, rows: number): string {
  const row = `(${new Array<string>(columnCount).fill('?').join(', ')})`;
  return `INSERT INTO ${table} ${columns} VALUES ${new Array<string>(rows).fill(row).join(', ')}`;
}

/**
 * Rows gathered for one multi-row INSERT: a full chunk goes through the prepared statement
 * for `rowsPerInsert` rows, a shorter rest through one prepared for its length (cached: a
 * batch of n jobs ends in at most one length, and the lengths repeat from batch to batch).
 */
class RowInserter {
  private readonly params: unknown[] = [];
  private rows = 0;
  private readonly statements = new Map<number, Database.Statement<unknown[]>>();

  constructor(private readonly db: Database.Database, private readonly table: string, private readonly columns: string,
    private readonly columnCount: number) {}

  add(...values: unknown[]): void {
    for (const value of values) this.params.push(value);
    this.rows++;
    if (this.rows === rowsPerInsert) this.flush();
  }

  flush(): void {
    if (this.rows === 0) return;
    let statement = this.statements.get(this.rows);
    if (statement === undefined) {
      statement = this.db.prepare<unknown[]>(insertSql(this.table, this.columns, this.columnCount, this.rows));
      this.statements.set(this.rows, statement);
    }
    statement.run(this.params);
    this.discard();
  }

  discard(): void {
    this.params.length = 0;
    this.rows = 0;
  }
}

export class JobWrites {
  private readonly selectJob: Database.Statement<[string], JobRow>;
  private readonly selectByKey: Database.Statement<[string, string], JobRow>;
  private readonly jobRows: RowInserter;
  private readonly timerRows: RowInserter;
  private readonly updateJob: Database.Statement<[JobColumns]>;
  private readonly updateSilenceAnnounced: Database.Statement<[number | null, string]>;
  private readonly selectPrefixJobs:
    Database.Statement<[string, string, Buffer, number, string], { job_id: string; job_seq: number }>;
  private readonly markCancelled: Database.Statement<[number, string]>;
  private readonly selectHasTimer: Database.Statement<[number], number>;
  private readonly selectLastJobSeq: Database.Statement<[], number>;
  private readonly selectRunAhead: Database.Statement<[number, number], RunAheadRow>;
  private readonly cancelRunAhead: Database.Statement<[number, number]>;
  private readonly moveRunAhead: Database.Statement<[number, number, string, string, number]>;
  /** The seq the next job created takes; read at the start of each create, inside its transaction. */
  private nextJobSeq = 0;

  constructor(
    private readonly db: Database.Database,
    private readonly timers: TimerTable,
    private readonly runs: RunTable,
    private readonly nearHorizonMs: number,
    private readonly wantsNearTimers: () => boolean,
  ) {
    this.selectJob = db.prepare(`${jobSelectSql} WHERE j.job_id = ?`);
    this.selectByKey = db.prepare(`${jobSelectSql} WHERE j.team = ? AND j.key = ?`);
    // Positional: binding by name looks every parameter up in an object built per row.
    this.jobRows = new RowInserter(db, 'jobs', jobColumns, jobColumnCount);
    this.timerRows = new RowInserter(db, 'timers', timerColumns, timerColumnCount);
    this.updateJob = db.prepare(`
      UPDATE jobs SET team = @team, key = @key, pool = @pool, state = @state, spec = @spec,
        request_hash = @request_hash, shard = @shard, version = @version, created_at = @created_at,
        updated_at = @updated_at, max_silence_s = @max_silence_s
      WHERE job_id = @job_id`);
    // Range on the (team, key) index, then the exact prefix test: keys may hold % _ ' and
    // anything else, and no pattern language is involved.
    this.updateSilenceAnnounced = db.prepare('UPDATE jobs SET silence_announced_since = ? WHERE job_id = ?');
    this.selectPrefixJobs = db.prepare(`
      SELECT job_id, job_seq FROM jobs
      WHERE team = ? AND key >= ? AND key < CAST(? AS TEXT) AND substr(key, 1, ?) = ? AND state != 'cancelled'`);
    this.markCancelled = db.prepare(`
      UPDATE jobs SET state = 'cancelled', version = version + 1, updated_at = ? WHERE job_id = ?`);
    this.selectHasTimer = db.prepare<[number], number>('SELECT 1 FROM timers WHERE job_seq = ?').pluck();
    this.selectLastJobSeq = db.prepare<[], number>('SELECT coalesce(max(job_seq), 0) FROM jobs').pluck();
    // The run a dispatch wrote ahead for the job's marked timer, while it is not due yet: at
    // most one (a one-shot job's only occurrence), through runs_active_by_job.
    this.selectRunAhead = db.prepare(`
      SELECT r.run_seq, r.scheduled_at, r.fire_at, r.pool, r.lane
      FROM timers t JOIN runs r ON r.job_seq = t.job_seq AND r.finished_at IS NULL
      WHERE t.job_seq = ? AND t.dispatched_ahead = 1 AND r.status = 'ready' AND r.ready_at > ?`);
    this.cancelRunAhead = db.prepare(`
      UPDATE runs SET status = 'cancelled', finished_at = ?, held = 0, ready_at = NULL WHERE run_seq = ?`);
    this.moveRunAhead = db.prepare('UPDATE runs SET fire_at = ?, ready_at = ?, pool = ?, lane = ? WHERE run_seq = ?');
  }

  /**
   * Creates the jobs with their first timers; `existing` and `key_conflict` write nothing.
   * Inside the group commit's savepoint (where it always runs in the store) it opens no
   * savepoint of its own.
   */
  create(items: readonly CreateJobInput[], nowMs: number): { outcomes: CreateJobOutcome[]; effects: WriteEffects } {
    const near = new NearTimerBatch(nowMs + this.nearHorizonMs, this.wantsNearTimers());
    const readyPools: string[] = [];
    // Timers inside the near horizon are announced with their ids, so they are inserted one
    // by one (a multi-row INSERT tells only the last id); the others wait in `timerRows`.
    const nearEndMs = this.wantsNearTimers() ? nowMs + this.nearHorizonMs : -Infinity;
    const createAll = (): CreateJobOutcome[] => {
      // Each job's timer names it by its seq (schema v4), and a multi-row INSERT tells only
      // the last rowid (nor does SQLite promise RETURNING's rows in VALUES order). So the create
      // numbers its jobs itself, as SQLite would have (the highest seq plus one), inside the
      // write transaction: no other connection inserts a job between this read and the inserts.
      this.nextJobSeq = this.selectLastJobSeq.get()! + 1;
      try {
        const outcomes = items.map((item) => this.createOne(item, near, nearEndMs, nowMs, readyPools));
        this.flushRows();
        return outcomes;
      } catch (error) {
        // Rows of a failed create must not stay behind for the next one.
        this.jobRows.discard();
        this.timerRows.discard();
        throw error;
      }
    };
    const outcomes = atomically(this.db, createAll);
    return { outcomes, effects: { nearTimers: near.timers, readyPools } };
  }

  private flushRows(): void {
    this.jobRows.flush();
    this.timerRows.flush();
  }

  private createOne(item: CreateJobInput, near: NearTimerBatch, nearEndMs: number, nowMs: number,
    readyPools: string[]): CreateJobOutcome {
    const key = item.job.spec.key;
    const timer = item.timer;
    const nextFireAtMs = timer?.fireAtMs ?? null;
    const nextScheduledAtMs = timer?.scheduledAtMs ?? null;
    // The record answered mirrors the timer; the service builds it so already, and then it is
    // answered as it came instead of being copied (a spread per job of a batch of 1,000).
    const job: JobRecord = item.job.nextFireAtMs === nextFireAtMs && item.job.nextScheduledAtMs === nextScheduledAtMs
      ? item.job
      : { ...item.job, nextFireAtMs, nextScheduledAtMs };
    if (key !== null) {
      // Rows still gathered (an earlier keyed job of this batch among them) are written first,
      // so the lookup sees every job created before this one.
      this.flushRows();
      const existing = this.selectByKey.get(job.team, key);
      if (existing !== undefined) {
        const found = jobFromRow(existing);
        return isSameRequest(existing.request_hash, { requestHash: job.requestHash, ...(item.legacyTextHash === undefined ? {} : { legacyTextHash: item.legacyTextHash }) })
          ? { kind: 'existing', job: found } : { kind: 'key_conflict', job: found };
      }
    }
    const jobSeq = this.nextJobSeq++;
    this.jobRows.add(jobSeq, job.jobId, job.team, key, job.spec.pool, job.state, specJsonForWrite(job.spec), job.requestHash,
      job.shard, job.version, job.createdAtMs, job.updatedAtMs, job.spec.max_silence_s);
    if (timer !== null) {
      if (timer.fireAtMs < nearEndMs) {
        this.flushRows();
        const timerId = this.timers.insertNew(jobSeq, job.shard, timer);
        near.add(timerId, job, timer);
      } else {
        this.timerRows.add(jobSeq, job.shard, bucketOf(timer.fireAtMs), timer.fireAtMs, timer.scheduledAtMs);
      }
    }
    if (item.dueNow !== undefined) this.dispatchAtCreate(job, jobSeq, item.dueNow, nowMs, readyPools);
    return { kind: 'created', job };
  }

  /**
   * A job due when created is dispatched here, as the dispatcher would at its fire time: its
   * run (ready now, or skipped as planned) and that run's first event. The job is new, so no
   * run of it exists and no overlap policy applies; no shard token fences it, as none fences
   * a trigger: the create is the client's own request, not a timer a stale node may hold.
   */
  private dispatchAtCreate(job: JobRecord, jobSeq: number, occurrences: readonly OccurrenceWrite[], nowMs: number,
    readyPools: string[]): void {
    const owner = { jobId: job.jobId, jobSeq, team: job.team, pool: job.spec.pool, lane: job.spec.lane };
    for (const occurrence of occurrences) {
      const ready = occurrence.status === 'ready';
      const reason = ready ? null : occurrence.reason ?? occurrence.status;
      const run = runOfOccurrence(owner, occurrence, runIdOf(job.jobId, occurrence.scheduledAtMs), nowMs, occurrence.status,
        reason, false);
      // A run id of a job created just now cannot exist already; invariant 1 holds regardless.
      const runSeq = this.runs.insertWithFirstEvent(run, ready ? 'dispatched' : 'skipped',
        reason === null ? dispatchedAtCreateJson : skippedDetailJson(reason));
      if (runSeq !== null && ready) readyPools.push(job.spec.pool);
    }
  }

  getVisible(team: TeamScope, jobId: string): JobRow | undefined {
    const row = this.selectJob.get(jobId);
    return row !== undefined && (team === null || row.team === team) ? row : undefined;
  }

  change(change: JobChange): { outcome: JobChangeOutcome; effects: WriteEffects } {
    const near = new NearTimerBatch(change.nowMs + this.nearHorizonMs, this.wantsNearTimers());
    const apply = (): JobChangeOutcome => {
      const row = this.getVisible(change.team, change.jobId);
      if (row === undefined) return { kind: 'not_found' };
      const current = jobFromRow(row);
      if (current.version !== change.expectedVersion) return { kind: 'version_conflict', job: current };
      const job: JobRecord = {
        ...current,
        spec: change.spec ?? current.spec,
        requestHash: change.requestHash ?? current.requestHash,
        state: change.state ?? current.state,
        version: current.version + 1,
        updatedAtMs: change.nowMs,
      };
      const runAhead = this.selectRunAhead.get(row.job_seq, change.nowMs);
      if (change.timer !== 'keep') {
        this.setTimer(job, row.job_seq, change.timer, near, runAhead, change.nowMs);
      } else if (runAhead !== undefined) {
        this.moveRunAheadTo(runAhead, runAhead.fire_at, job, change.nowMs);
      }
      this.updateJob.run(jobToParams(job));
      return { kind: 'changed', job };
    };
    const outcome = atomically(this.db, apply);
    return { outcome, effects: { nearTimers: near.timers, readyPools: [] } };
  }

  /**
   * Replaces (or with null, deletes) the job's pending timer and mirrors it on the record. A
   * run written ahead for the old timer and not due yet is taken back (cancelled), or, when
   * the new timer is the same occurrence (its run id), moved to the new fire time and pool:
   * the new timer is then marked as its, so it is only finished.
   */
  private setTimer(job: JobRecord, jobSeq: number, timer: TimerWrite | null, near: NearTimerBatch,
    runAhead?: RunAheadRow, nowMs?: number): void {
    const sameOccurrence = runAhead !== undefined && timer !== null && timer.scheduledAtMs === runAhead.scheduled_at;
    if (runAhead !== undefined && nowMs !== undefined) {
      if (sameOccurrence) this.moveRunAheadTo(runAhead, timer.fireAtMs, job, nowMs);
      else this.takeBackRunAhead(runAhead, nowMs, jobChangedBeforeDueReason);
    }
    if (timer === null) {
      this.timers.delete(jobSeq);
      job.nextFireAtMs = null;
      job.nextScheduledAtMs = null;
      return;
    }
    const timerId = this.timers.replace(jobSeq, job.shard, timer, sameOccurrence);
    job.nextFireAtMs = timer.fireAtMs;
    job.nextScheduledAtMs = timer.scheduledAtMs;
    near.add(timerId, job, timer, sameOccurrence);
  }

  /** A run written ahead and not due yet is cancelled with its job (or its old timing): it never came due. */
  private takeBackRunAhead(runAhead: RunAheadRow, nowMs: number, reason: string): void {
    this.cancelRunAhead.run(nowMs, runAhead.run_seq);
    this.runs.eventOfSeq(runAhead.run_seq, nowMs, 'cancelled', 'ready', 'cancelled', JSON.stringify({ reason }));
  }

  /**
   * A run written ahead follows its job to a new fire time, pool or lane (still the same
   * occurrence); the ledger says what changed, when anything did.
   */
  private moveRunAheadTo(runAhead: RunAheadRow, fireAtMs: number, job: JobRecord, nowMs: number): void {
    const { pool, lane } = job.spec;
    if (fireAtMs === runAhead.fire_at && pool === runAhead.pool && lane === runAhead.lane) return;
    this.moveRunAhead.run(fireAtMs, fireAtMs, pool, lane, runAhead.run_seq);
    this.runs.eventOfSeq(runAhead.run_seq, nowMs, 'changed', 'ready', 'ready',
      JSON.stringify({ reason: jobChangedBeforeDueReason, fire_at: fireAtMs, pool, lane }));
  }

  /** Deletes the job's pending timer, taking back a run written ahead for it that is not due yet. */
  private deleteTimer(jobSeq: number, nowMs: number, reason: string): void {
    const runAhead = this.selectRunAhead.get(jobSeq, nowMs);
    if (runAhead !== undefined) this.takeBackRunAhead(runAhead, nowMs, reason);
    this.timers.delete(jobSeq);
  }

  cancel(team: TeamScope, jobId: string, nowMs: number): JobRecord | null {
    return atomically(this.db, () => this.cancelOne(team, jobId, nowMs));
  }

  cancelMany(team: TeamScope, jobIds: readonly string[], nowMs: number): (JobRecord | null)[] {
    return atomically(this.db, () => jobIds.map((jobId) => this.cancelOne(team, jobId, nowMs)));
  }

  private cancelOne(team: TeamScope, jobId: string, nowMs: number): JobRecord | null {
    const row = this.getVisible(team, jobId);
    if (row === undefined) return null;
    if (row.state !== 'cancelled') {
      this.deleteTimer(row.job_seq, nowMs, jobCancelledBeforeDueReason);
      this.markCancelled.run(nowMs, jobId);
    }
    return jobFromRow(this.selectJob.get(jobId)!);
  }

  setSilenceAnnounced(jobId: string, silentSinceMs: number | null): void {
    this.updateSilenceAnnounced.run(silentSinceMs, jobId);
  }

  cancelByKeyPrefix(team: string, prefix: string, nowMs: number): number {
    const apply = (): number => {
      const jobs = this.selectPrefixJobs.all(team, prefix, keyPrefixEnd(prefix), [...prefix].length, prefix);
      for (const { job_id: jobId, job_seq: jobSeq } of jobs) {
        this.deleteTimer(jobSeq, nowMs, jobCancelledBeforeDueReason);
        this.markCancelled.run(nowMs, jobId);
      }
      return jobs.length;
    };
    return atomically(this.db, apply);
  }

  /**
   * A run outside the schedule, ready now. Its run_id follows the usual rule on `nowMs`, so a
   * repeated trigger in the same millisecond is the same run. A cancelled job is not
   * triggered (invariant 7): answers null as for an unknown job.
   */
  trigger(team: TeamScope, jobId: string, nowMs: number): { run: RunRecord | null; effects: WriteEffects } {
    const apply = (): RunRecord | null => {
      const row = this.getVisible(team, jobId);
      if (row === undefined || row.state === 'cancelled') return null;
      const job = jobFromRow(row);
      const runId = runIdOf(jobId, nowMs);
      const inserted = this.runs.insertIfAbsent({
        runId, jobId, jobSeq: row.job_seq, team: job.team, pool: job.spec.pool, lane: job.spec.lane, scheduledAtMs: nowMs,
        fireAtMs: nowMs, dispatchedAtMs: nowMs, status: 'ready', lastError: null, readyAtMs: nowMs,
        finishedAtMs: null, held: false,
      });
      if (inserted) this.runs.event(runId, nowMs, 'triggered', null, 'ready', null);
      return runFromRow(this.runs.get(runId)!);
    };
    const run = atomically(this.db, apply);
    return { run, effects: { nearTimers: [], readyPools: run === null ? [] : [run.pool] } };
  }

  repairTimer(jobId: string, expectedVersion: number, timer: TimerWrite, nowMs: number):
    { repaired: boolean; effects: WriteEffects } {
    const near = new NearTimerBatch(nowMs + this.nearHorizonMs, this.wantsNearTimers());
    const apply = (): boolean => {
      const row = this.selectJob.get(jobId);
      if (row === undefined || row.state !== 'active' || row.version !== expectedVersion) return false;
      if (this.selectHasTimer.get(row.job_seq) !== undefined) return false;
      const job = jobFromRow(row);
      this.setTimer(job, row.job_seq, timer, near);
      job.updatedAtMs = nowMs;
      this.updateJob.run(jobToParams(job));
      return true;
    };
    const repaired = atomically(this.db, apply);
    return { repaired, effects: { nearTimers: near.timers, readyPools: [] } };
  }
}
