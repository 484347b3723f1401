/**
 * Run operations behind the HTTP API: the ledger (lists, one run with its events, the DLQ,
 * replay) and the worker calls (heartbeat, complete, and their batches). Leasing, which may
 * wait, lives in lease-waiters.ts. Fencing is the store's: a stale token changes nothing and
 * is counted. A completion that sends its run to the DLQ (failed_permanent, or out of
 * attempts) is logged, as the lease sweeper logs a lease that ran out with none left.
 */
import { TicklerError } from '../errors.js';
import type { Clock } from '../clock.js';
import type { Logger } from '../obs/log.js';
import type { Metrics } from '../obs/metrics.js';
import type { CompletionStatus, Page, RunRecord } from '../domain/types.js';
import { allTeamsPause, type RunListFilter, type RunWithEvents, type Store, type TeamScope } from '../store/store.js';
import { notFound } from './job-service.js';

export interface RunServiceDeps {
  store: Store;
  clock: Clock;
  metrics: Metrics;
  logger: Pick<Logger, 'warn'>;
  resultBytesMax: number;
}

/** A run record's `waiting_for` (docs/API.md "Capacity"). */
export type WaitingFor = { pause: 'pool' | 'team' } | { resource: string; max_concurrency: number; in_use: number };

export interface Completion {
  fencingToken: string;
  status: CompletionStatus;
  error: string | null;
  result: unknown;
}

/** One item of a batch: it succeeded with a value or failed with its own error. */
export type ItemOutcome<T> = { ok: true; value: T } | { ok: false; error: unknown };

export class RunService {
  constructor(private readonly deps: RunServiceDeps) {}

  list(filter: RunListFilter): Promise<Page<RunRecord>> {
    return this.deps.store.listRuns(filter);
  }

  async get(scope: TeamScope, runId: string): Promise<RunWithEvents> {
    const run = await this.deps.store.getRun(scope, runId);
    if (run === null) throw notFound('run', runId);
    return run;
  }

  /**
   * What keeps a ready run from being leased, if a lever does (docs/API.md "Capacity"): a pause
   * of its pool (for its team or every team), or the first of its resources whose cap is reached.
   * Null for a run that is not ready or that nothing holds.
   */
  async waitingFor(scope: TeamScope, run: RunRecord): Promise<WaitingFor | null> {
    if (run.status !== 'ready') return null;
    const pauses = await this.deps.store.listPoolPauses(run.pool);
    const pause = pauses.find((entry) => entry.team === allTeamsPause || entry.team === run.team);
    if (pause !== undefined) return { pause: pause.team === allTeamsPause ? 'pool' : 'team' };
    const job = await this.deps.store.getJob(scope, run.jobId);
    if (job === null || job.spec.resources.length === 0) return null;
    const full = (await this.deps.store.resourceUsage(job.spec.resources))
      .find((usage) => usage.maxConcurrency !== null && usage.inUse >= usage.maxConcurrency);
    return full === undefined ? null : { resource: full.name, max_concurrency: full.maxConcurrency!, in_use: full.inUse };
  }

  /** A dead run back to ready under the same run_id; anything else is not in the DLQ. */
  async replay(scope: TeamScope, runId: string): Promise<RunRecord> {
    const outcome = await this.deps.store.replayRun(scope, runId, this.deps.clock.nowMs());
    switch (outcome.kind) {
      case 'replayed':
        return outcome.run;
      case 'not_found':
        throw notFound('run', runId);
      case 'invalid_state':
        throw new TicklerError('invalid_state', `run ${runId} is ${outcome.run.status}; only a dead run can be replayed`);
    }
  }

  async heartbeat(scope: TeamScope, runId: string, fencingToken: string): Promise<number> {
    const outcome = await this.deps.store.heartbeatRun(scope, runId, fencingToken, this.deps.clock.nowMs());
    switch (outcome.kind) {
      case 'extended':
        return outcome.leaseExpiresAtMs;
      case 'not_found':
        throw notFound('run', runId);
      case 'stale_token':
        this.deps.metrics.staleCompletionsTotal.inc({ call: 'heartbeat' });
        throw staleToken(runId);
      case 'cancelled':
        throw new TicklerError('cancelled', `run ${runId} was cancelled; stop working on it`);
    }
  }

  async complete(scope: TeamScope, runId: string, completion: Completion): Promise<RunRecord> {
    const run = await this.record(scope, runId, completion, true);
    // A store answers `accepted` only to a caller that did not want the run.
    if (run === null) throw new Error(`the store did not read run ${runId} back after its completion`);
    return run;
  }

  /** Records the outcome; answers the run as it now is, or null when `wantRun` is false. */
  private async record(scope: TeamScope, runId: string, completion: Completion, wantRun: boolean): Promise<RunRecord | null> {
    const resultBytes = Buffer.byteLength(JSON.stringify(completion.result ?? null), 'utf8');
    if (resultBytes > this.deps.resultBytesMax) {
      throw new TicklerError('payload_too_large', `result is ${resultBytes} bytes of JSON, over the limit of ${this.deps.resultBytesMax}`,
        { field: 'result' });
    }
    const outcome = await this.deps.store.completeRun({
      team: scope,
      runId,
      fencingToken: completion.fencingToken,
      status: completion.status,
      error: completion.error === null ? null : escapeNul(completion.error),
      result: completion.result ?? null,
      nowMs: this.deps.clock.nowMs(),
      wantRun,
    });
    switch (outcome.kind) {
      case 'completed':
        this.deps.metrics.attemptsTotal.inc({ outcome: completion.status });
        if (completion.status !== 'succeeded') countFailure(this.deps.metrics, outcome.run);
        if (outcome.run.status === 'dead') logDead(this.deps.logger, outcome.run, completion.status);
        return outcome.run;
      case 'accepted':
        this.deps.metrics.attemptsTotal.inc({ outcome: completion.status });
        return null;
      case 'not_found':
        throw notFound('run', runId);
      case 'stale_token':
        this.deps.metrics.staleCompletionsTotal.inc({ call: 'complete' });
        throw staleToken(runId);
      case 'cancelled':
        throw new TicklerError('cancelled', `run ${runId} was cancelled; its completion is not recorded`);
    }
  }

  /**
   * Completes many attempts in one group commit; answers each item's outcome, in order. With
   * `wantRuns` false an accepted item answers null instead of the run (`answer: "status"`).
   */
  completeMany(scope: TeamScope, items: readonly { runId: string; completion: Completion }[], wantRuns = true):
    Promise<ItemOutcome<RunRecord | null>[]> {
    return settleEach(items, (item) => this.record(scope, item.runId, item.completion, wantRuns));
  }

  /** Extends many leases in one group commit; answers each item's new expiry, in order. */
  heartbeatMany(scope: TeamScope, items: readonly { runId: string; fencingToken: string }[]):
    Promise<ItemOutcome<number>[]> {
    return settleEach(items, (item) => this.heartbeat(scope, item.runId, item.fencingToken));
  }
}

/**
 * Starts every call before awaiting any, so that all of a batch's store writes are queued in
 * the same turn and the store's group commit makes them one transaction (one fsync for the
 * whole batch instead of one per run). Each item is fenced and fails on its own.
 */
async function settleEach<I, T>(items: readonly I[], call: (item: I) => Promise<T>): Promise<ItemOutcome<T>[]> {
  const pending = items.map((item) => {
    try {
      return call(item);
    } catch (error) {
      return Promise.reject(error);
    }
  });
  const settled = await Promise.allSettled(pending);
  return settled.map((outcome) => outcome.status === 'fulfilled'
    ? { ok: true, value: outcome.value }
    : { ok: false, error: outcome.reason as unknown });
}

/**
 * PostgreSQL's text cannot hold U+0000, and a worker's error text is whatever its handler
 * threw: refusing it would leave a failure that cannot be recorded. So on every store a NUL
 * in `error` is kept as the six characters `\u0000`, and the run reads the same on both.
 */
// eslint-disable-next-line no-control-regex -- NUL is exactly what this replaces
const nul = /\u0000/g;

function escapeNul(text: string): string {
  return text.includes('\u0000') ? text.replace(nul, '\\u0000') : text;
}

/**
 * Only a failed completion can kill a run, and a store answers `accepted` (no run read back)
 * only to successes, so every completion that killed one is seen here with its run.
 */
function logDead(logger: Pick<Logger, 'warn'>, run: RunRecord, completed: CompletionStatus): void {
  logger.warn({
    runId: run.runId, jobId: run.jobId, team: run.team, pool: run.pool, attempt: run.attempt, completed, error: run.lastError,
  }, completed === 'failed_permanent' ? 'run is dead: failed permanently' : 'run is dead: out of attempts');
}

/**
 * A failed attempt, by team: `tickler_runs_failed_total`, and `tickler_runs_attempts_gt_1_total`
 * when the run waits for another attempt. Only a failure can be retried, and a store answers
 * every failed completion with its run (see logDead), so each is seen here.
 */
function countFailure(metrics: Metrics, run: RunRecord): void {
  const team = metrics.teamLabel(run.team);
  metrics.runsFailedTotal.inc({ team });
  if (run.status === 'retry_wait') metrics.runsAttemptsGt1Total.inc({ team });
}

function staleToken(runId: string): TicklerError {
  return new TicklerError('stale_token', `the fencing token is not the current one of run ${runId}; another attempt holds it`,
    { field: 'fencing_token' });
}
