/**
 * The create and cancel workloads: creating (W1, one at a time from 64 callers, then in
 * batches; for tickler the one-at-a-time phase runs twice, plain and with the SDK coalescing
 * concurrent creates into batch requests, and both figures are reported) and cancel-heavy (W5, 80 % of the jobs cancelled right after creation; no
 * cancelled job may fire once its cancel was acknowledged, and every other one must fire).
 */
import { HandleLedger } from '../ledger.js';
import { figure, type PeerFigure } from '../results.js';
import { wallClock } from '../services.js';
import type { BenchJob, SystemAdapter } from '../types.js';
import {
  countOf, createInChunks, lagFigures, machineCpuMeter, progressOf, round,
  type Workload, type WorkloadContext, type WorkloadOutcome,
} from './common.js';

const concurrentCallers = 64;
const hourMs = 3_600_000;

/**
 * A system whose client can coalesce concurrent one-at-a-time creates into batch requests
 * (tickler's `coalesceCreates`, the HTTP counterpart of the ioredis auto-pipelining under
 * BullMQ's `queue.add`). W1 measures it as a figure of its own beside the plain one.
 */
export interface CoalescedCreates {
  createOneCoalesced(job: BenchJob): Promise<string>;
  coalescedCreateStats(): { requests: number; items: number };
}

function hasCoalescedCreates(adapter: SystemAdapter): adapter is SystemAdapter & CoalescedCreates {
  return typeof (adapter as Partial<CoalescedCreates>).createOneCoalesced === 'function';
}

/** Runs `task(i)` for i in 0..count with `callers` in flight; answers the elapsed milliseconds. */
export async function runConcurrently(count: number, callers: number, task: (index: number) => Promise<void>,
  onDone?: (doneCount: number) => void): Promise<number> {
  let nextIndex = 0;
  let doneCount = 0;
  const startedMs = performance.now();
  const caller = async (): Promise<void> => {
    while (nextIndex < count) {
      const index = nextIndex;
      nextIndex += 1;
      await task(index);
      doneCount += 1;
      onDone?.(doneCount);
    }
  };
  await Promise.all(Array.from({ length: callers }, caller));
  return performance.now() - startedMs;
}

export const createWorkload: Workload = {
  id: 'W1',
  title: 'create',
  description: '100,000 jobs due in an hour created one at a time by 64 concurrent callers, then 100,000 more in batches of 1,000 ' +
    '(2 in flight); tickler then runs the one-at-a-time phase again through the SDK\'s coalesceCreates (100,000 more ' +
    'jobs), and its W1 goal takes the coalesced figure',
  headlineKey: 'single_per_s',
  run: async (context: WorkloadContext): Promise<WorkloadOutcome> => {
    const { adapter, progress } = context;
    const count = countOf(context, 300, 100_000);
    const dueAtMs = wallClock.nowMs() + hourMs;
    let singleDone = 0;
    progress.phase('one at a time', () => `created ${singleDone}/${count}`);
    const singleCpu = machineCpuMeter();
    const singleMs = await runConcurrently(count, concurrentCallers, async (index) => {
      await adapter.createOne({ index, dueAtMs });
    }, (doneCount) => {
      singleDone = doneCount;
    });
    const singleCpuFigure = singleCpu.figure('single_cpu', 'machine CPU per 1,000, one at a time', count);
    let batchDone = 0;
    progress.phase('batches', () => `created ${batchDone}/${count}`);
    const batchCpu = machineCpuMeter();
    const batched = await createInChunks(adapter, count, (index) => ({ index: count + index, dueAtMs }), {
      onChunk: (createdCount) => {
        batchDone = createdCount;
      },
    });
    const batchCpuFigure = batchCpu.figure('batch_cpu', 'machine CPU per 1,000, batches', count);
    // Last, so the batch phase meets a store of the same size as the peers' do.
    const coalesced = hasCoalescedCreates(adapter) ? await createCoalesced(context, adapter, count, dueAtMs) : undefined;
    progress.done();
    return {
      figures: [
        figure('single_per_s', 'one at a time (64 callers)', round((count * 1_000) / singleMs, 0), 'jobs/s', 'higher', 'rate'),
        ...(coalesced === undefined ? [] : [coalesced.figure]),
        figure('batch_per_s', 'batches of 1,000', round((count * 1_000) / batched.elapsedMs, 0), 'jobs/s', 'higher', 'rate'),
        singleCpuFigure,
        ...(coalesced === undefined ? [] : [coalesced.cpuFigure]),
        batchCpuFigure,
      ],
      notes: coalesced === undefined ? [] : [coalesced.note],
    };
  },
};

/** The one-at-a-time phase again, through the coalescing client, on jobs of their own. */
async function createCoalesced(context: WorkloadContext, adapter: SystemAdapter & CoalescedCreates, count: number,
  dueAtMs: number): Promise<{ figure: PeerFigure; cpuFigure: PeerFigure; note: string }> {
  let done = 0;
  context.progress.phase('one at a time, coalesced', () => `created ${done}/${count}`);
  const before = adapter.coalescedCreateStats();
  const cpu = machineCpuMeter();
  // Indexes past both other phases' (0..count and count..2 count).
  const elapsedMs = await runConcurrently(count, concurrentCallers, async (index) => {
    await adapter.createOneCoalesced({ index: 2 * count + index, dueAtMs });
  }, (doneCount) => {
    done = doneCount;
  });
  const cpuFigure = cpu.figure('single_coalesced_cpu', 'machine CPU per 1,000, one at a time, coalesced', count);
  const after = adapter.coalescedCreateStats();
  const requests = after.requests - before.requests;
  const itemsPerRequest = requests === 0 ? 0 : (after.items - before.items) / requests;
  return {
    figure: figure('single_coalesced_per_s', 'one at a time (64 callers), coalesced by the SDK', round((count * 1_000) / elapsedMs, 0),
      'jobs/s', 'higher', 'rate'),
    cpuFigure,
    note: `"one at a time" is the plain SDK createJob, one POST /v1/jobs per call; "one at a time, coalesced by the SDK" is the ` +
      `same 64 callers calling createJobId through a TicklerClient with coalesceCreates: true (${requests} requests, ${round(itemsPerRequest, 1)} ` +
      'creates per request); the W1 goal uses the coalesced figure',
  };
}

export const cancelWorkload: Workload = {
  id: 'W5',
  title: 'cancel-heavy',
  description: '100,000 jobs due 30 s after the run starts, created in batches; 80 % cancelled one by one (64 callers) right after their batch is created; workers running',
  headlineKey: 'cancel_per_s',
  run: async (context: WorkloadContext): Promise<WorkloadOutcome> => {
    const { adapter, quick, progress } = context;
    const count = countOf(context, 500, 100_000);
    const leadMs = quick ? 3_000 : 30_000;
    const isCancelled = (index: number): boolean => index % 5 !== 0;
    const survivorCount = Math.ceil(count / 5);
    const cancelAckMs = new Float64Array(count).fill(Number.NaN);
    const ledger = new HandleLedger(count);
    let survivorsHandled = 0;
    await adapter.startWorkers((start) => {
      // Counted before the ledger sees the start, because the ledger's waiters check the count then.
      if (start.index >= 0 && start.index < count && !isCancelled(start.index) && !ledger.wasHandled(start.index)) survivorsHandled += 1;
      ledger.onStart(start);
    }, { cancelsUntilDue: true });
    const dueAtMs = wallClock.nowMs() + leadMs;
    const cancels = new CancelQueue();
    let cancelledCount = 0;
    let cancelFailures = 0;
    const failureSamples: string[] = [];
    progress.phase('creating and cancelling', () => `cancelled ${cancelledCount}/${count - survivorCount}, ${progressOf(ledger)()}`);
    let firstCancelMs: number | undefined;
    const canceller = async (): Promise<void> => {
      for (let item = await cancels.take(); item !== undefined; item = await cancels.take()) {
        firstCancelMs ??= performance.now();
        try {
          await adapter.cancel(item.id);
          cancelAckMs[item.index] = wallClock.nowMs();
          cancelledCount += 1;
        } catch (error) {
          cancelFailures += 1;
          if (failureSamples.length < 3) failureSamples.push((error as Error).message);
        }
      }
    };
    const cancellers = Array.from({ length: concurrentCallers }, canceller);
    // Each chunk's cancels are queued the moment its create answers: "right after creation".
    const created = await createInChunks(adapter, count, (index) => ({ index, dueAtMs }), {
      onChunk: (_createdCount, firstIndex, chunkIds) => {
        chunkIds.forEach((id, offset) => {
          if (isCancelled(firstIndex + offset)) cancels.put({ id, index: firstIndex + offset });
        });
      },
    });
    cancels.close();
    await Promise.all(cancellers);
    const cancelMs = performance.now() - (firstCancelMs ?? performance.now());
    const cancelsDoneAtMs = wallClock.nowMs();
    progress.phase('firing', () => `survivors handled ${survivorsHandled}/${survivorCount}`);
    const complete = await ledger.waitUntil(() => survivorsHandled >= survivorCount, Math.max(0, dueAtMs - wallClock.nowMs()) + 600_000);
    // Give a cancelled job that would wrongly fire the same chance to show up as the last survivor had.
    await new Promise((resolve) => setTimeout(resolve, quick ? 500 : 5_000));
    progress.done();
    await adapter.stopWorkers();
    // A cancel acknowledged before the due time must win (TESTING.md: "expected"); one acknowledged
    // after it raced the fire, and either outcome is allowed ("maybe").
    let firedAfterCancel = 0;
    let raced = 0;
    let cancelledInTime = 0;
    for (let index = 0; index < count; index += 1) {
      if (!isCancelled(index)) continue;
      const ackMs = cancelAckMs[index]!;
      const inTime = !Number.isNaN(ackMs) && ackMs < dueAtMs;
      if (inTime) cancelledInTime += 1;
      if (!ledger.wasHandled(index)) continue;
      if (inTime) firedAfterCancel += 1;
      else raced += 1;
    }
    const notes: string[] = [];
    if (cancelsDoneAtMs > dueAtMs) notes.push(`the last cancel was acknowledged ${Math.round(cancelsDoneAtMs - dueAtMs)} ms after the jobs were due`);
    if (!complete) notes.push('gave up waiting for the survivors 600 s after they were due');
    if (cancelFailures > 0) notes.push(`${cancelFailures} cancels failed, e.g. ${failureSamples.join('; ')}`);
    return {
      figures: [
        figure('cancel_per_s', 'cancels/s (64 callers)', cancelMs <= 0 ? null : round((cancelledCount * 1_000) / cancelMs, 0), 'jobs/s', 'higher', 'rate'),
        figure('create_per_s', 'batch creates/s', round((count * 1_000) / created.elapsedMs, 0), 'jobs/s', 'higher'),
        figure('cancelled_in_time', 'cancels acknowledged before the due time', cancelledInTime, 'count', 'higher'),
        figure('fired_after_cancel', 'cancelled in time, fired anyway', firedAfterCancel, 'count', 'zero'),
        figure('survivors_not_fired', 'not cancelled, never fired', survivorCount - survivorsHandled, 'count', 'zero'),
        figure('raced', 'cancel acknowledged after the due time, fired (allowed)', raced, 'count', 'lower'),
        figure('duplicates', 'duplicates', ledger.duplicateCount, 'count', 'zero'),
        ...lagFigures(ledger.lagSummary()).filter((item) => item.key === 'lag_p99'),
      ],
      notes,
    };
  },
};

/** Cancels waiting for a caller: callers take one at a time and wait while it is empty and open. */
class CancelQueue {
  private readonly items: { id: string; index: number }[] = [];
  /** Index of the next item to take: shift() on tens of thousands of items is quadratic. */
  private head = 0;
  private readonly takers: ((item: { id: string; index: number } | undefined) => void)[] = [];
  private closed = false;

  put(item: { id: string; index: number }): void {
    const taker = this.takers.shift();
    if (taker === undefined) this.items.push(item);
    else taker(item);
  }

  take(): Promise<{ id: string; index: number } | undefined> {
    if (this.head < this.items.length) {
      const item = this.items[this.head]!;
      this.head += 1;
      return Promise.resolve(item);
    }
    if (this.closed) return Promise.resolve(undefined);
    return new Promise((resolve) => this.takers.push(resolve));
  }

  /** No more items: waiting callers get undefined once the queue is empty. */
  close(): void {
    this.closed = true;
    if (this.head >= this.items.length) for (const taker of this.takers.splice(0)) taker(undefined);
  }
}
