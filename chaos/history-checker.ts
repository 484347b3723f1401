/**
 * The history checker (TESTING.md "The history checker"): a pure function from a recorded
 * chaos history to counts and violations. It trusts nothing the system says about itself
 * except where it checks the system's ledger against what workers saw.
 *
 * Every occurrence the harness's jobs generate up to the end of the drain is classified as
 * expected, maybe (its create's outcome was unknown, or a cancel or pause raced it) or
 * excluded (cancelled or paused before it was due). Expected occurrences due before
 * `expectUntilMs` must be dispatched, or recorded as skipped under the job's policy, by the
 * end; their fire lag is held to the tight bound outside fault windows and the loose one
 * inside. Then each dispatched run's attempts are checked for duplicates and stale writes,
 * and each recurring job for a recurrence that stopped.
 *
 * A run is also invalid when one of its nodes could not be started, or a client of the run
 * was answered by a process that is not one of its nodes (another run on the machine holding
 * its port, say): the report's `cause` names that first, since the rest may follow from it.
 */
import { runIdOf, shardOf } from '../src/domain/identity.js';
import { analyseRun, ledgerAttemptEnds, attemptsOf } from './attempts.js';
import { FaultTimeline, faultWindowsOf, lagStatsOf, type LagStats } from './fault-windows.js';
import type {
  CompletionEvent,
  DispatchEvent,
  HandlerStartEvent, HeartbeatEvent,
  HistoryEvent,
  LedgerDispatchEvent,
  LedgerJobRecord,
  LedgerRunRecord,
  ForeignAnswerEvent,
  NodeStartFailedEvent,
} from './history.js';
import { cancelSent, isCron, JobBook, pausedAtEnd, wantedAt, type JobRecord, type ScheduleExpander } from './jobs.js';
import { isHandledSkip, unobservableReasons } from './ledger-checks.js';

export interface CheckOptions {
  /** Fire lag allowed outside fault windows. */
  lagBoundMs: number;
  /** Fire lag allowed inside fault windows: the shard lease TTL plus load time. */
  faultLagBoundMs: number;
  /** Expected occurrences due up to here must be handled by the end of the drain. */
  expectUntilMs: number;
  /** When the drain ended and the ledger was dumped; occurrences are generated up to here. */
  drainEndMs: number;
  expandSchedule: ScheduleExpander;
  /** How long a fault's effect outlasts it; default `faultLagBoundMs`. */
  faultSettleMs?: number;
  /** Allowance for rounding between processes' timestamps; default 5 ms. */
  clockSlackMs?: number;
  /**
   * The workers' `leaseAheadMs`: a run written ahead may be leased this long before its fire
   * time, and a cancel or pause acknowledged after that no longer decides it (it raced). 0
   * when absent.
   */
  leaseAheadMs?: number;
  /** Fail a run in which no stale write was rejected: the zombie was never exercised. */
  requireStaleRejected?: boolean;
  /** The counter of shard-token rejections at the sink. */
  staleShardCounterName?: string;
}

export const violationKinds = [
  'lost', 'unexpected', 'early', 'late_outside_fault', 'late_inside_fault', 'duplicate_concurrent_leases',
  'duplicate_after_completion', 'duplicate_completions', 'stale_accepted', 'recurrence_stopped', 'unobservable',
  'run_id_mismatch', 'stale_not_exercised', 'node_start_failed', 'foreign_answer',
] as const;
export type ViolationKind = (typeof violationKinds)[number];

export interface Violation {
  kind: ViolationKind;
  detail: string;
}

export interface CheckCounts {
  expected: number;
  maybe: number;
  dispatched: number;
  skippedByPolicy: number;
  redeliveries: number;
  staleRejectedWorkerTokens: number;
  staleRejectedShardTokens: number;
}

export interface CheckReport {
  valid: boolean;
  counts: CheckCounts;
  /** Violations counted by kind; every kind is present. */
  violationCounts: Record<ViolationKind, number>;
  violations: Violation[];
  /** Fire lag: from the fire time to the first dispatch the ledger or a worker shows. */
  lag: { outsideFault: LagStats; insideFault: LagStats; byFaultKind: Record<string, LagStats> };
  faults: Record<string, number>;
  /**
   * Why the run says nothing about tickler, when it does not: nodes that could not be
   * started, answers from processes outside the run. Null otherwise.
   */
  cause: string | null;
}

const staleShardCounterDefault = 'tickler_dispatch_rejected_stale_token_total';

interface Occurrence {
  runId: string;
  job: JobRecord;
  jobId: string;
  scheduledAtMs: number;
  skippedByDst: boolean;
}

/** The per-run observations, indexed once. */
interface Observations {
  dispatches: Map<string, DispatchEvent[]>;
  completions: Map<string, CompletionEvent[]>;
  heartbeats: Map<string, HeartbeatEvent[]>;
  handlerStarts: Map<string, HandlerStartEvent[]>;
  ledgerRuns: Map<string, LedgerRunRecord>;
  ledgerJobs: Map<string, LedgerJobRecord>;
}

function push<T>(map: Map<string, T[]>, key: string, value: T): void {
  const list = map.get(key);
  if (list === undefined) map.set(key, [value]);
  else list.push(value);
}

function observe(history: readonly HistoryEvent[]): Observations {
  const observations: Observations = { dispatches: new Map(), completions: new Map(), heartbeats: new Map(),
    handlerStarts: new Map(), ledgerRuns: new Map(), ledgerJobs: new Map() };
  for (const event of history) {
    if (event.type === 'dispatch') push(observations.dispatches, event.runId, event);
    else if (event.type === 'completion') push(observations.completions, event.runId, event);
    else if (event.type === 'heartbeat') push(observations.heartbeats, event.runId, event);
    else if (event.type === 'handler_start') push(observations.handlerStarts, event.runId, event);
    else if (event.type === 'ledger_run') observations.ledgerRuns.set(event.runId, event);
    else if (event.type === 'ledger_job') observations.ledgerJobs.set(event.jobId, event);
  }
  return observations;
}

/** Every occurrence the acknowledged jobs generate up to `untilMs`, by run id. */
function occurrencesOf(jobs: JobBook, untilMs: number, expand: ScheduleExpander): Map<string, Occurrence> {
  const occurrences = new Map<string, Occurrence>();
  for (const [jobId, job] of jobs.byJobId) {
    if (job.createdAtMs === null) continue;
    const times = isCron(job.schedule)
      ? expand(job.schedule, job.policies.dstGap, job.createdAtMs, untilMs)
      : job.schedule.atMs <= untilMs ? [{ scheduledAtMs: job.schedule.atMs, skippedDst: false }] : [];
    for (const { scheduledAtMs, skippedDst } of times) {
      const runId = runIdOf(jobId, scheduledAtMs);
      occurrences.set(runId, { runId, job, jobId, scheduledAtMs, skippedByDst: skippedDst });
    }
  }
  return occurrences;
}

class Tally {
  readonly counts: CheckCounts = { expected: 0, maybe: 0, dispatched: 0, skippedByPolicy: 0, redeliveries: 0,
    staleRejectedWorkerTokens: 0, staleRejectedShardTokens: 0 };
  readonly violations: Violation[] = [];
  readonly lagOutsideMs: number[] = [];
  readonly lagInsideMs: number[] = [];
  readonly lagByKindMs = new Map<string, number[]>();

  violate(kind: ViolationKind, detail: string): void {
    this.violations.push({ kind, detail });
  }
}

export function checkHistory(history: readonly HistoryEvent[], options: CheckOptions): CheckReport {
  const clockSlackMs = options.clockSlackMs ?? 5;
  const jobs = new JobBook(history);
  const windows = faultWindowsOf(history, options.drainEndMs);
  const faults = new FaultTimeline(windows, { settleMs: options.faultSettleMs ?? options.faultLagBoundMs,
    lagBoundMs: options.lagBoundMs });
  const observations = observe(history);
  const occurrences = occurrencesOf(jobs, options.drainEndMs, options.expandSchedule);
  const tally = new Tally();

  for (const occurrence of occurrences.values()) checkOccurrence(occurrence, observations, faults, options, tally);
  checkStrays(occurrences, jobs, observations, options, tally);
  for (const [runId, dispatches] of observations.dispatches) {
    checkAttempts(runId, dispatches, observations, clockSlackMs, tally);
  }
  checkRecurrences(jobs, occurrences, observations, options, tally);
  checkShardTokenOrder(history, observations, tally);
  const cause = checkIsolation(history, tally);
  tally.counts.staleRejectedShardTokens = staleShardRejections(history,
    options.staleShardCounterName ?? staleShardCounterDefault);
  if (options.requireStaleRejected === true
    && tally.counts.staleRejectedShardTokens + tally.counts.staleRejectedWorkerTokens === 0) {
    tally.violate('stale_not_exercised', 'no stale write was rejected: the fencing was never exercised');
  }

  const violationCounts = Object.fromEntries(violationKinds.map((kind) => [kind, 0])) as Record<ViolationKind, number>;
  for (const violation of tally.violations) violationCounts[violation.kind] += 1;
  return {
    valid: tally.violations.length === 0,
    counts: tally.counts,
    violationCounts,
    violations: tally.violations,
    lag: {
      outsideFault: lagStatsOf(tally.lagOutsideMs),
      insideFault: lagStatsOf(tally.lagInsideMs),
      byFaultKind: Object.fromEntries([...tally.lagByKindMs].map(([kind, lags]) => [kind, lagStatsOf(lags)])),
    },
    faults: faults.countsByKind(),
    cause,
  };
}

/**
 * Nodes that could not be started and answers from outside the run, each a violation; and
 * the cause they make, in words, or null.
 */
function checkIsolation(history: readonly HistoryEvent[], tally: Tally): string | null {
  const failedStarts = history.filter((event): event is NodeStartFailedEvent => event.type === 'node_start_failed');
  const foreign = history.filter((event): event is ForeignAnswerEvent => event.type === 'foreign_answer');
  for (const failed of failedStarts) tally.violate('node_start_failed', `${failed.process} could not be started: ${failed.reason}`);
  for (const answer of foreign) {
    tally.violate('foreign_answer', `${answer.client} asked ${answer.url} and was answered by `
      + `${answer.tag === null ? 'a process naming no run' : `a node of run ${answer.tag}`}, not this run (${answer.expected})`);
  }
  const causes: string[] = [];
  if (foreign.length > 0) {
    const urls = [...new Set(foreign.map((answer) => answer.url.replace(/^(https?:\/\/[^/]+).*$/, '$1')))];
    const tags = [...new Set(foreign.map((answer) => answer.tag ?? 'none'))];
    causes.push(`${foreign.length} answer(s) came from outside this run (${urls.join(', ')}; run tag ${tags.join(', ')}, `
      + `this run is ${foreign[0]?.expected}): another process on this machine holds this run's port(s)`);
  }
  if (failedStarts.length > 0) {
    const processes = [...new Set(failedStarts.map((failed) => failed.process))];
    const portTaken = failedStarts.some((failed) => /EADDRINUSE|already in use/.test(failed.reason));
    causes.push(`${processes.join(', ')} could not be started (${failedStarts[0]?.reason})`
      + (portTaken ? ': another process on this machine holds its port' : ''));
  }
  return causes.length === 0 ? null : `${causes.join('; ')}; violations besides these may follow from it`;
}

function checkOccurrence(occurrence: Occurrence, observations: Observations, faults: FaultTimeline,
  options: CheckOptions, tally: Tally): void {
  const { runId, job, scheduledAtMs } = occurrence;
  const dispatches = observations.dispatches.get(runId) ?? [];
  const ledger = observations.ledgerRuns.get(runId);
  const fireAtMs = Math.max(scheduledAtMs, dispatches[0]?.fireAtMs ?? ledger?.fireAtMs ?? scheduledAtMs);
  const faultKinds = faults.kindsAt(fireAtMs);
  const boundMs = faultKinds.length > 0 ? options.faultLagBoundMs : options.lagBoundMs;
  const wanted = wantedAt(job, fireAtMs, boundMs, options.leaseAheadMs ?? 0);
  // A run leased ahead is the worker's from the answer, but held until its ready time.
  const firstSeenAtMs = dispatches.length === 0 ? null
    : Math.min(...dispatches.map((dispatch) => Math.max(dispatch.atMs, dispatch.readyAtMs ?? dispatch.atMs)));
  const starts = observations.handlerStarts.get(runId) ?? [];
  const firstStartAtMs = starts.length === 0 ? null : Math.min(...starts.map((start) => start.atMs));
  const ledgerDispatchedAtMs = ledger === undefined ? null : ledgerDispatchedAt(ledger);
  const what = `${runId} (job ${occurrence.jobId}, scheduled ${new Date(scheduledAtMs).toISOString()})`;
  if (firstSeenAtMs !== null) tally.counts.dispatched += 1;

  if (wanted.kind === 'maybe') {
    tally.counts.maybe += 1;
    return;
  }
  if (wanted.kind === 'excluded') {
    if (firstSeenAtMs !== null && firstSeenAtMs < wanted.allowedFromMs) {
      tally.violate('unexpected', `${what} dispatched though ${wanted.reason}`);
    } else if (firstSeenAtMs === null && ledgerDispatchedAtMs !== null && ledger?.status !== 'cancelled'
      && ledgerDispatchedAtMs < wanted.allowedFromMs) {
      tally.violate('unexpected', `${what} dispatched (per the ledger) though ${wanted.reason}`);
    }
    return;
  }
  tally.counts.expected += 1;
  const handledSkip = ledger !== undefined && isHandledSkip(ledger.status, job.policies, cancelSent(job));
  if (handledSkip) tally.counts.skippedByPolicy += 1;
  const required = !occurrence.skippedByDst && scheduledAtMs + job.policies.toleranceMs <= options.expectUntilMs;
  if (required && firstSeenAtMs === null && !handledSkip) {
    const ledgerSays = ledger === undefined ? 'no run in the ledger' : `the ledger says ${ledger.status}`;
    tally.violate('lost', `${what} never dispatched; ${ledgerSays}`);
  }
  const candidates = [firstSeenAtMs, ledgerDispatchedAtMs].filter((time): time is number => time !== null);
  if (candidates.length === 0) return;
  const firstDispatchAtMs = Math.min(...candidates);
  if (firstDispatchAtMs + (options.clockSlackMs ?? 5) < fireAtMs) {
    tally.violate('early', `${what} dispatched at ${firstDispatchAtMs}, ${fireAtMs - firstDispatchAtMs} ms before its fire time`);
  } else if (firstStartAtMs !== null && firstStartAtMs + (options.clockSlackMs ?? 5) < fireAtMs) {
    tally.violate('early', `${what} started by its worker at ${firstStartAtMs}, ${fireAtMs - firstStartAtMs} ms before its fire time`);
  }
  // Lag is the platform's only when the create was acknowledged before the fire time.
  if (job.ackedAtMs === null || job.ackedAtMs > fireAtMs) return;
  const lagMs = Math.max(0, firstDispatchAtMs - fireAtMs);
  if (faultKinds.length === 0) {
    tally.lagOutsideMs.push(lagMs);
    if (lagMs > boundMs) tally.violate('late_outside_fault', `${what} fired ${lagMs} ms late (bound ${boundMs} ms)`);
    return;
  }
  tally.lagInsideMs.push(lagMs);
  for (const kind of faultKinds) push(tally.lagByKindMs, kind, lagMs);
  const outageEndMs = faults.outageEndMs(fireAtMs);
  const boundedLagMs = outageEndMs === null ? lagMs : firstDispatchAtMs - outageEndMs;
  if (boundedLagMs > boundMs) {
    const since = outageEndMs === null ? '' : `, ${boundedLagMs} ms after the database came back`;
    tally.violate('late_inside_fault',
      `${what} fired ${lagMs} ms late${since} during ${faultKinds.join('+')} (bound ${boundMs} ms)`);
  }
}

/**
 * When the ledger says the run was dispatched (made ready); null for a run that never was:
 * a skipped occurrence carries a `dispatched_at` too, the time it was decided. A run written
 * ahead of its fire time (its `dispatched` event says `ahead`) was made ready from its
 * `fire_at`, not when it was written: no lease could take it before. A lease seen earlier
 * than that is still early (it is a `dispatch` observation of its own).
 */
function ledgerDispatchedAt(ledger: LedgerRunRecord): number | null {
  if (ledger.status.startsWith('skipped_') || ledger.dispatchedAtMs === null) return null;
  const writtenAhead = ledger.events.some((event) => event.type === 'dispatched' && event.ahead === true);
  return writtenAhead ? Math.max(ledger.dispatchedAtMs, ledger.fireAtMs) : ledger.dispatchedAtMs;
}

/** Dispatches and ledger runs that match no occurrence of an acknowledged job. */
function checkStrays(occurrences: Map<string, Occurrence>, jobs: JobBook, observations: Observations,
  options: CheckOptions, tally: Tally): void {
  const strays = new Map<string, { jobId: string; createId?: string; scheduledAtMs: number; seen: boolean }>();
  for (const [runId, dispatches] of observations.dispatches) {
    const first = dispatches[0] as DispatchEvent;
    if (!occurrences.has(runId)) {
      strays.set(runId, { jobId: first.jobId, scheduledAtMs: first.scheduledAtMs, seen: true,
        ...(first.createId === undefined ? {} : { createId: first.createId }) });
    }
  }
  for (const [runId, ledger] of observations.ledgerRuns) {
    if (!occurrences.has(runId) && !strays.has(runId) && ledgerDispatchedAt(ledger) !== null
      && ledger.status !== 'cancelled') {
      strays.set(runId, { jobId: ledger.jobId, scheduledAtMs: ledger.scheduledAtMs, seen: false });
    }
  }
  for (const [runId, stray] of strays) {
    const job = jobs.byJobId.get(stray.jobId) ?? (stray.createId === undefined ? undefined : jobs.byCreateId.get(stray.createId));
    const where = stray.seen ? 'dispatched' : 'dispatched (per the ledger)';
    const what = `${runId} (job ${stray.jobId}, scheduled ${new Date(stray.scheduledAtMs).toISOString()})`;
    if (stray.seen) tally.counts.dispatched += 1;
    if (job === undefined || job.refused) {
      tally.violate('unexpected', `${what} ${where} for a job never created`);
    } else if (job.jobId === stray.jobId && runIdOf(stray.jobId, stray.scheduledAtMs) !== runId) {
      tally.violate('run_id_mismatch', `${what} ${where} under a run id that is not runIdOf(job, scheduled_at)`);
    } else if (job.createdAtMs === null && fitsSchedule(job, stray.scheduledAtMs, options)) {
      tally.counts.maybe += 1; // the create's answer was lost, but it was created
    } else {
      tally.violate('unexpected', `${what} ${where} at a time its schedule does not generate`);
    }
  }
}

function fitsSchedule(job: JobRecord, scheduledAtMs: number, options: CheckOptions): boolean {
  if (!isCron(job.schedule)) return job.schedule.atMs === scheduledAtMs;
  // The create was sent at createSentAtMs; its created_at is at or after that.
  return options.expandSchedule(job.schedule, job.policies.dstGap, job.createSentAtMs - 1, scheduledAtMs)
    .some((occurrence) => occurrence.scheduledAtMs === scheduledAtMs);
}

/**
 * Per shard, in the ledger's event sequence, the shard token of each accepted dispatch may
 * only grow (see LedgerDispatchEvent): a dispatch accepted with a token below one an earlier
 * dispatch of that shard already used was fenced by nothing.
 */
function checkShardTokenOrder(history: readonly HistoryEvent[], observations: Observations, tally: Tally): void {
  const highestByShard = new Map<number, { token: bigint; runId: string }>();
  const dispatches = history.filter((event): event is LedgerDispatchEvent => event.type === 'ledger_dispatch')
    .sort((left, right) => left.sequence - right.sequence);
  for (const dispatch of dispatches) {
    const jobId = observations.ledgerRuns.get(dispatch.runId)?.jobId;
    if (jobId === undefined) continue; // a run of another team: not ours to judge
    const shard = shardOf(jobId);
    const token = BigInt(dispatch.shardToken);
    const highest = highestByShard.get(shard);
    if (highest !== undefined && token < highest.token) {
      tally.violate('stale_accepted', `${dispatch.runId} dispatched on shard ${shard} with token ${token} after `
        + `${highest.runId} was dispatched there with token ${highest.token}`);
      continue;
    }
    highestByShard.set(shard, { token, runId: dispatch.runId });
  }
}

function checkAttempts(runId: string, dispatches: DispatchEvent[], observations: Observations, clockSlackMs: number,
  tally: Tally): void {
  const attempts = attemptsOf(dispatches, observations.completions.get(runId) ?? [],
    observations.heartbeats.get(runId) ?? []);
  const ledgerRun = observations.ledgerRuns.get(runId);
  const findings = analyseRun(runId, attempts, clockSlackMs, ledgerAttemptEnds(ledgerRun?.events ?? []));
  for (const detail of findings.concurrentLeases) tally.violate('duplicate_concurrent_leases', detail);
  for (const detail of findings.dispatchAfterCompletion) tally.violate('duplicate_after_completion', detail);
  for (const detail of findings.duplicateCompletions) tally.violate('duplicate_completions', detail);
  for (const detail of findings.staleAccepted) tally.violate('stale_accepted', detail);
  tally.counts.redeliveries += findings.redeliveries;
  tally.counts.staleRejectedWorkerTokens += findings.staleRejected;
  for (const reason of unobservableReasons(runId, attempts, findings.finalCompletion, observations.ledgerRuns.get(runId))) {
    tally.violate('unobservable', reason);
  }
}

/**
 * A recurring job still active at the end must have a pending next timer, and its latest
 * occurrence due a fault bound before the end must have been handled.
 */
function checkRecurrences(jobs: JobBook, occurrences: Map<string, Occurrence>, observations: Observations,
  options: CheckOptions, tally: Tally): void {
  const byJob = new Map<string, Occurrence[]>();
  for (const occurrence of occurrences.values()) push(byJob, occurrence.jobId, occurrence);
  for (const [jobId, job] of jobs.byJobId) {
    if (!isCron(job.schedule) || job.createdAtMs === null || cancelSent(job) || pausedAtEnd(job)) continue;
    const ledgerJob = observations.ledgerJobs.get(jobId);
    if (ledgerJob !== undefined && ledgerJob.state === 'active' && ledgerJob.nextScheduledAtMs === null) {
      tally.violate('recurrence_stopped', `job ${jobId} is active with no pending next timer`);
      continue;
    }
    const jobOccurrences = byJob.get(jobId) ?? [];
    const dueUntilMs = options.drainEndMs - options.faultLagBoundMs - job.policies.toleranceMs;
    const due = jobOccurrences.filter((occurrence) => occurrence.scheduledAtMs <= dueUntilMs && !occurrence.skippedByDst);
    if (due.length === 0) continue;
    const lastDueAtMs = Math.max(...due.map((occurrence) => occurrence.scheduledAtMs));
    const handled = jobOccurrences.filter((occurrence) => {
      const ledger = observations.ledgerRuns.get(occurrence.runId);
      return observations.dispatches.has(occurrence.runId)
        || (ledger !== undefined && (ledger.dispatchedAtMs !== null || ledger.status.startsWith('skipped_')));
    });
    const lastHandledAtMs = handled.length === 0 ? null : Math.max(...handled.map((occurrence) => occurrence.scheduledAtMs));
    if (lastHandledAtMs === null || lastHandledAtMs < lastDueAtMs) {
      const last = lastHandledAtMs === null ? 'never fired' : `last fired for ${new Date(lastHandledAtMs).toISOString()}`;
      tally.violate('recurrence_stopped', `job ${jobId} ${last}; ${new Date(lastDueAtMs).toISOString()} was due`);
    }
  }
}

/** Sums the last sample of the counter over every process incarnation (a restart starts it at zero). */
function staleShardRejections(history: readonly HistoryEvent[], counterName: string): number {
  const lastByIncarnation = new Map<string, number>();
  for (const event of history) {
    if (event.type !== 'counter_sample' || event.name !== counterName) continue;
    const key = `${event.process}#${event.incarnation}`;
    lastByIncarnation.set(key, Math.max(lastByIncarnation.get(key) ?? 0, event.value));
  }
  return [...lastByIncarnation.values()].reduce((sum, value) => sum + value, 0);
}
