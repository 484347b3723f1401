/**
 * `tickler serve`: one program, several roles (DESIGN.md "Layout"). One node, as a sequence:
 * open the store (and, with it, the wiring of its kind: server/store-wiring.ts), join the
 * cluster, start the scheduler if the roles ask, build the HTTP app and listen. Shutdown goes
 * the other way (server/shutdown.ts): stop taking work, let the dispatch in flight finish,
 * hand back the shard leases so a successor starts at once, leave the cluster, close the store.
 */
import { hostname } from 'node:os';
import { buildApp } from './api/app.js';
import type { LabelSelector } from './service/job-spec.js';
import { SystemClock, VirtualClock, type Clock } from './clock.js';
import { assertTiming, cronToleranceSecondsDefault, payloadBytesMax, serverFullReloadEveryRefreshesCount, timingDefaults,
  virtualClockTimingDefaults, type HttpLimits, type TimingConfig } from './limits.js';
import { createLogger, type Logger } from './obs/log.js';
import { Metrics } from './obs/metrics.js';
import { AlertWebhook } from './obs/alert-webhook.js';
import { Scheduler } from './scheduler/scheduler.js';
import type { Store, TeamLimitsEntry } from './store/store.js';
import { observeRunDeadlines } from './store/observe-run-deadlines.js';
import { openNodeStore } from './server/open-store.js';
import { startPeriodicMaintenance } from './server/periodic-maintenance.js';
import { shutdownInOrder } from './server/shutdown.js';
import type { StoreWiring } from './server/store-wiring.js';
import { tagAnswersWithTestRun } from './server/test-run-tag.js';
import { whenDatabaseAnswers } from './server/wait-for-database.js';

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
  /** `--limits FILE`: team limits stored at start. */
  teamLimits?: readonly TeamLimitsEntry[];
}

export interface RunningServer {
  url: string;
  nodeId: string;
  close(): Promise<void>;
}

export async function startServer(options: ServeOptions): Promise<RunningServer> {
  const logger = createLogger({ level: options.logLevel });
  const timing: TimingConfig = { ...(options.virtualClock ? virtualClockTimingDefaults : timingDefaults), ...options.timing };
  assertTiming(timing);
  const nodeId = options.nodeId ?? `${hostname()}-${process.pid}`;
  const clock: Clock = options.virtualClock ? new VirtualClock(options.startAtMs ?? Date.now()) : new SystemClock();
  const metrics = new Metrics({ defaultMetrics: true });
  const wiring = await whenDatabaseAnswers('opening the store', logger,
    () => openNodeStore(options.storeUrl, { dataDir: options.dataDir, nodeId, timing, clock, logger }));
  const alerts = options.alertWebhook === undefined || options.alertWebhook === null ? null
    : new AlertWebhook({ ...options.alertWebhook, clock, logger, metrics });
  const maintenance = startPeriodicMaintenance(wiring.maintenance, clock, logger);
  let scheduler: Scheduler | null;
  try {
    scheduler = await startScheduler(wiring, options.roles, { clock, nodeId, timing, metrics, logger, alerts });
  } catch (error) {
    maintenance.stop();
    alerts?.close();
    await wiring.leave().catch((leaveError: unknown) => logger.warn({ err: leaveError }, 'leaving the cluster failed'));
    await wiring.close();
    throw error;
  }
  const store = scheduler === null ? wiring.store : observeRunDeadlines(wiring.store, (atMs) => scheduler.noteRunDeadline(atMs));
  const app = buildNodeApp(options, { store, clock, metrics, logger, nodeId, scheduler });
  const close = shutdownInOrder([
    { what: 'closing the HTTP server', run: () => app.close() },
    { what: 'stopping the timer partition maintenance', run: () => maintenance.stop() },
    { what: 'stopping the scheduler (handing back its shard leases)', run: () => scheduler?.stop() },
    { what: 'closing the alert webhook', run: () => alerts?.close() },
    { what: 'leaving the cluster', run: () => wiring.leave() },
    { what: 'closing the store', run: () => wiring.close() },
  ], logger, nodeId);
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

/**
 * Joins the cluster and, with the scheduler role, starts a scheduler node on the store's
 * wiring; a node without the role beats its membership itself (wiring.started).
 */
async function startScheduler(wiring: StoreWiring, roles: readonly Role[], node: {
  clock: Clock; nodeId: string; timing: TimingConfig; metrics: Metrics; logger: Logger; alerts: AlertWebhook | null;
}): Promise<Scheduler | null> {
  const schedules = roles.includes('scheduler');
  const scheduling = await wiring.join({ schedules });
  const scheduler = schedules
    ? new Scheduler({
      store: scheduling.store, clock: node.clock, nodeId: node.nodeId, timing: node.timing, metrics: node.metrics,
      logger: node.logger,
      forceFirstAcquire: scheduling.forceFirstAcquire,
      fullReloadEveryRefreshes: serverFullReloadEveryRefreshesCount,
      dispatchBatchMax: scheduling.dispatchBatchMax,
      alerts: node.alerts,
      ...(scheduling.planner === undefined ? {} : { planner: scheduling.planner }),
    })
    : null;
  await scheduler?.start();
  await wiring.started({ scheduling: scheduler !== null });
  return scheduler;
}

/** Every node listens: without the api role it serves only /healthz, /readyz and /metrics. */
function buildNodeApp(options: ServeOptions, node: {
  store: Store; clock: Clock; metrics: Metrics; logger: Logger; nodeId: string; scheduler: Scheduler | null;
}): ReturnType<typeof buildApp> {
  const { store, clock, scheduler } = node;
  const app = buildApp({
    store, clock, metrics: node.metrics, logger: node.logger,
    apiRoutes: options.roles.includes('api'),
    virtualClock: clock instanceof VirtualClock ? clock : null,
    config: {
      apiKeys: options.apiKeys,
      payloadBytesMax: options.payloadBytesMax ?? payloadBytesMax,
      cronToleranceDefaultS: options.cronToleranceDefaultS ?? cronToleranceSecondsDefault,
      dispatchAtCreate: options.dispatchAtCreate !== false,
      silenceRequiredLabel: options.silenceRequiredLabel ?? null,
      ...(options.http === undefined ? {} : { http: options.http }),
      ...(options.teamLimits === undefined ? {} : { teamLimits: options.teamLimits }),
      ...(options.p2Share === undefined ? {} : { p2Share: options.p2Share }),
    },
    readiness: async () => {
      await store.ping();
      const status = scheduler?.status() ?? null;
      return {
        ready: status === null || status.shardsOwned > 0,
        detail: { node_id: node.nodeId, store: store.kind, roles: options.roles,
          shards_owned: status?.shardsOwned ?? 0, wheel_timers: status?.wheelTimers ?? 0,
          shards: scheduler?.leases.ownedShards() ?? [] },
      };
    },
  });
  tagAnswersWithTestRun(app);
  return app;
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
