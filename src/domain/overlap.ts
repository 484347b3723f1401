/**
 * The overlap policy (API.md `overlap`): what to do with a new occurrence of a recurring job
 * while an earlier run is still `ready`, `running` or `retry_wait`. The store applies the
 * decision inside the dispatch transaction.
 *
 * `forbid` skips an occurrence whose time found the job busy. An earlier run written only
 * after the occurrence's time did not find it busy: it is itself late (an outage's backlog
 * under `catch_up: "all"`, or occurrences the scheduler fired together after falling behind),
 * and a timely scheduler would have given it the interval to finish. Such an occurrence is
 * queued behind it instead (held, released in scheduled order as each run before it ends),
 * so a backlog drains in order, one at a time, and nothing is skipped for lateness.
 */
import type { OverlapPolicy, RunStatus } from './types.js';

export interface ActiveRun {
  runId: string;
  status: RunStatus;
  /** Held back until the earlier run ends (`buffer_one`, or queued under `forbid`). */
  held: boolean;
  /** When the run was written (dispatched), ms. */
  dispatchedAtMs: number;
}

export type OverlapDecision =
  | { action: 'dispatch' }
  | { action: 'skip'; reason: string }
  /** Cancel these runs (their tokens stop working) and dispatch. */
  | { action: 'replace'; cancelRunIds: string[] }
  /** Record the occurrence held; it becomes leasable when the earlier runs end. */
  | { action: 'hold'; reason: string };

export const queuedBehindLateReason = 'overlap forbid: queued behind an earlier run written after this occurrence\'s time';
const bufferedReason = 'overlap buffer_one: held until the earlier run ends';

export function decideOverlap(policy: OverlapPolicy, activeRuns: readonly ActiveRun[], scheduledAtMs: number): OverlapDecision {
  if (activeRuns.length === 0 || policy === 'allow') return { action: 'dispatch' };
  switch (policy) {
    case 'forbid':
      return activeRuns.every((run) => run.dispatchedAtMs > scheduledAtMs)
        ? { action: 'hold', reason: queuedBehindLateReason }
        : { action: 'skip', reason: 'overlap forbid: an earlier run was still active at this occurrence\'s time' };
    case 'replace':
      return { action: 'replace', cancelRunIds: activeRuns.map((run) => run.runId) };
    case 'buffer_one':
      return activeRuns.some((run) => run.held)
        ? { action: 'skip', reason: 'overlap buffer_one: an earlier run is active and another already held' }
        : { action: 'hold', reason: bufferedReason };
  }
}
