/**
 * The timing workloads: precision (W2, jobs due evenly over a window), throughput (W3, a
 * backlog due now) and the herd (W4, everything due at one instant). Workers run in this
 * process for every system; lag is handler start − due on the one wall clock.
 */
import { HandleLedger } from '../ledger.js';
import { figure } from '../results.js';
import { wallClock } from '../services.js';
import {
  correctnessFigures, countOf, createInChunks, lagFigures, machineCpuMeter, progressOf, round,
  type Workload, type WorkloadContext, type WorkloadOutcome,
} from './common.js';

/** After the last job is due, how long a system may take to hand out the rest before the run gives up. */
const drainTimeoutMs = 1_200_000;

export const precisionWorkload: Workload = {
  id: 'W2',
  title: 'precision',
  description: '20,000 jobs due evenly over 10 s, the first 5 s after creation starts; no-op handler',
  headlineKey: 'lag_p99',
  run: async (context: WorkloadContext): Promise<WorkloadOutcome> => {
    const { adapter, quick, progress } = context;
    const count = countOf(context, 200, 20_000);
    const spreadMs = quick ? 1_000 : 10_000;
    const leadMs = quick ? 1_500 : 5_000;
    const ledger = new HandleLedger(count);
    await adapter.startWorkers(ledger.onStart);
    const firstDueMs = wallClock.nowMs() + leadMs;
    progress.phase('creating', progressOf(ledger));
    const created = await createInChunks(adapter, count, (index) => ({
      index, dueAtMs: firstDueMs + Math.floor((index * spreadMs) / count),
    }));
    const notes: string[] = [];
    const overrunMs = wallClock.nowMs() - firstDueMs;
    if (overrunMs > 0) notes.push(`creating took ${Math.round(created.elapsedMs)} ms, ${Math.round(overrunMs)} ms past the first due time`);
    progress.phase('firing', progressOf(ledger));
    const complete = await ledger.waitForHandled(count, leadMs + spreadMs + drainTimeoutMs);
    progress.done();
    if (!complete) notes.push(`gave up ${Math.round(drainTimeoutMs / 1_000)} s after the last due time`);
    await adapter.stopWorkers();
    return {
      figures: [...lagFigures(ledger.lagSummary()), ...correctnessFigures(ledger, count)],
      notes,
    };
  },
};

export const throughputWorkload: Workload = {
  id: 'W3',
  title: 'throughput',
  description: '100,000 jobs due now (created with workers stopped), then workers start; no-op handler',
  headlineKey: 'handled_per_s',
  run: async (context: WorkloadContext): Promise<WorkloadOutcome> => {
    const { adapter, progress } = context;
    const count = countOf(context, 300, 100_000);
    const ledger = new HandleLedger(count);
    let createdCount = 0;
    progress.phase('creating', () => `created ${createdCount}/${count}`);
    const created = await createInChunks(adapter, count, (index) => ({ index, dueAtMs: wallClock.nowMs() }), {
      onChunk: (soFar) => {
        createdCount = soFar;
      },
    });
    progress.phase('handling', progressOf(ledger));
    const workersStartedMs = wallClock.nowMs();
    const cpu = machineCpuMeter();
    await adapter.startWorkers(ledger.onStart);
    const complete = await ledger.waitForHandled(count, drainTimeoutMs);
    const cpuFigure = cpu.figure('handled_cpu', 'machine CPU per 1,000 handled', ledger.handledCount);
    progress.done();
    const lastMs = ledger.lastFirstStartAnyMs;
    const firstMs = ledger.firstStartAnyMs;
    await adapter.stopWorkers();
    const spanMs = firstMs === null || lastMs === null ? null : lastMs - firstMs;
    return {
      figures: [
        figure('handled_per_s', 'handled/s', spanMs === null || spanMs <= 0 ? null : round(((ledger.handledCount - 1) * 1_000) / spanMs, 0),
          'jobs/s', 'higher', 'rate'),
        figure('all_handled_s', 'workers start → last handler', lastMs === null ? null : round((lastMs - workersStartedMs) / 1_000, 2),
          's', 'lower', 'time'),
        figure('create_per_s', 'batch creates/s', round((count * 1_000) / created.elapsedMs, 0), 'jobs/s', 'higher'),
        cpuFigure,
        ...correctnessFigures(ledger, count).filter((item) => item.key !== 'early'),
      ],
      notes: complete ? [] : [`gave up after ${drainTimeoutMs / 1_000} s`],
    };
  },
};

export const herdWorkload: Workload = {
  id: 'W4',
  title: 'herd',
  description: '50,000 jobs due at the same instant (created beforehand, workers running); no-op handler',
  headlineKey: 'last_start_ms',
  run: async (context: WorkloadContext): Promise<WorkloadOutcome> => {
    const { adapter, quick, progress } = context;
    const count = countOf(context, 300, 50_000);
    // Enough lead for the slowest system to finish creating before the instant (measured: < 20 s for 50,000).
    const leadMs = quick ? 1_500 : 25_000;
    const ledger = new HandleLedger(count);
    await adapter.startWorkers(ledger.onStart);
    const dueAtMs = wallClock.nowMs() + leadMs;
    progress.phase('creating', progressOf(ledger));
    const created = await createInChunks(adapter, count, (index) => ({ index, dueAtMs }));
    const notes: string[] = [];
    const overrunMs = wallClock.nowMs() - dueAtMs;
    if (overrunMs > 0) notes.push(`creating took ${Math.round(created.elapsedMs)} ms, ${Math.round(overrunMs)} ms past the due instant`);
    progress.phase('waiting for the instant, then firing', progressOf(ledger));
    const complete = await ledger.waitForHandled(count, leadMs + drainTimeoutMs);
    progress.done();
    if (!complete) notes.push(`gave up ${drainTimeoutMs / 1_000} s after the due instant`);
    await adapter.stopWorkers();
    const lastMs = ledger.lastFirstStartAnyMs;
    const lastStartMs = lastMs === null ? null : lastMs - dueAtMs;
    return {
      figures: [
        figure('last_start_ms', 'due → last handler start', lastStartMs === null ? null : round(lastStartMs, 0), 'ms', 'lower', 'time'),
        ...lagFigures(ledger.lagSummary()),
        figure('herd_per_s', 'herd handled/s', lastStartMs === null || lastStartMs <= 0 ? null : round((count * 1_000) / lastStartMs, 0),
          'jobs/s', 'higher', 'rate'),
        ...correctnessFigures(ledger, count),
      ],
      notes,
    };
  },
};
