/**
 * Issue 5's goals, checked against the results: for each tickler store, whether it matches
 * the best peer on W1 and W3, has a W2 and W4 lag p99 at most a fifth of the best peer's,
 * loses and duplicates nothing on W5, W6 and W8, and keeps W7's scheduler memory flat.
 * Computed, never typed in, so the verdicts cannot drift from the figures.
 */
import type { WorkloadId, WorkloadRun } from './results.js';
import { formatValue } from './svg-chart.js';
import type { SystemName } from './types.js';

const peers: readonly SystemName[] = ['bullmq', 'bullmq-aof', 'graphile-worker', 'pg-boss'];
/** "Does not grow with pending jobs": a fresh scheduler with a million pending may weigh this much more than an empty one. */
const memoryGrowthAllowedMb = 10;

interface Goal {
  workload: WorkloadId;
  what: string;
  check(tickler: WorkloadRun, peerRuns: WorkloadRun[]): { met: boolean; detail: string } | null;
}

function valueOf(run: WorkloadRun, key: string): number | null {
  return run.figures.find((item) => item.key === key)?.value ?? null;
}

function bestPeer(peerRuns: WorkloadRun[], key: string, better: 'higher' | 'lower'): { system: string; value: number } | null {
  let best: { system: string; value: number } | null = null;
  for (const run of peerRuns) {
    const value = valueOf(run, key);
    if (value === null) continue;
    if (best === null || (better === 'higher' ? value > best.value : value < best.value)) best = { system: run.system, value };
  }
  return best;
}

function atLeastBestPeer(key: string, label: string): Goal['check'] {
  return (tickler, peerRuns) => {
    const value = valueOf(tickler, key);
    const best = bestPeer(peerRuns, key, 'higher');
    if (value === null || best === null) return null;
    return { met: value >= best.value, detail: `${label} ${formatValue(value)} against ${best.system}'s ${formatValue(best.value)}` };
  };
}

/**
 * W1 one at a time: tickler's figure with the SDK coalescing creates (`coalesceCreates`, as
 * BullMQ's `queue.add` rides ioredis pipelining) against the peers' one-at-a-time figure; a
 * run from before that figure existed is judged on its plain one, and says so.
 */
function singleCreatesAtLeastBestPeer(): Goal['check'] {
  return (tickler, peerRuns) => {
    const coalesced = valueOf(tickler, 'single_coalesced_per_s');
    const plain = valueOf(tickler, 'single_per_s');
    const value = coalesced ?? plain;
    const best = bestPeer(peerRuns, 'single_per_s', 'higher');
    if (value === null || best === null) return null;
    const label = coalesced === null ? 'creates/s (plain; no coalesced figure measured)' : 'coalesced creates/s';
    const plainNote = coalesced === null || plain === null ? '' : ` (plain, a request each: ${formatValue(plain)})`;
    return { met: value >= best.value, detail: `${label} ${formatValue(value)} against ${best.system}'s ${formatValue(best.value)}${plainNote}` };
  };
}

function fifthOfBestPeer(key: string): Goal['check'] {
  return (tickler, peerRuns) => {
    const value = valueOf(tickler, key);
    const best = bestPeer(peerRuns, key, 'lower');
    if (value === null || best === null) return null;
    return { met: value <= best.value / 5, detail: `lag p99 ${formatValue(value)} ms against ${best.system}'s ${formatValue(best.value)} ms (goal ≤ ${formatValue(best.value / 5)})` };
  };
}

function allZero(keys: string[]): Goal['check'] {
  return (tickler) => {
    const values = keys.map((key) => [key, valueOf(tickler, key)] as const);
    if (values.some(([, value]) => value === null)) return null;
    return { met: values.every(([, value]) => value === 0), detail: values.map(([key, value]) => `${key} ${value}`).join(', ') };
  };
}

const goals: Goal[] = [
  { workload: 'W1', what: 'creates one at a time (tickler: SDK coalesceCreates) ≥ best peer', check: singleCreatesAtLeastBestPeer() },
  { workload: 'W1', what: 'creates in batches ≥ best peer', check: atLeastBestPeer('batch_per_s', 'creates/s') },
  { workload: 'W2', what: 'lag p99 ≤ best peer / 5', check: fifthOfBestPeer('lag_p99') },
  { workload: 'W3', what: 'throughput ≥ best peer', check: atLeastBestPeer('handled_per_s', 'handled/s') },
  { workload: 'W4', what: 'lag p99 ≤ best peer / 5', check: fifthOfBestPeer('lag_p99') },
  { workload: 'W5', what: 'nothing cancelled in time fires, nothing else lost or duplicated',
    check: allZero(['fired_after_cancel', 'survivors_not_fired', 'duplicates']) },
  { workload: 'W6', what: 'no missed or duplicate occurrence', check: allZero(['missed', 'duplicates']) },
  { workload: 'W7', what: 'scheduler memory flat with 1,000,000 pending', check: (tickler) => {
    const empty = valueOf(tickler, 'rss_empty_mb');
    const pending = valueOf(tickler, 'rss_pending_mb');
    if (empty === null || pending === null) return null;
    return { met: pending - empty <= memoryGrowthAllowedMb, detail: `${formatValue(empty)} MB empty, ${formatValue(pending)} MB with all pending` };
  } },
  { workload: 'W8', what: 'nothing lost or duplicated across kill -9', check: allZero(['not_fired', 'duplicates']) },
];

/** tickler's configurations judged; workers straight to PostgreSQL only where a run of them was measured. */
const ticklerSystems: readonly SystemName[] = ['tickler-sqlite', 'tickler-postgres', 'tickler-postgres-direct'];

export function goalsTable(runs: readonly WorkloadRun[]): string[] {
  const systems = ticklerSystems.filter((system) => system !== 'tickler-postgres-direct' || runs.some((run) => run.system === system));
  const lines = [`| goal | ${systems.join(' | ')} |`, `| --- | ${systems.map(() => '---').join(' | ')} |`];
  for (const goal of goals) {
    const peerRuns = runs.filter((run) => run.workload === goal.workload && peers.includes(run.system) && run.error === undefined);
    const cells = systems.map((system) => {
      // W1 only creates, and tickler-postgres-direct creates over HTTP as tickler-postgres does.
      if (system === 'tickler-postgres-direct' && goal.workload === 'W1') return 'as tickler-postgres (creates go over HTTP)';
      const tickler = runs.find((run) => run.workload === goal.workload && run.system === system && run.error === undefined);
      const verdict = tickler === undefined ? null : goal.check(tickler, peerRuns);
      if (verdict === null) return 'not measured';
      return `${verdict.met ? 'met' : '**not met**'}: ${verdict.detail}`;
    });
    lines.push(`| ${goal.workload} ${goal.what} | ${cells.join(' | ')} |`);
  }
  return lines;
}
