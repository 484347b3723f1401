// Helpers the worker SDK tests share: a logger that records and announces its lines,
// handlers the test finishes by hand, a clock that fires same-instant timers in one turn, and
// a fresh fake server, virtual clock and logger for each test of a suite.
import { EventEmitter, once } from 'node:events';
import { afterEach, beforeEach } from 'node:test';
import { VirtualClock, type Clock, type TimerCallback, type TimerHandle } from '../../src/clock.js';
import type { RunHandler, WorkerLogger, WorkerRun } from '../../src/worker/run-attempt.js';
import type { Worker } from '../../src/worker/worker.js';
import { FakeTicklerServer } from './fake-server.js';

/** Keeps log lines and announces each as a `line` event, so tests can wait for one. */
export class RecordingLogger extends EventEmitter implements WorkerLogger {
  readonly lines: { level: string; message: string; details: object }[] = [];
  debug(details: object, message: string): void { this.record('debug', details, message); }
  info(details: object, message: string): void { this.record('info', details, message); }
  warn(details: object, message: string): void { this.record('warn', details, message); }
  error(details: object, message: string): void { this.record('error', details, message); }

  async next(messagePrefix: string): Promise<void> {
    for (;;) {
      const [message] = (await once(this, 'line')) as [string];
      if (message.startsWith(messagePrefix)) return;
    }
  }

  /** Resolves once `count` lines starting with `messagePrefix` have been logged. */
  async count(messagePrefix: string, count: number): Promise<void> {
    while (this.lines.filter((line) => line.message.startsWith(messagePrefix)).length < count) await this.next(messagePrefix);
  }

  private record(level: string, details: object, message: string): void {
    this.lines.push({ level, message, details });
    this.emit('line', message);
  }
}

export function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void; reject: (error: unknown) => void } {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** One handler for the worker that hands its n-th call to the n-th of `handlers`. */
export function inTurn(handlers: readonly { handler: RunHandler }[]): RunHandler {
  let calls = 0;
  return (run, context) => handlers[calls++]!.handler(run, context);
}

/** A handler that reports each call and waits for the test to let it finish (or for its signal). */
export function controlledHandler(): {
  handler: RunHandler;
  started: Promise<{ run: WorkerRun; signal: AbortSignal }>;
  finish: (value: unknown) => void;
  fail: (error: unknown) => void;
} {
  const started = deferred<{ run: WorkerRun; signal: AbortSignal }>();
  const outcome = deferred<unknown>();
  const handler: RunHandler = (run, { signal }) => {
    started.resolve({ run, signal });
    signal.addEventListener('abort', () => outcome.reject(signal.reason));
    return outcome.promise;
  };
  return { handler, started: started.promise, finish: outcome.resolve, fail: outcome.reject };
}

/**
 * A clock for tests of same-instant behaviour: `fireDue` runs every timer due by then in one
 * synchronous pass, as Node's timers phase runs timers that expire together. (VirtualClock
 * settles the event loop after each timer, so work queued by one timer for "the next turn"
 * never meets work queued by the next one.)
 */
export class SameTurnClock implements Clock {
  readonly isVirtual = true;
  private currentMs: number;
  private timers: { atMs: number; callback: TimerCallback; cancelled: boolean }[] = [];

  constructor(startMs: number) {
    this.currentMs = startMs;
  }

  nowMs(): number {
    return this.currentMs;
  }

  monotonicMs(): number {
    return this.currentMs;
  }

  setTimer(atMs: number, callback: TimerCallback): TimerHandle {
    const timer = { atMs, callback, cancelled: false };
    this.timers.push(timer);
    return { cancel: () => { timer.cancelled = true; } };
  }

  /** Moves to `nowMs + durationMs` and runs every timer due, in one pass, without awaiting them. */
  fireDue(durationMs: number): number {
    this.currentMs += durationMs;
    const due = this.timers.filter((timer) => !timer.cancelled && timer.atMs <= this.currentMs)
      .sort((first, second) => first.atMs - second.atMs);
    this.timers = this.timers.filter((timer) => !due.includes(timer));
    for (const timer of due) void timer.callback();
    return due.length;
  }
}

/** What each test of a suite gets afresh from `workerTestBed`; a test sets `worker` to have it stopped after. */
export interface WorkerTestBed {
  server: FakeTicklerServer;
  clock: VirtualClock;
  logger: RecordingLogger;
  worker: Worker | undefined;
}

/**
 * Registers, in the calling suite, a fresh fake server (not listening yet: a test may want a
 * given port), a virtual clock at `startMs` that the server reads too, and a recording logger
 * before each test; after each, stops the test's worker and closes the server.
 */
export function workerTestBed(startMs: number): WorkerTestBed {
  const bed = { worker: undefined } as WorkerTestBed;
  beforeEach(() => {
    bed.server = new FakeTicklerServer();
    bed.clock = new VirtualClock(startMs);
    bed.logger = new RecordingLogger();
    bed.server.nowMs = () => bed.clock.nowMs();
  });
  afterEach(async () => {
    await bed.worker?.stop({ timeoutMs: 0 });
    bed.worker = undefined;
    await bed.server.close();
  });
  return bed;
}
