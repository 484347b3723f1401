/**
 * A node of a PostgreSQL cluster. Every node is a member of the cluster (store/membership.ts),
 * seen alive or gone by the others: a scheduler beats in its shard-lease cycle and takes its
 * fair share (scheduler/cluster-planner.ts); a node without the scheduler role beats on its
 * own (keepMembership) and takes no shards. Every member cuts the leases granted by members
 * gone (scheduler/orphaned-leases.ts). Timer partitions are kept by every node (the store's
 * `maintainPartitions` is safe from all at once). The chaos run's zombie hook
 * (`TICKLER_CHAOS_PAUSE_SIGNAL`) wraps the scheduler's store here.
 */
import type { Clock } from '../clock.js';
import { TicklerError } from '../errors.js';
import { dispatchBatchMax, serverOrphanedLeaseMarginMs, type TimingConfig } from '../limits.js';
import type { Logger } from '../obs/log.js';
import { clusterPlanner } from '../scheduler/cluster-planner.js';
import { cuttingLeasesOfGoneNodes, keepMembership } from '../scheduler/orphaned-leases.js';
import type { ClusterMembership } from '../store/membership.js';
import { openPostgresStore } from '../store/postgres/index.js';
import { pauseBeforeDispatchOnSignal } from '../store/postgres/pause-before-dispatch.js';
import type { StoreWiring } from './store-wiring.js';
import { whenDatabaseAnswers } from './wait-for-database.js';

export async function openClusterNode(url: string, options: { nodeId: string; timing: TimingConfig; clock: Clock; logger: Logger }):
  Promise<StoreWiring> {
  const { nodeId, timing, clock, logger } = options;
  // The node's id goes on every lease it grants: the leases of a member gone are cut.
  const store = await openPostgresStore({
    url, nearHorizonMs: timing.loadHorizonMs, useDatabaseClock: !clock.isVirtual, logger, leaseNodeId: nodeId,
  });
  let membership: ClusterMembership | null = null;
  let ownBeat: { stop(): Promise<void> } | null = null;
  let pauseHook: ReturnType<typeof pauseBeforeDispatchOnSignal> | null = null;
  return {
    store,
    maintenance: (nowMs) => store.maintainPartitions(nowMs),
    async join({ schedules }) {
      const joined = await whenDatabaseAnswers('joining the cluster', logger, () => store.openMembership({ schedules }));
      membership = cuttingLeasesOfGoneNodes(joined, { store, clock, logger, marginMs: serverOrphanedLeaseMarginMs });
      pauseHook = chaosPauseHook(clock, logger, store);
      return {
        store: pauseHook?.store ?? store,
        forceFirstAcquire: false,
        dispatchBatchMax,
        planner: clusterPlanner({ membership, membershipTtlMs: timing.shardLeaseTtlMs }),
      };
    },
    async started({ scheduling }) {
      if (scheduling || membership === null) return;
      ownBeat = await keepMembership(membership, {
        nodeId, ttlMs: timing.shardLeaseTtlMs, intervalMs: timing.shardLeaseRenewIntervalMs, clock, logger,
      });
    },
    async leave() {
      await ownBeat?.stop();
      await membership?.close();
    },
    async close() {
      pauseHook?.detach();
      await store.close();
    },
  };
}

/**
 * The chaos test's zombie (see pause-before-dispatch.ts), only when `TICKLER_CHAOS_PAUSE_SIGNAL`
 * names the signal that arms it. Read here rather than among the serve options: it is a test
 * hook, not configuration.
 */
function chaosPauseHook(clock: Clock, logger: Logger, store: Parameters<typeof pauseBeforeDispatchOnSignal>[0]):
  ReturnType<typeof pauseBeforeDispatchOnSignal> | null {
  const signal = process.env['TICKLER_CHAOS_PAUSE_SIGNAL'];
  if (signal === undefined || signal === '') return null;
  if (signal !== 'SIGUSR2') throw new TicklerError('invalid_request', 'TICKLER_CHAOS_PAUSE_SIGNAL may only be SIGUSR2');
  return pauseBeforeDispatchOnSignal(store, { signal, clock, logger });
}
