/**
 * What `createWorker` takes (`WorkerOptions`, part of the SDK's API) and the settings the
 * worker runs on, checked and with their defaults filled in (`workerSettingsOf`). A bad option
 * throws here, before anything starts.
 */
import type { Clock } from '../clock.js';
import {
  leaseAheadMsMax, leaseBatchMax, leaseWaitSecondsMax, workerCompletionLingerMsDefault, workerHoldAheadCountMax,
  workerHoldLingerMsMax, workerLeaseLingerMsDefault, workerLeaseWaitSDefault, workerLingerMsMax, workerLongPollsCountDefault,
  workerLongPollsCountMax,
} from '../limits.js';
import type { RunHandler, WorkerLogger } from './run-attempt.js';
import type { WorkerApi } from './worker-api.js';

export interface WorkerOptions {
  /**
   * What the worker calls: a `TicklerClient` (HTTP), a `PostgresWorkerApi` (straight to the
   * PostgreSQL store, src/direct-worker/postgres-direct.ts), or `baseUrl` (and `apiKey`) to build a client.
   */
  client?: WorkerApi;
  baseUrl?: string;
  apiKey?: string;
  pool: string;
  /** Handlers running at once. */
  concurrency: number;
  /**
   * Runs leased ahead of free slots and held locally until one frees, so a busy worker's
   * next handler starts without a lease round trip (graphile-worker's local queue). They
   * heartbeat while they wait. Default 0: the worker leases only as many runs as it has
   * free slots, which spreads runs evenly over the workers of a pool; raise it for short
   * handlers and high throughput. At most `leaseBatchMax`.
   */
  prefetch?: number;
  handler: RunHandler;
  /** Overrides the job's `lease_s` for runs this worker leases. */
  leaseS?: number;
  /** Long-poll wait per lease request; default 20. */
  waitS?: number;
  /**
   * Lease requests kept parked at the server at once while the pool is drained (the last
   * lease answered short), splitting the free slots between them: a run that becomes ready
   * while one request's answer is on its way back finds the other still parked, instead of
   * waiting for the next request to arrive. Once leases come back full, one request at a
   * time asks for every free slot. Default 2; 1 keeps one long-poll.
   */
  longPolls?: number;
  workerId?: string;
  logger?: WorkerLogger;
  /** After `stop()` waited this long for in-flight handlers, their signals abort. Default: wait. */
  stopTimeoutMs?: number;
  /**
   * With fewer than a quarter of the slots free (and a handler running or a run held), how
   * long to wait for more before leasing (real time, like `waitS`). Default 5. Leasing ahead
   * without it asked for one or two runs per request (bench/probes/lag-stages.ts at 2,000 runs/s:
   * 9,100 lease requests for 20,000 runs; lingering, 1,370 and ~35 % less server CPU per run).
   */
  leaseLingerMs?: number;
  /**
   * With fewer completions waiting than a quarter of the slots and prefetch places, how long
   * after the previous completion request the next waits for more (real time). Default 10;
   * 0 sends each batch the moment the previous one is answered. A worker whose runs end
   * further apart than this sends each completion at once. Without it a stream of runs (bench/probes/
   * lag-stages.ts, 2,000 a second on PostgreSQL) was completed 5.6 runs a request, and the
   * requests were half the server's CPU per run.
   */
  completionLingerMs?: number;
  /**
   * Lease runs this many ms before they become ready and start each at its ready time from a
   * local timer, so the lease's round trip is off the fire's path (Quartz's
   * `batchTriggerAcquisitionFireAheadTimeWindow`). Only runs already in the ledger can be
   * leased so: a one-shot herd or a dense stream the scheduler writes ahead, a retry waiting
   * out its delay. A run leased ahead is this worker's: a cancel or change that lands after
   * the lease does not take it back (API.md, "Leasing ahead"). Held runs count against the
   * free slots and prefetch places, unless `holdAheadMax` gives them places of their own.
   * Default 0 (lease only what is ready); at most 10,000.
   */
  leaseAheadMs?: number;
  /**
   * Runs leased ahead (`leaseAheadMs`) that the worker may hold for their ready time beyond its
   * slots and prefetch places. Leases for slots then ask only for runs ready now, and leases
   * of their own ask for the free hold places as runs ready within `leaseAheadMs` (`max_ready`
   * 1: one ready run at most, so holding never takes a backlog of ready runs from other
   * workers). After a hold lease that found fewer runs than it had places for, the next waits
   * `holdLingerMs` (100 ms), so a stream entering the window is leased a tenth of a second at
   * a time, not a run or two per round trip. Default 0: held runs take slot and prefetch
   * places. At most 100,000.
   */
  holdAheadMax?: number;
  /** Drives heartbeats and backoff; tests pass a VirtualClock. */
  clock?: Clock;
  random?: () => number;
}

/** The numbers the worker runs on: every option checked, every default filled in. */
export interface WorkerSettings {
  concurrency: number;
  prefetch: number;
  waitS: number;
  longPolls: number;
  leaseLingerMs: number;
  completionLingerMs: number;
  leaseAheadMs: number;
  holdAheadMax: number;
  /** After a hold lease that came back short, the next waits this long (on the clock). */
  holdLingerMs: number;
}

function integerWithin(name: string, value: number, min: number, max: number, given: unknown): number {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new RangeError(`${name} must be an integer within ${min}..${max}, got ${String(given)}`);
  }
  return value;
}

/** Checks the options (RangeError or TypeError naming the option) and fills in the defaults. */
export function workerSettingsOf(options: WorkerOptions): WorkerSettings {
  if (!Number.isInteger(options.concurrency) || options.concurrency < 1) {
    throw new RangeError(`concurrency must be a positive integer, got ${options.concurrency}`);
  }
  const waitS = options.waitS ?? workerLeaseWaitSDefault;
  if (!(waitS >= 0 && waitS <= leaseWaitSecondsMax)) {
    throw new RangeError(`waitS must be within 0..${leaseWaitSecondsMax}, got ${waitS}`);
  }
  for (const name of ['leaseLingerMs', 'completionLingerMs'] as const) {
    const value = options[name];
    if (value !== undefined && !(value >= 0 && value <= workerLingerMsMax)) {
      throw new RangeError(`${name} must be within 0..${workerLingerMsMax}, got ${value}`);
    }
  }
  const prefetch = integerWithin('prefetch', options.prefetch ?? 0, 0, leaseBatchMax, options.prefetch);
  const leaseAheadMs = integerWithin('leaseAheadMs', options.leaseAheadMs ?? 0, 0, leaseAheadMsMax, options.leaseAheadMs);
  const holdAheadMax = integerWithin('holdAheadMax', options.holdAheadMax ?? 0, 0, workerHoldAheadCountMax, options.holdAheadMax);
  if (holdAheadMax > 0 && leaseAheadMs === 0) throw new RangeError('holdAheadMax needs leaseAheadMs');
  const longPolls = integerWithin('longPolls', options.longPolls ?? workerLongPollsCountDefault, 1, workerLongPollsCountMax,
    options.longPolls);
  if (options.client === undefined && options.baseUrl === undefined) {
    throw new TypeError('createWorker needs a client or a baseUrl');
  }
  return {
    concurrency: options.concurrency,
    prefetch,
    waitS,
    longPolls,
    leaseLingerMs: options.leaseLingerMs ?? workerLeaseLingerMsDefault,
    completionLingerMs: options.completionLingerMs ?? workerCompletionLingerMsDefault,
    leaseAheadMs,
    holdAheadMax,
    holdLingerMs: Math.min(workerHoldLingerMsMax, leaseAheadMs / 4),
  };
}
