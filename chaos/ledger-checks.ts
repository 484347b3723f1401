/**
 * Checks of the system's own run ledger against the outside view: which ledger outcomes count
 * as an occurrence handled without a dispatch (a skip the job's declared policy allows), and
 * whether every attempt a worker saw is visible in run history (DESIGN.md invariant 6).
 */
import type { AttemptView } from './attempts.js';
import type { CompletionEvent, HistoryJobPolicies, LedgerRunRecord } from './history.js';

/**
 * Whether a ledger status accounts for an occurrence that no worker saw: `skipped_overlap`
 * under `forbid` (or `buffer_one`, which keeps one and skips the rest), `skipped_outage` under
 * a catch-up policy that skips (`latest`, `none`), `skipped_dst` under `gap: skip`, and
 * `cancelled` when the harness did cancel the job.
 */
export function isHandledSkip(status: string, policies: HistoryJobPolicies, jobCancelSent: boolean): boolean {
  switch (status) {
    case 'skipped_overlap':
      return policies.overlap === 'forbid' || policies.overlap === 'buffer_one';
    case 'skipped_outage':
      return policies.catchUp === 'latest' || policies.catchUp === 'none';
    case 'skipped_dst':
      return policies.dstGap === 'skip';
    case 'cancelled':
      return jobCancelSent;
    default:
      return false;
  }
}

const finalLedgerStatusOf: Record<string, string> = { succeeded: 'succeeded', failed_permanent: 'dead' };

/** Reasons the ledger fails to show what workers saw of one run; empty when it shows it all. */
export function unobservableReasons(
  runId: string,
  attempts: readonly AttemptView[],
  finalCompletion: CompletionEvent | undefined,
  ledger: LedgerRunRecord | undefined,
): string[] {
  if (attempts.length === 0) return [];
  if (ledger === undefined) return [`${runId}: a worker saw it, run history has no such run`];
  const reasons: string[] = [];
  const attemptMax = Math.max(...attempts.map((attempt) => attempt.attempt));
  if (ledger.attempt < attemptMax) {
    reasons.push(`${runId}: a worker saw attempt ${attemptMax}, the ledger says ${ledger.attempt}`);
  }
  // Every lease moves the run to running; each attempt seen must have left that event.
  if (ledger.events.length > 0) {
    const runningEntries = ledger.events.filter((event) => event.toStatus === 'running').length;
    if (runningEntries < attempts.length) {
      reasons.push(`${runId}: workers saw ${attempts.length} attempts, run history shows ${runningEntries} leases`);
    }
  } else {
    reasons.push(`${runId}: run history has no events for a run a worker saw`);
  }
  if (finalCompletion !== undefined) {
    const wanted = finalLedgerStatusOf[finalCompletion.status];
    if (wanted !== undefined && ledger.status !== wanted) {
      reasons.push(`${runId}: a ${finalCompletion.status} completion was accepted, the ledger says ${ledger.status}`);
    }
  }
  return reasons;
}
