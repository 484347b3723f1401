/**
 * Every limit and default in one place (STYLE.md §8), with the relations between them
 * asserted at load time. Defaults come from DESIGN.md "Defaults"; tests shorten the timing
 * ones through `TimingConfig`, never by editing this file.
 */
import assert from 'node:assert/strict';

export const shardCount = 1024;
export const bucketDurationMs = 60_000;

export const payloadBytesMax = 65_536;
export const requestBodyBytesMax = 1_048_576;
export const batchRequestBodyBytesMax = 16 * 1_048_576;
export const batchJobsMax = 1_000;
export const listLimitDefault = 50;
export const listLimitMax = 1_000;
export const previewCountMax = 1_000;
export const keyLengthMax = 256;
export const poolLengthMax = 128;
export const labelsCountMax = 64;
export const labelLengthMax = 256;
/** Length of a job's `owner` and `pager` texts. */
export const ownerLengthMax = 256;
export const resourcesCountMax = 32;
/** A resource cap's `max_concurrency` and a lane's `dispatch_per_s`, at most (routes-capacity.ts). */
export const resourceConcurrencyMax = 1_000_000;
export const laneDispatchPerSecondMax = 1_000_000;
export const cronLengthMax = 1_024;
export const errorTextLengthMax = 8_192;
export const resultBytesMax = 65_536;
export const jsonDepthMax = 64;

/**
 * The HTTP server's own limits (src/api/http-limits.ts; `tickler serve --headers-timeout-s`,
 * `--request-timeout-s`, `--idle-timeout-s`, `--connections-max`). A client has this long to
 * send a request's line and headers (a connection opened and left silent is closed after it
 * too), and this long for the whole request, body included; a long-poll's wait comes after
 * its request is read and is not counted. A kept-alive connection may sit idle this long
 * between requests (72 s: longer than the 60 s idle timeout of common load balancers, so they
 * close first). Connections beyond the cap are answered 503 and closed.
 */
export interface HttpLimits {
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  idleTimeoutMs: number;
  connectionsMax: number;
}

export const httpLimitsDefaults: HttpLimits = {
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  idleTimeoutMs: 72_000,
  connectionsMax: 1_024,
};
/** The request line and headers together (Node's default): more answers 431. */
export const httpHeadersBytesMax = 16_384;

export function assertHttpLimits(http: HttpLimits): void {
  assert.ok(http.headersTimeoutMs > 0 && http.headersTimeoutMs <= http.requestTimeoutMs,
    'the headers must be given no longer than the whole request');
  assert.ok(http.idleTimeoutMs > 0 && http.connectionsMax >= 1);
}

/** A cron expression with no occurrence within this horizon is rejected (`0 0 30 2 *`). */
export const scheduleLookaheadYears = 5;
export const toleranceSecondsMax = 86_400;

export const leaseSecondsMin = 5;
export const leaseSecondsMax = 900;
export const leaseSecondsDefault = 60;
export const leaseBatchMax = 1_000;
export const leaseWaitSecondsMax = 60;
/**
 * How far ahead of a run's ready time a worker may lease it (`ahead_ms`). Keep it short: a
 * run leased ahead is the worker's, so a cancel or change that lands later does not take it
 * back (API.md, "Leasing ahead"). The scheduler's default `dispatchAheadMs` (10 s): runs are
 * leasable ahead only once written, so a longer window would find nothing more.
 */
export const leaseAheadMsMax = 10_000;

export const retryDefault = { max_attempts: 5, base_s: 30, max_s: 3_600 } as const;
export const retryAttemptsMax = 100;
export const retryBaseSecondsMax = 86_400;
export const retryMaxSecondsMax = 7 * 86_400;
export const retryJitterFraction = 0.2;

export const cronToleranceSecondsDefault = 300;
export const oneShotToleranceSecondsDefault = 0;
export const catchUpWindowSecondsDefault = 86_400;
/** A catch-up writes at most this many skipped rows and summarises the rest (API.md). */
export const catchUpSkippedRowsMax = 100;
/** Share of dispatch capacity a `catch_up: all` backlog may use. */
export const catchUpDispatchShareDefault = 0.2;

/** Timing of the scheduler; shortened in tests and chaos runs. */
export interface TimingConfig {
  shardLeaseTtlMs: number;
  shardLeaseRenewIntervalMs: number;
  shardLeaseSafetyMarginMs: number;
  loadHorizonMs: number;
  loadRefreshIntervalMs: number;
  reconcileIntervalMs: number;
  /** Period of the lease-expiry sweep when nothing nearer is known. */
  leaseSweepIntervalMs: number;
  /**
   * How long before its fire time a one-shot job's run is written, ready from the fire time
   * (0: at the fire time). A herd's runs are then in the ledger before its instant, and only
   * leases and completions are left at it (docs/benchmarks.md). A store without
   * `dispatchesAhead` fires at the fire time whatever this says (both stores have it).
   * 10 s: writing a 50,000-timer herd takes the embedded store 2–4 s and PostgreSQL ~9 s on
   * 2 cores while workers lease it, and at 5 s a worker leasing 3 s ahead met a herd still being
   * written (bench:peers W4 bimodal, lag p99 0.6 or 3–6 s; at 10 s 0.45–0.8 s in every round).
   */
  dispatchAheadMs: number;
  /**
   * Only a herd or a dense stream is dispatched ahead: at least this many one-shot timers due
   * in the same wheel tick (10 ms; 16 a tick is 1,600 a second). Their runs are written a tick
   * at a time, and finished a tick at a time, so the server's work at their time is leases
   * and completions (bench:peers W2, 2,000 timers a second: ~15 % less server CPU per run),
   * and workers leasing ahead (`ahead_ms`) find them there. A trickle
   * gains nothing (its dispatch is small at any instant) and would pay a statement more per
   * run (written a timer at a time, W2's lag p99 went 7 → 10-11 ms), so its timers wait in
   * the wheel for their own time.
   */
  dispatchAheadMinTimers: number;
  /**
   * A bigger herd is written further ahead: a second more than `dispatchAheadMs` for each this
   * many one-shot timers due in its wheel tick, up to twice `dispatchAheadMs` (a 50,000-timer
   * herd 20 s ahead, in chunks of 5,000 a second from then, the latest-loaded first). The
   * rate is what PostgreSQL wrote a herd at on this machine while workers leased it (~5,500
   * timers a second, bench:peers W4): at 10 s for any size, a 50,000 herd was written until
   * ~1 s before its instant, into the window of workers leasing 8 s ahead, and in a slow
   * round past it (lag p99 3 s, against 0.3-0.8 s when written in time).
   */
  dispatchAheadTimersPerSecond: number;
  /**
   * How long after its fire time a one-shot job whose run was written ahead is finished (its
   * timer consumed, the job marked done). The run is leasable from its fire time whatever
   * this says; finishing at the instant put a herd's finishes (two statements per timer, in
   * 4,096-timer transactions) before its leases: leases got 1 % of the server's thread for
   * the herd's first ~0.6 s (bench:peers W4, 50,000 timers; 10 s later, over alternated
   * pairs: lag p99 −10 to −20 %, p50 −20 to −30 %, docs/benchmarks.md). Until then the job
   * reads `active`, its `next_fire_at` the time just passed; a PATCH is refused (job-service.ts).
   */
  finishAheadDelayMs: number;
}

export const timingDefaults: TimingConfig = {
  shardLeaseTtlMs: 10_000,
  shardLeaseRenewIntervalMs: 3_000,
  shardLeaseSafetyMarginMs: 2_000,
  loadHorizonMs: 300_000,
  loadRefreshIntervalMs: 30_000,
  reconcileIntervalMs: 60_000,
  leaseSweepIntervalMs: 1_000,
  dispatchAheadMs: 10_000,
  dispatchAheadMinTimers: 16,
  dispatchAheadTimersPerSecond: 5_000,
  finishAheadDelayMs: 10_000,
};

/**
 * Under the virtual clock a test advances days at a time, and every renewal is a commit. The
 * embedded store's data-directory lock already keeps a second process out, so long shard
 * leases cost nothing there; explicit TICKLER_* timing settings still win.
 */
export const virtualClockTimingDefaults: TimingConfig = {
  ...timingDefaults,
  shardLeaseTtlMs: 600_000,
  shardLeaseRenewIntervalMs: 180_000,
  shardLeaseSafetyMarginMs: 120_000,
};

export function assertTiming(timing: TimingConfig): void {
  assert.ok(timing.shardLeaseRenewIntervalMs * 3 <= timing.shardLeaseTtlMs, 'renew at least three times per lease TTL');
  assert.ok(timing.shardLeaseSafetyMarginMs < timing.shardLeaseTtlMs - timing.shardLeaseRenewIntervalMs,
    'the safety margin must leave room to renew');
  assert.ok(timing.loadRefreshIntervalMs < timing.loadHorizonMs, 'refresh more often than the horizon is long');
  assert.ok(timing.leaseSweepIntervalMs > 0 && timing.reconcileIntervalMs > 0);
  assert.ok(timing.dispatchAheadMs >= 0 && timing.dispatchAheadMs * 2 < timing.loadHorizonMs,
    'dispatch ahead (a big herd up to twice as far) by less than the load horizon');
  assert.ok(timing.dispatchAheadTimersPerSecond >= 1);
  assert.ok(timing.finishAheadDelayMs >= 0 && timing.finishAheadDelayMs < timing.loadHorizonMs,
    'finish a herd written ahead within the load horizon');
}

/** The wheel covers the load horizon plus one refresh, in one-millisecond-resolution slots of 10 ms. */
export const wheelTickMs = 10;
/** Timers per dispatch transaction (PostgreSQL). */
export const dispatchBatchMax = 512;
/**
 * Timers per dispatch transaction on the embedded store. Its random-keyed indexes (run ids are
 * hashes) rewrite nearly every page they touch per commit, so a herd costs far less in
 * bigger commits. Measured on a 100,000-timer herd: 512 → 2,048 per commit wrote 1.5 GB →
 * 0.43 GB and took ~35 % less CPU per run; 2,048, 4,096 and 8,192 were alike.
 */
export const sqliteDispatchBatchMax = 4_096;
/**
 * Timers read per loader query page; the loader gives the event loop a turn between pages.
 * A page of the embedded store (join, spec parse, wheel insert) holds the loop ~10 ms.
 */
export const loadPageMax = 1_000;
/** Creates coalesced into one group-commit transaction. */
export const groupCommitMax = 2_000;

assertTiming(timingDefaults);
assertTiming(virtualClockTimingDefaults);
assertHttpLimits(httpLimitsDefaults);
