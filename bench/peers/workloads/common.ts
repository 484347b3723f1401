/**
 * What every workload shares: its context (the system, quick or full counts, progress),
 * creating many jobs in batches with a few requests in flight, and the lag figures.
 */
import type { LatencySummary } from '../../latency.js';
import { machineCpuMs } from '../../proc-cpu.js';
import type { HandleLedger } from '../ledger.js';
import type { Progress } from '../progress.js';
import { figure, type PeerFigure, type WorkloadId } from '../results.js';
import type { BenchJob, SystemAdapter } from '../types.js';

export interface WorkloadContext {
  adapter: SystemAdapter;
  /** Tiny counts for the smoke test: same code path, seconds instead of minutes. */
  quick: boolean;
  /** Multiplies the full counts (1 = the counts); ignored with `quick`. */
  scale: number;
  progress: Progress;
}

/** A workload's job count: `quickCount` in quick mode, else the count times the scale. */
export function countOf(context: WorkloadContext, quickCount: number, fullCount: number): number {
  return context.quick ? quickCount : Math.max(1, Math.round(fullCount * context.scale));
}

export interface WorkloadOutcome {
  figures: PeerFigure[];
  notes: string[];
}

export interface Workload {
  id: WorkloadId;
  title: string;
  /** What the workload does, for the report. */
  description: string;
  /** The figure whose ratio against tickler the report shows. */
  headlineKey: string;
  run(context: WorkloadContext): Promise<WorkloadOutcome>;
}

export const createChunkSize = 1_000;
const createLanesDefault = 2;

/**
 * Creates `count` jobs built by `jobOf(i)` (called when its chunk is built, so a due time of
 * "now" means now) in chunks through `createMany`, `lanes` chunks in flight, in index order.
 * Answers the ids in index order and the elapsed time.
 */
export async function createInChunks(adapter: SystemAdapter, count: number, jobOf: (index: number) => BenchJob,
  options: { lanes?: number; onChunk?: (createdCount: number, firstIndex: number, chunkIds: readonly string[]) => void } = {}): Promise<{ ids: string[]; elapsedMs: number }> {
  const ids: string[] = new Array<string>(count);
  let nextIndex = 0;
  let createdCount = 0;
  const startedMs = performance.now();
  const lane = async (): Promise<void> => {
    while (nextIndex < count) {
      const first = nextIndex;
      const last = Math.min(count, first + createChunkSize);
      nextIndex = last;
      const jobs: BenchJob[] = [];
      for (let index = first; index < last; index += 1) jobs.push(jobOf(index));
      const created = await adapter.createMany(jobs);
      if (created.length !== jobs.length) throw new Error(`createMany answered ${created.length} ids for ${jobs.length} jobs`);
      created.forEach((id, offset) => {
        ids[first + offset] = id;
      });
      createdCount += created.length;
      options.onChunk?.(createdCount, first, created);
    }
  };
  await Promise.all(Array.from({ length: options.lanes ?? createLanesDefault }, lane));
  return { ids, elapsedMs: performance.now() - startedMs };
}

export function lagFigures(summary: LatencySummary): PeerFigure[] {
  return [
    figure('lag_p50', 'lag p50', summary.p50Ms, 'ms', 'lower', 'lag'),
    figure('lag_p99', 'lag p99', summary.p99Ms, 'ms', 'lower', 'lag'),
    figure('lag_max', 'lag max', summary.maxMs, 'ms', 'lower', 'lag'),
  ];
}

/** Lost, duplicate, early and stray handler starts: each must be 0. */
export function correctnessFigures(ledger: HandleLedger, expectedCount: number): PeerFigure[] {
  return [
    figure('not_fired', 'not fired', expectedCount - ledger.handledCount, 'count', 'zero'),
    figure('duplicates', 'duplicates', ledger.duplicateCount, 'count', 'zero'),
    figure('early', 'early', ledger.lagSummary().earlyCount, 'count', 'zero'),
  ];
}

export function progressOf(ledger: HandleLedger): () => string {
  return () => `handled ${ledger.handledCount}/${ledger.size}`;
}

/**
 * The machine's CPU across a phase, per 1,000 jobs: started now, read by the answer's `figure`
 * once the phase's `jobs` are done. Every process counts (the callers or workers in this
 * process, the system's server, Redis or PostgreSQL, the kernel), so systems compare by the
 * work a job costs them, which a chain of round trips that leaves cores idle does not show in
 * its rate. Work a database defers past the phase (autovacuum, checkpoints) is not in it.
 */
export function machineCpuMeter(): { figure(key: string, label: string, jobs: number): PeerFigure } {
  const startedMs = machineCpuMs();
  return {
    figure: (key, label, jobs) => {
      const spentMs = machineCpuMs() - startedMs;
      return figure(key, label, jobs <= 0 ? null : round((spentMs * 1_000) / jobs, 0), 'ms', 'lower');
    },
  };
}

export function round(value: number, digits = 1): number {
  const scale = 10 ** digits;
  return Math.round(value * scale) / scale;
}
