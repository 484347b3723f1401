/**
 * Small, shared writers over the embedded store's tables: the token sequence, pending
 * timers, run rows and the run-event log. Each holds its prepared statements; the
 * operations in `job-writes.ts`, `dispatch.ts` and `run-transitions.ts` compose them inside
 * their own transactions. Nothing here opens a transaction.
 */
import type Database from 'better-sqlite3';
import { bucketOf } from '../../domain/identity.js';
import type { JobSpec, Lane, RunStatus } from '../../domain/types.js';
import type { LoadedTimer, OccurrenceWrite, TimerWrite } from '../store.js';
import type { RunRow } from './rows.js';

/**
 * `LIMIT ?` makes SQLite re-prepare the statement on every run once the value is bound (the
 * planner reads a bound LIMIT), ~13 µs each time here: 11 % of a one-run lease transaction,
 * 5.6 % of the server's CPU on bench:peers W2 (perf). `? + 0` is an expression the planner
 * does not read, so the statement keeps its plan (EXPLAIN QUERY PLAN unchanged).
 */
export const boundLimit = 'LIMIT ? + 0';

/** Tokens taken from the table at a time; see TokenSequence. */
export const tokenBlockSize = 65_536;

/**
 * Fencing tokens for worker and shard leases, handed out from blocks reserved in
 * `token_sequence`: the table is written once per `tokenBlockSize` tokens, not in every lease
 * transaction (where its page was one WAL frame of about seven: a frame is a whole 8 KiB page
 * written at commit). Tokens stay unique and only grow:
 * - within a process, they come from one counter;
 * - a reservation moves the table past that counter (`max(value, last handed out)`), so one whose
 *   transaction rolled back (its savepoint, or the whole group) is made good by the next;
 * - every open moves the table 2^32 ahead (`skipTokensPossiblyLost`), past any token handed
 *   out from a block the table no longer shows after a crash or a power failure.
 */
export class TokenSequence {
  private readonly advance: Database.Statement<[number, number], { value: number }>;
  /** The next token to hand out, and one past the last of the reserved block. */
  private next = 1;
  private end = 1;

  constructor(db: Database.Database, private readonly blockSize = tokenBlockSize) {
    this.advance = db.prepare('UPDATE token_sequence SET value = max(value, ?) + ? WHERE id = 1 RETURNING value');
  }

  /** Reserves `count` tokens and answers the first; they are first, first + 1, ... */
  reserve(count: number): number {
    if (this.next + count > this.end) {
      const row = this.advance.get(this.next - 1, Math.max(count, this.blockSize));
      if (row === undefined) throw new Error('token_sequence row is missing');
      this.end = row.value + 1;
      this.next = this.end - Math.max(count, this.blockSize);
    }
    const first = this.next;
    this.next += count;
    return first;
  }
}

/**
 * A job's one pending timer, named by the job's seq (schema v4): its entry in
 * timers_one_pending_per_job lands beside those of jobs created with it.
 */
export class TimerTable {
  private readonly insert: Database.Statement<[number, number, number, number, number, number]>;
  private readonly deleteByJob: Database.Statement<[number]>;

  constructor(db: Database.Database) {
    this.insert = db.prepare(
      'INSERT INTO timers (job_seq, shard, bucket, fire_at, scheduled_at, dispatched_ahead) VALUES (?, ?, ?, ?, ?, ?)');
    this.deleteByJob = db.prepare('DELETE FROM timers WHERE job_seq = ?');
  }

  /**
   * Writes the job's one pending timer, replacing any; answers the new timer id. `dispatchedAhead`:
   * the timer's run is written already (a change moved it), so firing it only finishes the job.
   */
  replace(jobSeq: number, shard: number, timer: TimerWrite, dispatchedAhead = false): number {
    this.deleteByJob.run(jobSeq);
    return this.insertNew(jobSeq, shard, timer, dispatchedAhead);
  }

  /** Writes a timer for a job known to have none (a fresh create, or a dispatch that consumed it). */
  insertNew(jobSeq: number, shard: number, timer: TimerWrite, dispatchedAhead = false): number {
    const info = this.insert.run(jobSeq, shard, bucketOf(timer.fireAtMs), timer.fireAtMs, timer.scheduledAtMs,
      dispatchedAhead ? 1 : 0);
    return Number(info.lastInsertRowid);
  }

  delete(jobSeq: number): void {
    this.deleteByJob.run(jobSeq);
  }
}

/**
 * Gathers the timers a transaction wrote inside the near horizon, to announce after commit
 * (DESIGN.md flow 2). `nowMs` is the caller's time, so the horizon follows the virtual clock.
 */
export class NearTimerBatch {
  readonly timers: LoadedTimer[] = [];

  constructor(private readonly horizonEndMs: number, private readonly enabled: boolean) {}

  add(timerId: number, job: { jobId: string; shard: number; version: number; spec: JobSpec; team: string }, timer: TimerWrite,
    dispatchedAhead = false): void {
    if (!this.enabled || timer.fireAtMs >= this.horizonEndMs) return;
    this.timers.push({
      timerId: String(timerId), jobId: job.jobId, shard: job.shard, fireAtMs: timer.fireAtMs, scheduledAtMs: timer.scheduledAtMs,
      jobVersion: job.version, spec: job.spec, team: job.team, ...(dispatchedAhead ? { dispatchedAhead: true } : {}),
    });
  }
}

export interface NewRun {
  runId: string;
  jobId: string;
  jobSeq: number;
  team: string;
  pool: string;
  lane: Lane;
  scheduledAtMs: number;
  fireAtMs: number;
  dispatchedAtMs: number;
  status: RunStatus;
  lastError: string | null;
  readyAtMs: number | null;
  finishedAtMs: number | null;
  held: boolean;
}

/** The job fields a run row copies. */
export type RunOwner = Pick<NewRun, 'jobId' | 'jobSeq' | 'team' | 'pool' | 'lane'>;

/**
 * The run row of a dispatched occurrence, as the dispatcher and a create dispatching its due
 * job both write it: a ready one is leasable from `readyAtMs` (now, unless written ahead of its
 * fire time), any other is final now with `lastError` its reason.
 */
export function runOfOccurrence(owner: RunOwner, occurrence: Pick<OccurrenceWrite, 'scheduledAtMs' | 'fireAtMs'>,
  runId: string, nowMs: number, status: RunStatus, lastError: string | null, held: boolean, readyAtMs = nowMs): NewRun {
  const ready = status === 'ready';
  return {
    runId, jobId: owner.jobId, jobSeq: owner.jobSeq, team: owner.team, pool: owner.pool, lane: owner.lane,
    scheduledAtMs: occurrence.scheduledAtMs, fireAtMs: occurrence.fireAtMs, dispatchedAtMs: nowMs,
    status, lastError, readyAtMs: ready ? readyAtMs : null, finishedAtMs: ready ? null : nowMs, held,
  };
}

/** The `skipped` event's detail for a run final at dispatch. */
export function skippedDetailJson(reason: string): string {
  return JSON.stringify({ reason });
}

export class RunTable {
  private readonly insert: Database.Statement<unknown[]>;
  private readonly selectById: Database.Statement<[string], RunRow>;
  private readonly selectActiveByJob: Database.Statement<[number], { run_id: string; status: string; held: number }>;
  private readonly selectHeld: Database.Statement<[number], RunRow>;
  private readonly release: Database.Statement<[number, string]>;
  private readonly selectJobsHolding: Database.Statement<[number], { job_seq: number }>;
  private readonly appendEvent: Database.Statement<[number, number, string, string | null, string | null, string | null]>;
  private readonly appendEventByRunId:
    Database.Statement<[number, string, string | null, string | null, string | null, string]>;
  private readonly appendEventsOfSeqs: Database.Statement<[string, string | null, string | null, string]>;
  private readonly selectJobsHoldingAmong: Database.Statement<[string], { job_seq: number }>;

  constructor(db: Database.Database) {
    this.insert = db.prepare(`
      INSERT INTO runs (run_id, job_id, team, pool, lane, scheduled_at, fire_at, dispatched_at, attempt,
        attempt_base, status, started_at, finished_at, last_error, result, ready_at, lease_expires_at, lease_ms,
        worker_id, fencing_token, held, job_seq)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, 0, ?, NULL, ?, ?, NULL, ?, NULL, NULL, NULL, NULL, ?, ?)
      ON CONFLICT (run_id) DO NOTHING`);
    this.selectById = db.prepare('SELECT * FROM runs WHERE run_id = ?');
    this.selectActiveByJob = db.prepare(`
      SELECT run_id, status, held FROM runs
      WHERE job_seq = ? AND finished_at IS NULL AND status IN ('ready', 'running', 'retry_wait')`);
    this.selectHeld = db.prepare(`
      SELECT * FROM runs WHERE job_seq = ? AND finished_at IS NULL AND status IN ('ready', 'running', 'retry_wait') AND held = 1
      ORDER BY scheduled_at LIMIT 1`);
    this.release = db.prepare('UPDATE runs SET held = 0, ready_at = ? WHERE run_id = ?');
    // `finished_at IS NULL` lets the planner walk runs_active_by_job (the active runs only).
    this.selectJobsHolding = db.prepare(`
      SELECT DISTINCT job_seq FROM runs WHERE finished_at IS NULL AND held = 1 AND status = 'ready' ORDER BY job_seq LIMIT ?`);
    this.appendEvent = db.prepare(
      'INSERT INTO run_events (run_seq, at, type, from_status, to_status, detail) VALUES (?, ?, ?, ?, ?, ?)');
    // The run's seq looked up in the same statement: the caller has just read or written the
    // run by its id, so the run_id index page it walks is in the cache.
    this.appendEventByRunId = db.prepare(`
      INSERT INTO run_events (run_seq, at, type, from_status, to_status, detail)
      SELECT run_seq, ?, ?, ?, ?, ? FROM runs WHERE run_id = ?`);
    // One event per [run_seq, at] of a JSON array (the last parameter).
    this.appendEventsOfSeqs = db.prepare(`
      INSERT INTO run_events (run_seq, at, type, from_status, to_status, detail)
      SELECT value ->> 0, value ->> 1, ?, ?, ?, NULL FROM json_each(?)`);
    this.selectJobsHoldingAmong = db.prepare(`
      SELECT DISTINCT r.job_seq FROM json_each(?) c JOIN runs r ON r.job_seq = c.value
      WHERE r.finished_at IS NULL AND r.status IN ('ready', 'running', 'retry_wait') AND r.held = 1`);
  }

  get(runId: string): RunRow | undefined {
    return this.selectById.get(runId);
  }

  /** Inserts the run unless its run_id exists (invariant 1); answers whether it inserted. */
  insertIfAbsent(run: NewRun): boolean {
    return this.insertReturningSeq(run) !== null;
  }

  /** As `insertIfAbsent`, answering the new run's seq (for `eventOfSeq`), or null when it existed. */
  insertReturningSeq(run: NewRun): number | null {
    const info = this.insert.run(run.runId, run.jobId, run.team, run.pool, run.lane, run.scheduledAtMs, run.fireAtMs,
      run.dispatchedAtMs, run.status, run.finishedAtMs, run.lastError, run.readyAtMs, run.held ? 1 : 0, run.jobSeq);
    return info.changes === 1 ? Number(info.lastInsertRowid) : null;
  }

  /**
   * Inserts the run with its first event (`dispatched` or `skipped`) unless its run_id exists
   * (invariant 1); answers the new run's seq, or null when it existed and nothing was written.
   */
  insertWithFirstEvent(run: NewRun, eventType: string, detailJson: string): number | null {
    const runSeq = this.insertReturningSeq(run);
    if (runSeq !== null) this.eventOfSeq(runSeq, run.dispatchedAtMs, eventType, null, run.status, detailJson);
    return runSeq;
  }

  /** The job's active runs, by the job's seq. */
  activeRunsOf(jobSeq: number): { runId: string; status: RunStatus; held: boolean }[] {
    return this.selectActiveByJob.all(jobSeq).map((row) => ({
      runId: row.run_id, status: row.status as RunStatus, held: row.held === 1,
    }));
  }

  /**
   * A run of the job (`jobSeq`) reached a final status: the earliest occurrence held behind it
   * (`buffer_one`, or queued under `forbid`) becomes leasable now, once no unheld run is left. Answers the run released and its pool, or null when nothing was held.
   */
  releaseHeldRun(jobSeq: number, nowMs: number): { runId: string; jobId: string; pool: string } | null {
    const held = this.selectHeld.get(jobSeq);
    if (held === undefined) return null;
    const stillBlocked = this.activeRunsOf(jobSeq).some((run) => !run.held);
    if (stillBlocked) return null;
    this.release.run(nowMs, held.run_id);
    this.event(held.run_id, nowMs, 'released', 'ready', 'ready', null);
    return { runId: held.run_id, jobId: held.job_id, pool: held.pool };
  }

  /** Of these jobs (seqs), the ones with a held run, each once. */
  jobsHoldingRunsAmong(jobSeqs: readonly number[]): number[] {
    return this.selectJobsHoldingAmong.all(JSON.stringify(jobSeqs)).map((row) => row.job_seq);
  }

  /** The jobs with a held run (`Store.releaseStrandedHeldRuns`), through the active runs' index. */
  jobsHoldingRuns(limit: number): number[] {
    return this.selectJobsHolding.all(limit).map((row) => row.job_seq);
  }

  /**
   * Appends an event to the run's log. Events are keyed by the run's seq, looked up here; an
   * event for a run without a row is not kept (it could never be read: a run is read first).
   */
  event(runId: string, atMs: number, type: string, fromStatus: RunStatus | null, toStatus: RunStatus | null,
    detail: Record<string, unknown> | null): void {
    this.appendEventByRunId.run(atMs, type, fromStatus, toStatus, detail === null ? null : JSON.stringify(detail), runId);
  }

  /**
   * As `event`, for a run whose seq the caller holds, with the detail serialised already: a
   * dispatch writes one detail thousands of times.
   */
  /** `eventOfSeq` for many runs, each `[run_seq, at]`, in one statement, in their order. */
  eventsOfSeqs(seqsAndTimes: readonly (readonly [number, number])[], type: string, fromStatus: RunStatus | null,
    toStatus: RunStatus | null): void {
    if (seqsAndTimes.length > 0) this.appendEventsOfSeqs.run(type, fromStatus, toStatus, JSON.stringify(seqsAndTimes));
  }

  eventOfSeq(runSeq: number, atMs: number, type: string, fromStatus: RunStatus | null, toStatus: RunStatus | null,
    detailJson: string | null): void {
    this.appendEvent.run(runSeq, atMs, type, fromStatus, toStatus, detailJson);
  }
}

export const finalRunStatuses: ReadonlySet<RunStatus> = new Set<RunStatus>(
  ['succeeded', 'dead', 'cancelled', 'abandoned', 'skipped_overlap', 'skipped_outage', 'skipped_dst']);
