/**
 * Shard ownership in the embedded store (DESIGN.md flow 3). Every grant takes a new token
 * from the token sequence, so tokens only grow across grants, nodes and restarts; the
 * dispatch fence compares against the token in this table, which a release keeps.
 */
import type Database from 'better-sqlite3';
import type { ShardLease } from '../store.js';
import { parseDecimalId, shardLeaseFromRow, type ShardLeaseRow } from './rows.js';
import type { TokenSequence } from './tables.js';

export class ShardLeaseTable {
  private readonly selectLease: Database.Statement<[number], ShardLeaseRow>;
  private readonly upsertLease: Database.Statement<[number, string, number, number]>;
  private readonly extendLease: Database.Statement<[number, number, string, number]>;
  private readonly expireLease: Database.Statement<[number, string, number]>;
  private readonly selectHeld: Database.Statement<[], ShardLeaseRow>;

  constructor(private readonly db: Database.Database, private readonly tokens: TokenSequence) {
    this.selectLease = db.prepare('SELECT * FROM shard_leases WHERE shard = ?');
    this.upsertLease = db.prepare(`
      INSERT INTO shard_leases (shard, node_id, token, expires_at) VALUES (?, ?, ?, ?)
      ON CONFLICT (shard) DO UPDATE SET node_id = excluded.node_id, token = excluded.token,
        expires_at = excluded.expires_at`);
    this.extendLease = db.prepare(
      'UPDATE shard_leases SET expires_at = ? WHERE shard = ? AND node_id = ? AND token = ?');
    // Released, not deleted: the token stays as the shard's fence.
    this.expireLease = db.prepare('UPDATE shard_leases SET expires_at = 0 WHERE shard = ? AND node_id = ? AND token = ?');
    this.selectHeld = db.prepare('SELECT * FROM shard_leases WHERE expires_at > 0 ORDER BY shard');
  }

  acquire(nodeId: string, shards: readonly number[], ttlMs: number, nowMs: number, force: boolean): ShardLease[] {
    const apply = this.db.transaction((): ShardLease[] => {
      const granted: ShardLease[] = [];
      for (const shard of new Set(shards)) {
        const current = this.selectLease.get(shard);
        const free = current === undefined || current.expires_at <= nowMs || current.node_id === nodeId;
        if (!free && !force) continue;
        const token = this.tokens.reserve(1);
        this.upsertLease.run(shard, nodeId, token, nowMs + ttlMs);
        granted.push({ shard, nodeId, token: String(token), expiresAtMs: nowMs + ttlMs });
      }
      return granted;
    });
    return apply.immediate();
  }

  renew(nodeId: string, leases: readonly ShardLease[], ttlMs: number, nowMs: number): ShardLease[] {
    const apply = this.db.transaction((): ShardLease[] => {
      const renewed: ShardLease[] = [];
      for (const lease of leases) {
        const token = parseDecimalId(lease.token);
        if (token === null) continue;
        const info = this.extendLease.run(nowMs + ttlMs, lease.shard, nodeId, token);
        if (info.changes === 1) renewed.push({ shard: lease.shard, nodeId, token: lease.token, expiresAtMs: nowMs + ttlMs });
      }
      return renewed;
    });
    return apply.immediate();
  }

  release(nodeId: string, leases: readonly ShardLease[]): void {
    const apply = this.db.transaction(() => {
      for (const lease of leases) {
        const token = parseDecimalId(lease.token);
        if (token !== null) this.expireLease.run(lease.shard, nodeId, token);
      }
    });
    apply.immediate();
  }

  /** Leases not released (some may have expired by now: the caller judges with its clock). */
  list(): ShardLease[] {
    return this.selectHeld.all().map(shardLeaseFromRow);
  }
}
