/**
 * Memory bounded by the load window: the server's RSS with 1,000 pending timers due
 * next week against the same data directory grown to 1,000,000. None of them is within the
 * 5-minute load horizon, so a scheduler that holds only its window needs no more memory.
 *
 * Each size is measured twice: "hot", in the process that just created the timers (its heap
 * still carries what serving the creates grew), and "fresh", after a SIGTERM and a restart on
 * the same data (the steady state of a server holding that many pending timers). RSS is read
 * from /proc; the figure is the largest sample over a few seconds after the load settles.
 *
 * The creating process is sampled once more after it has been idle for `idleMs`: V8 keeps
 * the heap it grew during the burst of creates for several seconds and gives most of it back
 * once its memory reducer sees the allocation rate drop (measured: heap total 98 MB right
 * after 200,000 creates, 67 MB and RSS back within 6 MB of its start 20 s later). The target
 * (RSS with 1,000,000 pending ≤ RSS with 1,000 + 50 MB) is about holding pending timers, so it
 * applies to the processes at rest: restarted, and the creating ones once idle. The sample
 * right after the creates is reported beside them: it measures the burst's garbage (the V8
 * heap-used figure, garbage included, grows by as much), not the timers.
 */
import { setTimeout as delay } from 'node:timers/promises';
import type { BenchContext, Benchmark } from './context.js';
import { createInBatches, megabytes, nextWeekFireAtMs, oneShotAt, wallClock } from './load.js';
import { startManagedServer, stopAndProfile } from './profile.js';
import type { BenchResult, Figure } from './report.js';
import { sumMetric, type BenchServer } from './server-process.js';

const fullSizes = { small: 1_000, large: 1_000_000 };
const quickSizes = { small: 10, large: 1_000 };
const settleMs = 2_000;
const sampleCount = 6;
const sampleIntervalMs = 500;
const deltaTargetMb = 50;
const idleMs = 30_000;
/** When the idle sample starts: one settled sample, the idle wait, and the next settle. */
const idleSampledAfterS = (settleMs * 2 + sampleCount * sampleIntervalMs + idleMs) / 1_000;

export const memoryBenchmark: Benchmark = {
  name: 'memory',
  title: 'server RSS with 1,000 vs 1,000,000 pending timers due next week',
  run: runMemory,
};

interface MemorySample {
  rssBytes: number;
  /** V8 heap in use, from the server's default metrics: tells retained objects from RSS not given back. */
  heapUsedBytes: number;
}

/** The largest RSS sample over the sampling window, after letting the process settle. */
async function settledMemory(server: BenchServer, quick: boolean): Promise<MemorySample> {
  await delay(quick ? 200 : settleMs);
  let rssBytes = 0;
  for (let sample = 0; sample < (quick ? 2 : sampleCount); sample += 1) {
    rssBytes = Math.max(rssBytes, server.rssBytes());
    await delay(quick ? 50 : sampleIntervalMs);
  }
  const heapUsedBytes = sumMetric(await server.client.metrics(), 'nodejs_heap_size_used_bytes');
  return { rssBytes, heapUsedBytes };
}

async function runMemory(context: BenchContext): Promise<BenchResult> {
  const sizes = context.quick ? quickSizes : fullSizes;
  const notes: string[] = [];
  const dataDir = context.tempDir('tickler-bench-memory-');
  const nowMs = wallClock.nowMs();
  const specOf = (index: number) => oneShotAt(nextWeekFireAtMs(nowMs, index, sizes.large), index);

  const measureAt = async (label: string, total: number, alreadyCreated: number):
    Promise<{ hot: MemorySample; idle: MemorySample; fresh: MemorySample }> => {
    const server = await startManagedServer(context, `memory-${label}`, { dataDir });
    context.log(`memory: creating ${total - alreadyCreated} timers (to ${total})`);
    const created = await createInBatches(server.client, total - alreadyCreated,
      (index) => specOf(alreadyCreated + index));
    if (created.failed > 0) notes.push(`${created.failed} creates failed, e.g. ${created.errorSamples[0]}`);
    const hot = await settledMemory(server, context.quick);
    await delay(context.quick ? 200 : idleMs);
    const idle = await settledMemory(server, context.quick);
    notes.push(...await stopAndProfile(context, `memory-${label}`, server));
    const restarted = await startManagedServer(context, `memory-${label}-restarted`, { dataDir });
    const fresh = await settledMemory(restarted, context.quick);
    notes.push(...await stopAndProfile(context, `memory-${label}-restarted`, restarted));
    return { hot, idle, fresh };
  };

  const small = await measureAt('small', sizes.small, 0);
  const large = await measureAt('large', sizes.large, sizes.small);
  const smallText = sizes.small.toLocaleString('en-US');
  const largeText = sizes.large.toLocaleString('en-US');
  const figures: Figure[] = [
    { label: `RSS, ${smallText} pending, fresh process`, value: megabytes(small.fresh.rssBytes), unit: 'MB' },
    { label: `RSS, ${largeText} pending, fresh process`, value: megabytes(large.fresh.rssBytes), unit: 'MB' },
    { label: 'RSS growth, fresh processes', value: megabytes(large.fresh.rssBytes - small.fresh.rssBytes), unit: 'MB',
      target: { comparison: '<=', value: deltaTargetMb } },
    { label: `RSS, ${smallText} pending, the process that created them`, value: megabytes(small.hot.rssBytes), unit: 'MB' },
    { label: `RSS, ${largeText} pending, the process that created them`, value: megabytes(large.hot.rssBytes), unit: 'MB' },
    { label: 'RSS growth, creating processes, right after the creates (their garbage not yet collected)',
      value: megabytes(large.hot.rssBytes - small.hot.rssBytes), unit: 'MB' },
    { label: `V8 heap used (garbage included) growth, ${smallText} → ${largeText}, creating processes`,
      value: megabytes(large.hot.heapUsedBytes - small.hot.heapUsedBytes), unit: 'MB' },
    { label: `RSS growth, creating processes, ${idleSampledAfterS} s or more after the creates`,
      value: megabytes(large.idle.rssBytes - small.idle.rssBytes), unit: 'MB', target: { comparison: '<=', value: deltaTargetMb } },
    { label: `V8 heap used (garbage included) growth, ${smallText} → ${largeText}, fresh processes`,
      value: megabytes(large.fresh.heapUsedBytes - small.fresh.heapUsedBytes), unit: 'MB' },
  ];
  notes.push('RSS is VmRSS from /proc, the largest of several samples taken after the load settled; it includes ' +
    'the tsx module loader the server runs under (the same at both sizes).');
  return {
    name: memoryBenchmark.name,
    title: memoryBenchmark.title,
    parameters: { small: sizes.small, large: sizes.large, dueIn: '7 to 8 days' },
    figures,
    notes,
  };
}
