/**
 * What the handlers saw, per job index: when each job's handler first started, how often it
 * started (a second start is a duplicate), and the fire lag (handler start − due) of every
 * first start. Waiting for "n jobs handled" resolves from the handler itself, not a poll.
 */
import { LatencyRecorder, type LatencySummary } from '../latency.js';
import type { HandlerStart } from './types.js';

interface Waiter {
  reached: () => boolean;
  resolve: (reached: boolean) => void;
  timer?: NodeJS.Timeout;
}

export class HandleLedger {
  readonly size: number;
  private readonly firstStartMs: Float64Array;
  private readonly startCounts: Uint16Array;
  private readonly lag = new LatencyRecorder();
  private distinctCount = 0;
  private totalCount = 0;
  private unknownCount = 0;
  private firstAnyMs = Number.POSITIVE_INFINITY;
  private lastFirstStartMs = Number.NEGATIVE_INFINITY;
  private waiters: Waiter[] = [];

  constructor(size: number) {
    this.size = size;
    this.firstStartMs = new Float64Array(size).fill(Number.NaN);
    this.startCounts = new Uint16Array(size);
  }

  /** The handler hook: bind it once and hand it to `startWorkers`. */
  readonly onStart: HandlerStart = ({ index, dueAtMs, handledAtMs }) => {
    if (!(index >= 0 && index < this.size)) {
      this.unknownCount += 1;
      return;
    }
    this.totalCount += 1;
    this.startCounts[index] = Math.min(this.startCounts[index]! + 1, 65_535);
    if (this.startCounts[index] !== 1) return;
    this.firstStartMs[index] = handledAtMs;
    this.distinctCount += 1;
    this.firstAnyMs = Math.min(this.firstAnyMs, handledAtMs);
    this.lastFirstStartMs = Math.max(this.lastFirstStartMs, handledAtMs);
    this.lag.record(handledAtMs - dueAtMs);
    this.settleWaiters();
  };

  get handledCount(): number {
    return this.distinctCount;
  }

  /** Handler starts beyond the first per job. */
  get duplicateCount(): number {
    return this.totalCount - this.distinctCount;
  }

  /** Starts for an index this workload never created. */
  get unexpectedCount(): number {
    return this.unknownCount;
  }

  get firstStartAnyMs(): number | null {
    return Number.isFinite(this.firstAnyMs) ? this.firstAnyMs : null;
  }

  get lastFirstStartAnyMs(): number | null {
    return Number.isFinite(this.lastFirstStartMs) ? this.lastFirstStartMs : null;
  }

  startCountOf(index: number): number {
    return this.startCounts[index]!;
  }

  wasHandled(index: number): boolean {
    return this.startCounts[index]! > 0;
  }

  firstStartOf(index: number): number {
    return this.firstStartMs[index]!;
  }

  lagSummary(): LatencySummary {
    return this.lag.summary();
  }

  /** Resolves true once `count` distinct jobs were handled, false if `timeoutMs` passes first. */
  waitForHandled(count: number, timeoutMs: number): Promise<boolean> {
    return this.waitUntil(() => this.distinctCount >= count, timeoutMs);
  }

  /** Resolves true once `reached()` holds after some handler start (or already), false after `timeoutMs`. */
  waitUntil(reached: () => boolean, timeoutMs: number): Promise<boolean> {
    if (reached()) return Promise.resolve(true);
    return new Promise<boolean>((resolve) => {
      const waiter: Waiter = { reached, resolve };
      waiter.timer = setTimeout(() => {
        this.waiters = this.waiters.filter((other) => other !== waiter);
        resolve(false);
      }, timeoutMs);
      this.waiters.push(waiter);
    });
  }

  private settleWaiters(): void {
    if (this.waiters.length === 0) return;
    const reached = this.waiters.filter((waiter) => waiter.reached());
    if (reached.length === 0) return;
    this.waiters = this.waiters.filter((waiter) => !reached.includes(waiter));
    for (const waiter of reached) {
      clearTimeout(waiter.timer);
      waiter.resolve(true);
    }
  }
}
