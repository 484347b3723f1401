/**
 * Memory with many pending jobs (W7) and a kill -9 of the scheduling process (W8). tickler's
 * scheduler is its server process; a peer's scheduler is its worker (the worker promotes and
 * fetches due jobs), so for the peers those workers run in a child process of their own,
 * which is what gets weighed and killed.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { startChildWorkers, type ChildWorkers } from '../child-workers.js';
import { HandleLedger } from '../ledger.js';
import { figure } from '../results.js';
import { wallClock } from '../services.js';
import type { HandlerStart, SystemAdapter } from '../types.js';
import {
  correctnessFigures, countOf, createInChunks, lagFigures, progressOf, round,
  type Workload, type WorkloadContext, type WorkloadOutcome,
} from './common.js';

const weekMs = 7 * 86_400_000;
const megabyte = 1_048_576;

/** Where the peers' scheduling happens: a child worker process, measured and killed from outside. */
async function startScheduler(adapter: SystemAdapter, onStart: HandlerStart): Promise<ChildWorkers | undefined> {
  if (adapter.server !== undefined) return undefined;
  return startChildWorkers(adapter.name, adapter.attachInfo(), onStart);
}

export const memoryWorkload: Workload = {
  id: 'W7',
  title: 'memory',
  description: '1,000,000 pending jobs due next week (created in batches); scheduler RSS of a fresh process with none and with all of them pending, and the store\'s size',
  headlineKey: 'rss_pending_mb',
  run: async (context: WorkloadContext): Promise<WorkloadOutcome> => {
    const { adapter, quick, progress } = context;
    const count = countOf(context, 2_000, 1_000_000);
    const settleMs = quick ? 1_000 : 10_000;
    const ignore: HandlerStart = () => undefined;
    progress.phase('weighing the empty scheduler');
    let rssEmptyBytes: number;
    const storeEmptyBytes = await adapter.storeSizeBytes();
    const emptyChild = await startScheduler(adapter, ignore);
    await delay(settleMs);
    if (emptyChild === undefined) {
      rssEmptyBytes = adapter.server!.rssBytes();
    } else {
      rssEmptyBytes = emptyChild.rssBytes();
      await emptyChild.stop();
    }
    let createdCount = 0;
    progress.phase('creating', () => `created ${createdCount}/${count}`);
    const nowMs = wallClock.nowMs();
    const created = await createInChunks(adapter, count,
      (index) => ({ index, dueAtMs: nowMs + weekMs + Math.floor((index / count) * 86_400_000) }),
      { onChunk: (soFar) => {
        createdCount = soFar;
      } });
    const storeBytes = await adapter.storeSizeBytes();
    progress.phase('weighing a fresh scheduler with every job pending');
    const notes: string[] = [];
    let rssPendingBytes: number;
    if (adapter.server !== undefined) {
      notes.push(`the server that took the creates weighed ${round(adapter.server.rssBytes() / megabyte)} MB; then kill -9 and restart`);
      await adapter.server.kill();
      await adapter.server.restart();
      await delay(settleMs);
      rssPendingBytes = adapter.server.rssBytes();
    } else {
      const child = (await startScheduler(adapter, ignore))!;
      await delay(settleMs);
      rssPendingBytes = child.rssBytes();
      await child.stop();
    }
    progress.done();
    return {
      figures: [
        figure('rss_empty_mb', 'scheduler RSS, nothing pending', round(rssEmptyBytes / megabyte), 'MB', 'lower', 'memory'),
        figure('rss_pending_mb', 'scheduler RSS, all pending', round(rssPendingBytes / megabyte), 'MB', 'lower', 'memory'),
        figure('store_mb', 'store size growth', round((storeBytes - storeEmptyBytes) / megabyte), 'MB', 'lower', 'memory'),
        figure('create_per_s', 'batch creates/s', round((count * 1_000) / created.elapsedMs, 0), 'jobs/s', 'higher'),
      ],
      notes,
    };
  },
};

export const crashWorkload: Workload = {
  id: 'W8',
  title: 'crash',
  description: '10,000 jobs due evenly over the next 20 s; kill -9 of the scheduling process as the first is due, restart 5 s later',
  headlineKey: 'resume_ms',
  run: async (context: WorkloadContext): Promise<WorkloadOutcome> => {
    const { adapter, quick, progress } = context;
    const count = countOf(context, 300, 10_000);
    const windowMs = quick ? 3_000 : 20_000;
    const downMs = quick ? 1_500 : 5_000;
    const leadMs = quick ? 2_000 : 6_000;
    const ledger = new HandleLedger(count);
    let restartBeganMs = Number.POSITIVE_INFINITY;
    let firstStartAfterRestartMs = Number.POSITIVE_INFINITY;
    const onStart: HandlerStart = (start) => {
      if (start.handledAtMs >= restartBeganMs) firstStartAfterRestartMs = Math.min(firstStartAfterRestartMs, start.handledAtMs);
      ledger.onStart(start);
    };
    let child = await startScheduler(adapter, onStart);
    if (child === undefined) await adapter.startWorkers(onStart);
    const firstDueMs = wallClock.nowMs() + leadMs;
    progress.phase('creating', progressOf(ledger));
    await createInChunks(adapter, count, (index) => ({ index, dueAtMs: firstDueMs + Math.floor((index * windowMs) / count) }));
    const notes: string[] = [];
    const waitMs = firstDueMs - wallClock.nowMs();
    if (waitMs > 0) await delay(waitMs);
    else notes.push(`creating ran ${Math.round(-waitMs)} ms past the first due time`);
    progress.phase('killed', progressOf(ledger));
    const killedAtMs = wallClock.nowMs();
    if (child === undefined) await adapter.server!.kill();
    else await child.kill();
    const handledBeforeRestart = ledger.handledCount;
    await delay(downMs);
    progress.phase('restarting', progressOf(ledger));
    restartBeganMs = wallClock.nowMs();
    if (child === undefined) await adapter.server!.restart();
    else child = await startScheduler(adapter, onStart);
    const restartedMs = wallClock.nowMs();
    progress.phase('draining', progressOf(ledger));
    const drainTimeoutMs = quick ? 30_000 : 120_000;
    const complete = await ledger.waitForHandled(count, Math.max(0, firstDueMs + windowMs - wallClock.nowMs()) + drainTimeoutMs);
    progress.done();
    if (!complete) notes.push(`${count - ledger.handledCount} never fired within ${drainTimeoutMs / 1_000} s after the last was due`);
    notes.push(`${handledBeforeRestart} handled before the kill; restart took ${Math.round(restartedMs - restartBeganMs)} ms to be ready`);
    if (child === undefined) await adapter.stopWorkers();
    else await child.stop();
    const resumeMs = Number.isFinite(firstStartAfterRestartMs) ? firstStartAfterRestartMs - restartBeganMs : null;
    return {
      figures: [
        figure('resume_ms', 'restart → first handler start', resumeMs === null ? null : round(resumeMs, 0), 'ms', 'lower', 'time'),
        figure('kill_to_resume_ms', 'kill → first handler start after restart',
          resumeMs === null ? null : round(firstStartAfterRestartMs - killedAtMs, 0), 'ms', 'lower', 'time'),
        ...lagFigures(ledger.lagSummary()).filter((item) => item.key !== 'lag_p50'),
        ...correctnessFigures(ledger, count).map((item) => item.key === 'not_fired' ? { ...item, label: 'lost' } : item),
      ],
      notes,
    };
  },
};
