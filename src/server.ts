/**
 * `tickler serve`: one program, several roles (DESIGN.md "Layout"). Opens the store, starts a
 * scheduler node and the HTTP API as the roles ask, and shuts down in the order that keeps
 * the promise: stop taking work, let the dispatch in flight finish, hand back the shard
 * leases so a successor starts at once, close the store.
 */
import { mkdirSync } from 'node:fs';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import { buildApp } from './api/app.js';
import type { LabelSelector } from './service/job-spec.js';
import { SystemClock, VirtualClock, type Clock } from './clock.js';
import { acquireDataDirLock, type DataDirLock } from './data-dir-lock.js';
import { TicklerError, isTicklerError } from './errors.js';
import { assertTiming, cronToleranceSecondsDefault, dispatchBatchMax, payloadBytesMax, sqliteDispatchBatchMax, timingDefaults,
  virtualClockTimingDefaults, type HttpLimits, type TimingConfig } from './limits.js';
import { createLogger, type Logger } from './obs/log.js';
import { Metrics } from './obs/metrics.js';
import { AlertWebhook } from './obs/alert-webhook.js';
import { Scheduler } from './scheduler/scheduler.js';
import { clusterPlanner } from './scheduler/cluster-planner.js';
import { cuttingLeasesOfGoneNodes, keepMembership } from './scheduler/orphaned-leases.js';
import { openSqliteStore } from './store/sqlite/index.js';
import { PostgresStore, openPostgresStore } from './store/postgres/index.js';
import { openPostgresMembership } from './store/postgres/membership.js';
import { pauseBeforeDispatchOnSignal } from './store/postgres/pause-before-dispatch.js';
import type { Store } from './store/store.js';
import { observeRunDeadlines } from './store/observe-run-deadlines.js';

export type Role = 'api' | 'scheduler';

export interface ServeOptions {
  host: string;
  port: number;
  dataDir: string;
  storeUrl: string | null;
  roles: Role[];
  nodeId: string | null;
  apiKeys: Map<string, string> | null;
  virtualClock: boolean;
  startAtMs: number | null;
  logLevel: string;
  cronToleranceDefaultS?: number;
  /** A one-shot job already due is dispatched by its create (default true; `TICKLER_DISPATCH_AT_CREATE=0`). */
  dispatchAtCreate?: boolean;
  timing?: Partial<TimingConfig>;
  payloadBytesMax?: number;
  /** `--require-max-silence-label`: jobs with this label must set max_silence_s. */
  silenceRequiredLabel?: LabelSelector | null;
  /** P2's share of a pool's leases while P0 or P1 have ready runs (`--p2-share`; default 0.2). */
  p2Share?: number;
  /** `--alert-webhook`: where silence alerts are posted, and the HMAC secret they are signed with. */
  alertWebhook?: { url: string; secret: string } | null;
  /** The HTTP server's timeouts and connection cap (default `httpLimitsDefaults`). */
  http?: HttpLimits;
}

export interface RunningServer {
  url: string;
  nodeId: string;
  close(): Promise<void>;
}

const partitionMaintenanceIntervalMs = 3_600_000;
/**
 * How long a starting node waits for an unreachable database before it gives up. A node
 * (re)started while PostgreSQL restarts should come up when the database does, not exit.
 */
const databaseWaitAtStartMs = 60_000;
const databaseRetryDelayMsMax = 2_000;

export async function startServer(options: ServeOptions): Promise<RunningServer> {
  const logger = createLogger({ level: options.logLevel });
  const timing: TimingConfig = { ...(options.virtualClock ? virtualClockTimingDefaults : timingDefaults), ...options.timing };
  assertTiming(timing);
  const nodeId = options.nodeId ?? `${hostname()}-${process.pid}`;
  const clock: Clock = options.virtualClock ? new VirtualClock(options.startAtMs ?? Date.now()) : new SystemClock();
  const metrics = new Metrics({ defaultMetrics: true });
  const opened = await whenDatabaseAnswers('opening the store', logger, () => openStore(options, nodeId, clock, timing, logger));
  const postgres = opened.store instanceof PostgresStore ? opened.store : null;
  // Every node on PostgreSQL is a member of the cluster: a scheduler takes its share of the
  // shards, and every member cuts the leases of members gone (src/scheduler/orphaned-leases.ts).
  const schedules = options.roles.includes('scheduler');
  const membership = postgres !== null
    ? await whenDatabaseAnswers('joining the cluster', logger, () => openPostgresMembership({
      url: opened.url, schema: postgres.schema, useDatabaseClock: !clock.isVirtual, logger, schedules }))
      .then((joined) => cuttingLeasesOfGoneNodes(joined, { store: postgres, clock, logger, marginMs: orphanedLeaseMarginMs }))
      .catch(async (error: unknown) => {
        await opened.store.close();
        throw error;
      })
    : null;
  const zombieHook = chaosPauseHook(opened.store, clock, logger);
  const alerts = options.alertWebhook === undefined || options.alertWebhook === null ? null
    : new AlertWebhook({ ...options.alertWebhook, clock, logger, metrics });
  const scheduler = options.roles.includes('scheduler')
    ? new Scheduler({
      store: zombieHook?.store ?? opened.store, clock, nodeId, timing, metrics, logger,
      forceFirstAcquire: opened.lock?.tookOverFromDeadProcess ?? false,
      // Near timers come announced (in-process after the commit on SQLite, by NOTIFY on
      // PostgreSQL, which says when announcements may have been lost: onNearTimersMissed),
      // so only every tenth refresh rereads the whole window.
      fullReloadEveryRefreshes: 10,
      dispatchBatchMax: opened.store.kind === 'sqlite' ? sqliteDispatchBatchMax : dispatchBatchMax,
      alerts,
      ...(membership === null ? {} : { planner: clusterPlanner({ membership, membershipTtlMs: timing.shardLeaseTtlMs }) }),
    })
    : null;
  const store = scheduler === null ? opened.store : observeRunDeadlines(opened.store, (atMs) => scheduler.noteRunDeadline(atMs));
  const maintenance = startPartitionMaintenance(opened.store, clock, logger);
  let apiMembership: { stop(): Promise<void> } | null = null;
  try {
    await scheduler?.start();
    if (scheduler === null && membership !== null) {
      apiMembership = await keepMembership(membership, {
        nodeId, ttlMs: timing.shardLeaseTtlMs, intervalMs: timing.shardLeaseRenewIntervalMs, clock, logger,
      });
    }
  } catch (error) {
    await membership?.close();
    await opened.store.close();
    opened.lock?.release();
    throw error;
  }
  // Every node listens: without the api role it serves only /healthz, /readyz and /metrics.
  const app = buildApp({
    store, clock, metrics, logger,
    apiRoutes: options.roles.includes('api'),
    virtualClock: clock instanceof VirtualClock ? clock : null,
    config: {
      apiKeys: options.apiKeys,
      payloadBytesMax: options.payloadBytesMax ?? payloadBytesMax,
      cronToleranceDefaultS: options.cronToleranceDefaultS ?? cronToleranceSecondsDefault,
      dispatchAtCreate: options.dispatchAtCreate !== false,
      silenceRequiredLabel: options.silenceRequiredLabel ?? null,
      ...(options.p2Share === undefined ? {} : { p2Share: options.p2Share }),
      ...(options.http === undefined ? {} : { http: options.http }),
    },
    readiness: async () => {
      await store.ping();
      const status = scheduler?.status() ?? null;
      return {
        ready: status === null || status.shardsOwned > 0,
        detail: { node_id: nodeId, store: store.kind, roles: options.roles,
          shards_owned: status?.shardsOwned ?? 0, wheel_timers: status?.wheelTimers ?? 0,
          shards: scheduler?.leases.ownedShards() ?? [] },
      };
    },
  });
  tagAnswersWithTestRun(app);
  let closing: Promise<void> | null = null;
  const close = (): Promise<void> => {
    closing ??= (async () => {
      // Each step goes on after a failure of the one before: on a full disk the shard
      // leases cannot be handed back (a successor then waits out their TTL), yet the store
      // must still close and the data directory's lock be released. Nothing acknowledged
      // depends on these writes, so the failure is logged and shutdown ends normally.
      const step = async (what: string, run: () => Promise<void> | void): Promise<void> => {
        try {
          await run();
        } catch (error) {
          logger.error({ err: error, nodeId }, `shutdown: ${what} failed; going on`);
        }
      };
      await step('closing the HTTP server', () => app.close());
      maintenance?.stop();
      await step('stopping the scheduler (handing back its shard leases)', () => scheduler?.stop());
      alerts?.close();
      await step('leaving the cluster', async () => {
        await apiMembership?.stop();
        await membership?.close();
      });
      zombieHook?.detach();
      await step('closing the store', () => opened.store.close());
      opened.lock?.release();
      logger.info({ nodeId }, 'tickler stopped');
      logger.flush();
    })();
    return closing;
  };
  let url: string;
  try {
    url = await app.listen({ host: options.host, port: options.port });
  } catch (error) {
    // A node without its port must not live on headless (a scheduler still dispatching, a
    // data directory still locked) while its clients find whatever else answers there.
    await close().catch((closeError: unknown) => logger.error({ err: closeError }, 'closing after a failed listen failed'));
    throw new ListenError(options.host, options.port, error);
  }
  logger.info({ url, nodeId, store: store.kind, roles: options.roles, virtualClock: options.virtualClock }, 'tickler started');
  return { url, nodeId, close };
}

/** The node could not bind its address: the one line `tickler serve` prints before it exits 1. */
export class ListenError extends Error {
  constructor(host: string, port: number, cause: unknown) {
    const code = (cause as NodeJS.ErrnoException | null)?.code;
    const why = code === 'EADDRINUSE' ? 'address already in use (EADDRINUSE)'
      : code === undefined ? (cause instanceof Error ? cause.message : String(cause)) : `${code}`;
    super(`cannot listen on ${host}:${port}: ${why}`, { cause });
    this.name = 'ListenError';
  }
}

/** The header naming the test run a node belongs to, on every answer when `TICKLER_TEST_RUN` is set (chaos/run-tag.ts reads it). */
const testRunHeader = 'tickler-test-run';

/**
 * A test harness that runs several processes names its run in `TICKLER_TEST_RUN`; every
 * answer then carries it, so a client that reached another run's node (its port taken over
 * between a kill and a restart, say) can tell. A test hook, like `chaosPauseHook`.
 */
function tagAnswersWithTestRun(app: ReturnType<typeof buildApp>): void {
  const tag = process.env['TICKLER_TEST_RUN'];
  if (tag === undefined || tag === '') return;
  app.addHook('onRequest', async (_request, reply) => {
    reply.header(testRunHeader, tag);
  });
}

/**
 * The chaos test's zombie (see pause-before-dispatch.ts), on PostgreSQL only and only when
 * `TICKLER_CHAOS_PAUSE_SIGNAL` names the signal that arms it. Read here rather than among
 * the serve options: it is a test hook, not configuration.
 */
function chaosPauseHook(store: Store, clock: Clock, logger: Logger): ReturnType<typeof pauseBeforeDispatchOnSignal> | null {
  const signal = process.env['TICKLER_CHAOS_PAUSE_SIGNAL'];
  if (signal === undefined || signal === '' || !(store instanceof PostgresStore)) return null;
  if (signal !== 'SIGUSR2') throw new TicklerError('invalid_request', 'TICKLER_CHAOS_PAUSE_SIGNAL may only be SIGUSR2');
  return pauseBeforeDispatchOnSignal(store, { signal, clock, logger });
}

/**
 * Calls `open` until it does not fail with `unavailable`, for up to `databaseWaitAtStartMs`
 * of backoff. Real-time waits on purpose (as the notifier's reconnects): this is I/O
 * plumbing, and a virtual clock standing still must not keep a node from starting.
 */
async function whenDatabaseAnswers<T>(what: string, logger: Logger, open: () => Promise<T>): Promise<T> {
  let waitedMs = 0;
  for (let attempt = 1; ; attempt++) {
    try {
      return await open();
    } catch (error) {
      if (!isTicklerError(error) || error.code !== 'unavailable' || waitedMs >= databaseWaitAtStartMs) throw error;
      const delayMs = Math.min(databaseRetryDelayMsMax, 100 * 2 ** attempt);
      logger.warn({ err: error, attempt, retryInMs: delayMs }, `${what}: the database does not answer; trying again`);
      await new Promise((resolveDelay) => setTimeout(resolveDelay, delayMs));
      waitedMs += delayMs;
    }
  }
}

/**
 * After a crash, a lease the dead process committed may never have reached its worker (the
 * answer died with it), and would hold its run for the whole `lease_s` (bench:peers W8: one run
 * 60 s late). Workers heartbeat every third of a lease, so leases are cut to that plus this
 * margin: a worker that has its run keeps it, a lost answer is offered again. On the embedded
 * store at a restart that took the data directory's lock over from a dead process (below); on
 * PostgreSQL when a cluster member is gone (src/scheduler/orphaned-leases.ts).
 */
const orphanedLeaseMarginMs = 5_000;

async function openStore(options: ServeOptions, nodeId: string, clock: Clock, timing: TimingConfig, logger: Logger):
  Promise<{ store: Store; lock: DataDirLock | null; url: string }> {
  const storeUrl = options.storeUrl ?? `sqlite:${join(options.dataDir, 'tickler.db')}`;
  if (storeUrl.startsWith('postgres://') || storeUrl.startsWith('postgresql://')) {
    const store = await openPostgresStore({
      url: storeUrl, nearHorizonMs: timing.loadHorizonMs, useDatabaseClock: !clock.isVirtual, logger,
      // Every node is a member of the cluster, seen alive or gone by the others.
      leaseNodeId: nodeId,
    });
    return { store, lock: null, url: storeUrl };
  }
  if (!storeUrl.startsWith('sqlite:')) {
    throw new TicklerError('invalid_request', `unknown store URL ${storeUrl}: use sqlite:PATH or postgres://...`);
  }
  const path = resolve(storeUrl.slice('sqlite:'.length));
  const dataDir = resolve(path, '..');
  mkdirSync(dataDir, { recursive: true });
  const lock = acquireDataDirLock(dataDir);
  try {
    const store = await openSqliteStore({ path, nearHorizonMs: timing.loadHorizonMs, logger });
    if (lock.tookOverFromDeadProcess) {
      const cut = store.shortenOrphanedLeases(clock.nowMs(), orphanedLeaseMarginMs);
      if (cut > 0) {
        logger.warn({ leases: cut, marginMs: orphanedLeaseMarginMs },
          'worker leases granted before the crash now expire a third of their lease (plus the margin) from now unless heartbeated');
      }
    }
    return { store, lock, url: storeUrl };
  } catch (error) {
    lock.release();
    throw error;
  }
}

/** PostgreSQL timer partitions are created ahead and dropped when past and empty. */
function startPartitionMaintenance(store: Store, clock: Clock, logger: Logger): { stop(): void } | null {
  const maintainable = store as Store & { maintainPartitions?: (nowMs: number) => Promise<void> };
  if (typeof maintainable.maintainPartitions !== 'function') return null;
  const maintain = maintainable.maintainPartitions.bind(store);
  let stopped = false;
  let handle = clock.setTimer(clock.nowMs(), async function run(): Promise<void> {
    try {
      await maintain(clock.nowMs());
    } catch (error) {
      logger.error({ err: error }, 'timer partition maintenance failed; retrying at the next interval');
    }
    if (!stopped) handle = clock.setTimer(clock.nowMs() + partitionMaintenanceIntervalMs, run);
  });
  return {
    stop: () => {
      stopped = true;
      handle.cancel();
    },
  };
}
