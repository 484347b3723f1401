/**
 * Who is in the cluster. A scheduler node that holds no shard is invisible in the lease
 * table, so fair shares need a separate heartbeat: each node says "alive until T" every lease
 * cycle and reads back every live node. The embedded store has one process per data
 * directory and needs none of this.
 */
export interface ClusterMembership {
  /** Records this node alive for `ttlMs` and answers the ids of every live node (itself included). */
  heartbeat(nodeId: string, ttlMs: number, nowMs: number): Promise<string[]>;
  /** Leaves the cluster at once (graceful shutdown), so the others rebalance without waiting. */
  leave(nodeId: string): Promise<void>;
  close(): Promise<void>;
}
