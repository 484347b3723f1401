/**
 * Prints a check report the way an operator reads it: the verdict and, when the run could not
 * judge tickler (a node not started, answers from outside the run), its cause; the counts TESTING.md asks for, the
 * fire-lag quantiles inside and outside fault windows and per fault kind, then the first
 * violations of each kind.
 */
import type { LagStats } from './fault-windows.js';
import type { CheckReport } from './history-checker.js';

const violationsShownPerKind = 10;

function lagLine(label: string, stats: LagStats): string {
  const ms = (value: number | null): string => (value === null ? '-' : `${value} ms`);
  return `  ${label.padEnd(22)} n=${String(stats.count).padEnd(6)} p50=${ms(stats.p50Ms).padEnd(9)} `
    + `p99=${ms(stats.p99Ms).padEnd(9)} max=${ms(stats.maxMs)}`;
}

export function formatReport(report: CheckReport): string {
  const { counts, violationCounts } = report;
  const lines = [
    `history check: ${report.valid ? 'VALID' : 'INVALID'}`,
    ...(report.cause === null ? [] : [`  cause: ${report.cause}`]),
    `  expected ${counts.expected}, maybe ${counts.maybe}, dispatched ${counts.dispatched}, `
      + `skipped by policy ${counts.skippedByPolicy}, redeliveries ${counts.redeliveries}`,
    `  lost ${violationCounts.lost}, unexpected ${violationCounts.unexpected}, early ${violationCounts.early}, `
      + `late ${violationCounts.late_outside_fault} outside / ${violationCounts.late_inside_fault} inside fault windows`,
    `  duplicates: concurrent leases ${violationCounts.duplicate_concurrent_leases}, after completion `
      + `${violationCounts.duplicate_after_completion}, two completions ${violationCounts.duplicate_completions}`,
    `  stale accepted ${violationCounts.stale_accepted}, stale rejected: shard tokens ${counts.staleRejectedShardTokens}, `
      + `worker tokens ${counts.staleRejectedWorkerTokens}`,
    `  recurrence stopped ${violationCounts.recurrence_stopped}, unobservable ${violationCounts.unobservable}, `
      + `run id mismatch ${violationCounts.run_id_mismatch}`,
    `  nodes not started ${violationCounts.node_start_failed}, answers from outside the run ${violationCounts.foreign_answer}`,
    `  faults: ${Object.entries(report.faults).map(([kind, count]) => `${kind} ${count}`).join(', ') || 'none'}`,
    'fire lag:',
    lagLine('outside fault windows', report.lag.outsideFault),
    lagLine('inside fault windows', report.lag.insideFault),
    ...Object.entries(report.lag.byFaultKind).map(([kind, stats]) => lagLine(`  ${kind}`, stats)),
  ];
  const byKind = new Map<string, string[]>();
  for (const violation of report.violations) {
    byKind.set(violation.kind, [...(byKind.get(violation.kind) ?? []), violation.detail]);
  }
  for (const [kind, details] of byKind) {
    lines.push(`${kind} (${details.length}):`);
    for (const detail of details.slice(0, violationsShownPerKind)) lines.push(`  ${detail}`);
    if (details.length > violationsShownPerKind) lines.push(`  ... and ${details.length - violationsShownPerKind} more`);
  }
  return lines.join('\n');
}
