/**
 * The overlap policy (issue 3, API.md `overlap`): what to do with a new occurrence of a
 * recurring job while an earlier run is still `ready`, `running` or `retry_wait`.
 * The store applies the decision inside the dispatch transaction.
 */
import type { OverlapPolicy, RunStatus } from './types.js';

export interface ActiveRun {
  runId: string;
  status: RunStatus;
  /** A `buffer_one` occurrence held back until the earlier run ends. */
  held: boolean;
}

export type OverlapDecision =
  | { action: 'dispatch' }
  | { action: 'skip' }
  /** Cancel these runs (their tokens stop working) and dispatch. */
  | { action: 'replace'; cancelRunIds: string[] }
  /** Record the occurrence held; it becomes leasable when the earlier run ends. */
  | { action: 'hold' };

export function decideOverlap(policy: OverlapPolicy, activeRuns: readonly ActiveRun[]): OverlapDecision {
  if (activeRuns.length === 0 || policy === 'allow') return { action: 'dispatch' };
  switch (policy) {
    case 'forbid':
      return { action: 'skip' };
    case 'replace':
      return { action: 'replace', cancelRunIds: activeRuns.map((run) => run.runId) };
    case 'buffer_one':
      return activeRuns.some((run) => run.held) ? { action: 'skip' } : { action: 'hold' };
  }
}
