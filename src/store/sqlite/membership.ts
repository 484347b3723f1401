/**
 * Cluster membership on the embedded store (the contract: src/store/membership.ts). One
 * process per data directory, enforced by the data-directory lock, so every member is a node
 * of this process: the members live in this store object's memory, each until its heartbeat's
 * expiry by the caller's clock. Nothing is written: after a restart no earlier member can be
 * alive (the lock proved the process that held it gone), which is what an empty table says.
 */
import type { ClusterMembership, LiveMember, MembershipOptions } from '../membership.js';

export class LocalMembers {
  /** Live or lapsed members by node id; a lapsed one is dropped at the next heartbeat. */
  private readonly members = new Map<string, LiveMember>();

  open(options: MembershipOptions): ClusterMembership {
    let closed = false;
    const assertOpen = (): void => {
      if (closed) throw new Error('the membership is closed');
    };
    return {
      heartbeat: async (nodeId, ttlMs, nowMs) => {
        assertOpen();
        this.members.set(nodeId, { nodeId, expiresAtMs: nowMs + ttlMs, schedules: options.schedules });
        return this.liveAt(nowMs);
      },
      leave: async (nodeId) => {
        assertOpen();
        const member = this.members.get(nodeId);
        if (member !== undefined && member.schedules === options.schedules) this.members.delete(nodeId);
      },
      close: async () => {
        closed = true;
      },
    };
  }

  private liveAt(nowMs: number): LiveMember[] {
    const live: LiveMember[] = [];
    for (const [nodeId, member] of this.members) {
      if (member.expiresAtMs > nowMs) live.push(member);
      else this.members.delete(nodeId);
    }
    return live.sort((left, right) => (left.nodeId < right.nodeId ? -1 : left.nodeId > right.nodeId ? 1 : 0));
  }
}
