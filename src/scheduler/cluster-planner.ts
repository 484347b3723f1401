/**
 * Fair shares of the 1,024 shards when several scheduler nodes share PostgreSQL. A node
 * sees the others through their live shard leases; each wants `ceil(shards / nodes)` and
 * hands back what it holds above that, so a joining node finds free shards on its next
 * cycle and a leaving node's shards are taken once its leases expire.
 */
import { shardCount } from '../limits.js';
import type { ShardLease } from '../store/store.js';
import type { ShardPlanner } from './shard-lease-manager.js';

export function clusterPlanner(totalShards: number = shardCount): ShardPlanner {
  const liveNodes = (nodeId: string, leases: readonly ShardLease[], nowMs: number): string[] => {
    const nodes = new Set<string>([nodeId]);
    for (const lease of leases) if (lease.expiresAtMs > nowMs) nodes.add(lease.nodeId);
    return [...nodes].sort();
  };
  const fairShare = (nodeCount: number): number => Math.ceil(totalShards / nodeCount);
  return {
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
