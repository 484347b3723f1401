/**
 * An SDK worker (`createWorker`) that measures due → handler start: the handler's first act
 * is to read the wall clock and subtract the run's `fire_at`. The handler then returns at
 * once, so the worker completes the run as a real one would. Waiting for "n runs handled"
 * resolves on the handler itself, not on a polling loop.
 */
import { createWorker, type Worker } from '../src/worker/worker.js';
import type { WorkerLogger } from '../src/worker/run-attempt.js';
import { LatencyRecorder, type LatencySummary } from './latency.js';
import { benchPool, wallClock } from './load.js';

export interface WorkerProbe {
  readonly handledCount: number;
  /** Worker warnings and errors (lease errors, failed completions), counted and sampled. */
  readonly problems: { count: number; samples: string[] };
  lagSummary(): LatencySummary;
  /** Resolves true once `count` runs were handled, false if `timeoutMs` passed first. */
  waitForHandled(count: number, timeoutMs: number): Promise<boolean>;
  stop(): Promise<void>;
}

export function startWorkerProbe(options: {
  baseUrl: string; concurrency: number; pool?: string; waitS?: number;
  /** Shared by several probes (one per API node) whose lags are summarised together. */
  recorder?: LatencyRecorder;
}): WorkerProbe {
  const recorder = options.recorder ?? new LatencyRecorder();
  const problems = { count: 0, samples: [] as string[] };
  let handledCount = 0;
  const waiters: { count: number; resolve: (reached: boolean) => void }[] = [];
  const noteProblem = (level: string) => (details: object, message: string): void => {
    problems.count += 1;
    if (problems.samples.length < 3) problems.samples.push(`${level}: ${message} ${JSON.stringify(details).slice(0, 300)}`);
  };
  const logger: WorkerLogger = {
    debug: () => undefined,
    info: () => undefined,
    warn: noteProblem('warn'),
    error: noteProblem('error'),
  };
  const worker: Worker = createWorker({
    baseUrl: options.baseUrl,
    pool: options.pool ?? benchPool,
    concurrency: options.concurrency,
    waitS: options.waitS ?? 20,
    logger,
    handler: (run) => {
      recorder.record(wallClock.nowMs() - Date.parse(run.fire_at));
      handledCount += 1;
      for (let index = waiters.length - 1; index >= 0; index -= 1) {
        const waiter = waiters[index]!;
        if (handledCount >= waiter.count) {
          waiters.splice(index, 1);
          waiter.resolve(true);
        }
      }
    },
  });
  worker.start();
  return {
    get handledCount() {
      return handledCount;
    },
    problems,
    lagSummary: () => recorder.summary(),
    waitForHandled: (count, timeoutMs) => {
      if (handledCount >= count) return Promise.resolve(true);
      return new Promise<boolean>((resolve) => {
        const waiter = { count, resolve };
        waiters.push(waiter);
        setTimeout(() => {
          const index = waiters.indexOf(waiter);
          if (index >= 0) {
            waiters.splice(index, 1);
            resolve(false);
          }
        }, timeoutMs).unref();
      });
    },
    stop: () => worker.stop({ timeoutMs: 5_000 }),
  };
}
