/**
 * Fair shares of the 1,024 shards when several scheduler nodes share PostgreSQL. Each cycle a
 * node heartbeats its membership and learns every live node; it wants `ceil(shards / nodes)`
 * and hands back what it holds above that. A joining node is seen by the others at their next
 * cycle, they release their surplus, and it takes the freed shards on its own next cycle — so
 * a shard is without an owner for at most about one renew interval, well inside one lease TTL.
 * A node that leaves gracefully releases its leases and its membership at once; one that dies
 * is dropped when its membership and leases expire, and the survivors look again at that
 * instant (`nextChangeAtMs`) rather than at their next cycle, so a dead node's shards are
 * taken over within one lease TTL of its last renewal plus one acquire.
 */
import { shardCount } from '../limits.js';
import type { ShardLease } from '../store/store.js';
import type { ClusterMembership, LiveMember } from '../store/membership.js';
import type { ShardPlanner } from './shard-lease-manager.js';

export function clusterPlanner(options: {
  membership: ClusterMembership;
  membershipTtlMs: number;
  totalShards?: number;
}): ShardPlanner {
  const totalShards = options.totalShards ?? shardCount;
  let members: LiveMember[] = [];
  const liveNodes = (nodeId: string, leases: readonly ShardLease[], nowMs: number): string[] => {
    const nodes = new Set<string>([nodeId, ...members.map((member) => member.nodeId)]);
    for (const lease of leases) if (lease.expiresAtMs > nowMs) nodes.add(lease.nodeId);
    return [...nodes].sort();
  };
  const fairShare = (nodeCount: number): number => Math.ceil(totalShards / nodeCount);
  return {
    async refresh(nodeId, nowMs) {
      members = (await options.membership.heartbeat(nodeId, options.membershipTtlMs, nowMs))
        .filter((member) => member.schedules);
    },
    async leave(nodeId) {
      await options.membership.leave(nodeId);
    },
    wantedShards(nodeId, leases, nowMs) {
      const share = fairShare(liveNodes(nodeId, leases, nowMs).length);
      const taken = new Set<number>();
      let mine = 0;
      for (const lease of leases) {
        if (lease.expiresAtMs <= nowMs) continue;
        taken.add(lease.shard);
        if (lease.nodeId === nodeId) mine++;
      }
      const wanted: number[] = [];
      // Start at a node-specific offset so that nodes joining together reach for different shards.
      const offset = hashOffset(nodeId, totalShards);
      for (let index = 0; index < totalShards && mine + wanted.length < share; index++) {
        const shard = (offset + index) % totalShards;
        if (!taken.has(shard)) wanted.push(shard);
      }
      return wanted;
    },
    // Others join and leave at any time: a cluster node always looks.
    isSatisfied: () => false,
    nextChangeAtMs(nodeId, leases, nowMs) {
      // Live nodes push these forward every cycle; a dead node's stay put and come due.
      let nextMs: number | null = null;
      const consider = (atMs: number): void => {
        if (atMs > nowMs && (nextMs === null || atMs < nextMs)) nextMs = atMs;
      };
      for (const member of members) if (member.nodeId !== nodeId) consider(member.expiresAtMs);
      for (const lease of leases) if (lease.nodeId !== nodeId) consider(lease.expiresAtMs);
      return nextMs;
    },
    surplusShards(nodeId, leases, nowMs) {
      const share = fairShare(liveNodes(nodeId, leases, nowMs).length);
      const mine = leases.filter((lease) => lease.nodeId === nodeId && lease.expiresAtMs > nowMs)
        .map((lease) => lease.shard).sort((a, b) => a - b);
      return mine.slice(share);
    },
  };
}

function hashOffset(nodeId: string, modulo: number): number {
  let hash = 0;
  for (let index = 0; index < nodeId.length; index++) hash = (hash * 31 + nodeId.charCodeAt(index)) >>> 0;
  return hash % modulo;
}
