/**
 * Leases whose answer died with the node that granted them (DESIGN.md flow 7). A node killed
 * after committing a lease and before its answer went out leaves the run held by no worker
 * for its whole `lease_s`. Workers heartbeat every third of a lease (flow 6), so such leases
 * can be cut to a third of a lease plus a margin: a worker that has its run heartbeats in time
 * and keeps it; an answer that was lost is offered again within seconds.
 *
 * The embedded store knows its predecessor is dead from the data directory's lock (server.ts).
 * On PostgreSQL every lease records the node that granted it until its worker heartbeats;
 * every node is a member of the cluster (a node without the scheduler role as a member that
 * takes no shards, beating through `keepMembership` below), and this wrapper of a member's
 * heartbeat cuts the leases of nodes that are not alive:
 * - at the node's first heartbeat, every such lease not granted by another live node, its
 *   own id included (a predecessor restarted under the same `--node-id`: this process has
 *   granted nothing yet, as it listens only once the scheduler has started);
 * - after a heartbeat that no longer shows a node the one before showed (its membership
 *   lapsed: killed, partitioned or paused past the TTL; or it left).
 * A cut that fails is tried again at the next heartbeat. The cut runs beside the heartbeat,
 * not inside it: the heartbeat paces the node's shard leases, and a scan must not delay them.
 */
import type { Clock, TimerHandle } from '../clock.js';
import type { Logger } from '../obs/log.js';
import type { ClusterMembership } from '../store/membership.js';

export interface LeaseCutter {
  /** Cuts leases granted by nodes outside `liveNodeIds` and not heartbeated since; answers how many. */
  shortenLeasesOfGoneNodes(liveNodeIds: readonly string[], nowMs: number, marginMs: number): Promise<number>;
}

export function cuttingLeasesOfGoneNodes(membership: ClusterMembership,
  options: { store: LeaseCutter; clock: Clock; logger: Logger; marginMs: number }): ClusterMembership & {
    /** Settles when no cut is in flight (tests, and close). */
    idle(): Promise<void>;
  } {
  let seen: ReadonlySet<string> | null = null;
  let firstCutDone = false;
  let cutDue = true;
  let cutting: Promise<void> | null = null;

  const cut = (nodeId: string, live: ReadonlySet<string>): void => {
    if (cutting !== null) return;
    cutDue = false;
    const alive = [...live].filter((id) => firstCutDone || id !== nodeId);
    cutting = options.store.shortenLeasesOfGoneNodes(alive, options.clock.nowMs(), options.marginMs)
      .then((count) => {
        firstCutDone = true;
        if (count > 0) {
          options.logger.warn({ leases: count, marginMs: options.marginMs, liveNodes: alive },
            'worker leases granted by nodes no longer alive now expire a third of their lease (plus the margin) from now unless heartbeated');
        }
      }, (error: unknown) => {
        cutDue = true;
        options.logger.warn({ err: error }, 'cutting the leases of nodes no longer alive failed; trying again at the next heartbeat');
      })
      .finally(() => {
        cutting = null;
      });
  };

  return {
    async heartbeat(nodeId, ttlMs, nowMs) {
      const members = await membership.heartbeat(nodeId, ttlMs, nowMs);
      const live = new Set(members.map((member) => member.nodeId));
      if (seen !== null && [...seen].some((id) => !live.has(id))) cutDue = true;
      seen = live;
      if (cutDue) cut(nodeId, live);
      return members;
    },
    leave: (nodeId) => membership.leave(nodeId),
    async close() {
      await cutting;
      await membership.close();
    },
    idle: async () => {
      await cutting;
    },
  };
}

/**
 * Heartbeats a node's membership every `intervalMs` for as long as the node runs: the loop a
 * node without the scheduler role needs (a scheduler beats in its shard-lease cycle). Settles
 * once the first beat is done, so the node grants no lease before its first cut has run. A
 * beat that fails is logged and the next one tries again; stop leaves the cluster.
 */
export async function keepMembership(membership: ClusterMembership, options: {
  nodeId: string; ttlMs: number; intervalMs: number; clock: Clock; logger: Logger;
}): Promise<{ stop(): Promise<void> }> {
  const { clock, logger } = options;
  let stopped = false;
  let beating: Promise<void> = Promise.resolve();
  let timer: TimerHandle | null = null;
  const beat = (): void => {
    timer = null;
    beating = membership.heartbeat(options.nodeId, options.ttlMs, clock.nowMs()).then(() => undefined, (error: unknown) => {
      logger.warn({ err: error }, 'cluster membership heartbeat failed; trying again at the next interval');
    }).finally(() => {
      if (!stopped) timer = clock.setTimer(clock.nowMs() + options.intervalMs, beat);
    });
  };
  beat();
  await beating;
  return {
    stop: async () => {
      stopped = true;
      timer?.cancel();
      await beating;
      await membership.leave(options.nodeId).catch((error: unknown) => {
        logger.warn({ err: error }, 'leaving the cluster failed; the membership lapses on its own');
      });
    },
  };
}
