/**
 * Every limit and default in one place (STYLE.md §8), with the relations between them
 * asserted at load time. Defaults come from DESIGN.md "Defaults"; tests shorten the timing
 * ones through `TimingConfig`, never by editing this file.
 */
import assert from 'node:assert/strict';

export {
  bucketDurationMs, catchUpSkippedRowsMax, cronLengthMax, retryJitterFraction, scheduleLookaheadYears, shardCount,
} from './domain/limits.js';

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

export const cronToleranceSecondsDefault = 300;
export const oneShotToleranceSecondsDefault = 0;
export const catchUpWindowSecondsDefault = 86_400;
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
   * leases and completions are left at it (docs/benchmarks.md; `Store.writeRunsAhead`).
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

// ---------------------------------------------------------------------------------------------
// Outside the store and the scheduler: the worker SDK, the server's wiring, the API, the
// services, observability and the CLI. test/layout/tunables.test.ts keeps their numbers here.
// ---------------------------------------------------------------------------------------------

// The worker SDK (src/worker/): its options' defaults and bounds, its backoffs and its batching.

/** A lease request's long-poll wait (`WorkerOptions.waitS`) by default. */
export const workerLeaseWaitSDefault = 20;
/**
 * Completions per slot that may wait for their acknowledgement before they hold slots. A
 * completion batch waits for the server's fsync, so with short handlers the completions of a
 * whole lease are in flight while the next lease goes out: at 1 per slot the next lease asked
 * for half the slots (bench:peers W3, traced: lease max p50 50 of 100). 4 measured best
 * (W3 15,559-15,954 -> 18,126-18,231 runs/s; 2: 17,088-17,141; 8: 18,047-18,281).
 */
export const workerUnacknowledgedCompletionsPerSlotCount = 4;
/** `WorkerOptions.leaseLingerMs` by default (the option's own comment says what it measured). */
export const workerLeaseLingerMsDefault = 5;
/** `WorkerOptions.completionLingerMs` by default. */
export const workerCompletionLingerMsDefault = 10;
/** `leaseLingerMs` and `completionLingerMs` at most. */
export const workerLingerMsMax = 1_000;
/**
 * After a hold lease that found fewer runs ahead than it had places for, the next waits this
 * long (at most a quarter of `leaseAheadMs`). With none, a stream entering the window (bench:peers
 * W2: 2,000 runs a second) was leased as it entered: 4,762 leases of 4.2 runs for 20,000 runs,
 * ~400 µs of server CPU and ~200 µs of the worker's per run (bench/probes/lag-stages.ts).
 */
export const workerHoldLingerMsMax = 100;
/** `WorkerOptions.holdAheadMax` at most. */
export const workerHoldAheadCountMax = 100_000;
/**
 * Handlers started per event-loop turn at most: quick handlers free their slots in
 * microtasks, so a released herd would otherwise start in one cascade with no completion sent
 * until its end (bench/probes/worker-herd-cost.ts).
 */
export const workerStartsPerTurnCountMax = 500;
/**
 * Two parked long-polls: on bench:peers W2's shape (bench/probes/lag-stages.ts, 2,000 timers a
 * second) dispatch -> lease p99 went from 1-3 ms to 0-1 ms and fire -> handler p99 from 4-5
 * to 3-4 ms (docs/benchmarks.md, "Figures behind the defaults").
 */
export const workerLongPollsCountDefault = 2;
export const workerLongPollsCountMax = 8;
/** The first backoff after a failed lease request; it doubles with each failure in a row. */
export const workerLeaseBackoffMsBase = 100;
/**
 * 2 s, as ioredis reconnects (BullMQ's workers): a worker must find a restarted server within
 * seconds. With a 10 s cap, workers that had been failing through a 5 s outage slept up to
 * 7 s past the server's return (bench:peers W8: the first handler 6.8 s after a restart that
 * was ready in 0.9 s). Jitter spreads the reconnects; a server that wants fewer sends
 * Retry-After, which wins.
 */
export const workerLeaseBackoffMsMax = 2_000;
/**
 * While the server's address refuses connections nothing listens there (a server restarting):
 * a refused connect costs it nothing, so workers try every ~0.2 s (100-300 ms jittered) and find
 * it soon after it listens. bench:peers W8 (restart → first handler, SQLite, restart ready in
 * ~0.5 s): with a 2 s cap 2.0-3.6 s; with 500 ms 694-1,236 ms (median 781) and with 200 ms 630-735
 * (median 658) in five alternated pairs, 2026-12-03. A server that answers slowly or not at all
 * (a timeout, a 503) still gets the 2 s cap.
 */
export const workerRefusedBackoffMsMax = 200;
/** Heartbeats in a row without a good answer after which a worker gives its run up (DESIGN.md flow 6). */
export const workerHeartbeatFailuresCountMax = 2;
/**
 * A completion that gets no answer is retried at least this many times, and beyond that for
 * as long as its lease is known to last: until then no other worker can have the run, so a
 * server restarting for a few seconds (bench:peers W8 stops one for 5 s) still gets the outcome
 * instead of offering the run again once the lease runs out. Delays double from 0.5 s to 2 s,
 * ×0.5–1.5 jitter. A stopping worker keeps to the minimum, so a stop never waits out a lease.
 */
export const workerCompleteTriesCountMin = 3;
export const workerCompleteRetryDelayMsBase = 500;
export const workerCompleteRetryDelayMsMax = 2_000;
/** A batched completion's or heartbeat's fields besides its result and error text, generously. */
export const workerBatchItemOverheadBytes = 256;
/** Between two warnings while a worker's requests keep failing (failure-streak.ts). */
export const workerFailureLogIntervalMsDefault = 5_000;
/** `{"jobs":[` and `]}` around a create batch's items (and `"answer":"id",`), with room to spare (create-batcher.ts). */
export const clientCreateBatchEnvelopeBytes = 64;
/** A `TicklerClient` request's timeout by default. */
export const clientRequestTimeoutMsDefault = 30_000;
/** Headroom over `wait_s` so a long-poll that answers on time is never cut short by its timeout. */
export const clientLongPollTimeoutHeadroomMs = 10_000;

// The server's wiring (src/server.ts, src/server/).

/** How often a PostgreSQL node creates timer partitions ahead and drops past, empty ones. */
export const serverPartitionMaintenanceIntervalMs = 3_600_000;
/**
 * How long a starting node waits for an unreachable database before it gives up. A node
 * (re)started while PostgreSQL restarts should come up when the database does, not exit.
 */
export const serverDatabaseWaitAtStartMs = 60_000;
/** The first wait for an unreachable database at start; it doubles up to the max. */
export const serverDatabaseRetryDelayMsBase = 100;
export const serverDatabaseRetryDelayMsMax = 2_000;
/**
 * After a crash, a lease the dead process committed may never have reached its worker (the
 * answer died with it), and would hold its run for the whole `lease_s` (bench:peers W8: one run
 * 60 s late). Workers heartbeat every third of a lease, so leases are cut to that plus this
 * margin: a worker that has its run keeps it, a lost answer is offered again. On the embedded
 * store at a restart that took the data directory's lock over from a dead process; on
 * PostgreSQL when a cluster member is gone (src/scheduler/orphaned-leases.ts).
 */
export const serverOrphanedLeaseMarginMs = 5_000;
/**
 * Near timers come announced (in-process after the commit on SQLite, by NOTIFY on PostgreSQL,
 * which says when announcements may have been lost: onNearTimersMissed), so a scheduler node
 * rereads its whole window only every this many refreshes.
 */
export const serverFullReloadEveryRefreshesCount = 10;

// The HTTP API (src/api/).

/** How often, at most, Node looks for requests past their timeout (its default is 30 s). */
export const apiHttpTimeoutCheckIntervalMsMax = 1_000;
/** Formatted instants remembered (api/wire.ts `iso`); cleared when full, so it stays small. */
export const apiIsoCacheEntriesCountMax = 64;
/** The longest window one occurrences call of the web UI's data routes covers. */
export const apiOccurrenceWindowDaysMax = 31;
/** Replays a team may start at once from the web UI, and how many more each second gives it. */
export const apiReplayBurstCount = 50;
export const apiReplayRefillCountPerS = 10;

// The services (src/service/).

/** How often each node reads the stored team limits again (a change through another node is seen within this). */
export const teamLimitsRefreshIntervalMs = 5_000;

/** Schedule preview: skipped days are rare (two a year at most per zone), so a few rounds always suffice. */
export const previewTopUpRoundsCountMax = 8;
/** How often a read-compute-write job change is recomputed after losing a version race. */
export const jobChangeAttemptsCountMax = 5;
/** Passes in a row in which a lease waiter may find a run ready "now" yet not lease it, before it backs off. */
export const leaseWaiterReadyNowPassesCountMax = 3;
/** The lease waiter's back-off for that case, on the injected clock. */
export const leaseWaiterReadyRecheckDelayMs = 250;

// Observability (src/obs/).

/** Distinct teams with a label of their own on the per-team metrics. */
export const metricsTeamLabelsCountMax = 1_000;
/** The window `tickler_due_per_second` averages over, seconds. */
export const metricsDueWindowS = 10;

/** A silence alert's POST to the webhook is given this long. */
export const alertSendTimeoutMs = 10_000;
/** An alert not delivered is retried after this, doubling up to the max. */
export const alertRetryDelayMsMin = 1_000;
export const alertRetryDelayMsMax = 300_000;

// The command line (src/cli/).

/** A table cell is cut to this many characters (an error message, say), ending in "…". */
export const cliTableCellCharsCountMax = 60;
/** `tickler worker --exec`: the end of a failed command's stderr kept as the run's error. */
export const cliExecStderrTailBytesMax = 4_096;
/** `tickler worker --exec`: after SIGTERM, a command still running this long gets SIGKILL. */
export const cliExecKillGraceMsDefault = 5_000;
/** `tickler serve`: a shutdown that takes longer than this exits anyway. */
export const cliServeShutdownDeadlineMs = 10_000;
/** `tickler apply`: job upserts in flight at once. */
export const cliApplyUpsertConcurrencyCount = 8;
/** `tickler apply`: the next occurrences shown for each active cron job it changes. */
export const cliApplyPreviewCount = 3;
// The scheduler's firing pass (src/scheduler/: timer-loader.ts, wheel-driver.ts, scheduler.ts) ----

/** How soon a timer held back by a late shard-lease renewal is tried again. */
export const heldBackRetryDelayMs = 100;
/**
 * Under the virtual clock, timers due within this long of the earliest fire together at the
 * last of them. Below the shortest cron period (1 s), so a late fire never makes the next
 * occurrence look missed.
 */
export const virtualBatchWindowMs = 500;
/** How soon after a failed dispatch or a lost near-timer announcement the loader rereads the whole window. */
export const reloadSoonDelayMs = 1_000;
/** Dispatches per second a scheduler node is sized for, unless told (`catch_up: all` backlogs get a share of it). */
export const dispatchCapacityPerSecondDefault = 5_000;

// Lease planner and noisy neighbours (src/service/lease-planner.ts, dispatch-shares.ts) ------------

/** P2's share of a pool's leases while P0 or P1 have ready runs (`--p2-share`). */
export const leaseP2ShareDefault = 0.2;
/** How long a pool's read of its ready teams serves leases when no run became ready there meanwhile. */
export const leaseBacklogReadTtlMs = 100;
/** How soon after its last read a pool whose runs became ready meanwhile is read again. */
export const leaseBacklogRereadMs = 10;
/** How long the lane dispatch caps read from the store serve (a cap set on another node applies this much later here). */
export const leaseLaneCapsReadTtlMs = 1_000;
/** Dispatch shares are counted in buckets of this length, over a window of this many buckets (a minute). */
export const dispatchShareBucketMs = 10_000;
export const dispatchShareWindowBuckets = 6;
/** A noisy neighbour holds over this share of a lane's leases (with another team leased there) for this long. */
export const noisyNeighbourShare = 0.5;
export const noisyNeighbourForMs = 600_000;
