/**
 * Shard ownership in the embedded store (DESIGN.md flow 3). Every grant takes a new token
 * from the token sequence, so tokens only grow across grants, nodes and restarts; the
 * dispatch fence compares against the token in this table, which a release keeps.
 */
import type Database from 'better-sqlite3';
import type { ShardLease } from '../store.js';
import { parseDecimalId, shardLeaseFromRow, type ShardLeaseRow } from './rows.js';
import type { TokenSequence } from './tables.js';
import { atomically } from './atomically.js';

export class ShardLeaseTable {
  private readonly selectLease: Database.Statement<[number], ShardLeaseRow>;
  private readonly upsertLease: Database.Statement<[number, string, number, number]>;
  private readonly extendNodeLeases: Database.Statement<[number, string], { shard: number; token: number }>;
  private readonly expireLease: Database.Statement<[number, string, number]>;
  private readonly selectHeld: Database.Statement<[], ShardLeaseRow>;

  constructor(private readonly db: Database.Database, private readonly tokens: TokenSequence) {
    this.selectLease = db.prepare('SELECT * FROM shard_leases WHERE shard = ?');
    this.upsertLease = db.prepare(`
      INSERT INTO shard_leases (shard, node_id, token, expires_at) VALUES (?, ?, ?, ?)
      ON CONFLICT (shard) DO UPDATE SET node_id = excluded.node_id, token = excluded.token,
        expires_at = excluded.expires_at`);
    // One statement for all of a node's leases: a node renews up to 1,024 of them every few
    // seconds, and a statement per row cost ~1 ms per cycle (measured under the virtual clock).
    this.extendNodeLeases = db.prepare(
      'UPDATE shard_leases SET expires_at = ? WHERE node_id = ? AND expires_at > 0 RETURNING shard, token');
    // Released, not deleted: the token stays as the shard's fence.
    this.expireLease = db.prepare('UPDATE shard_leases SET expires_at = 0 WHERE shard = ? AND node_id = ? AND token = ?');
    this.selectHeld = db.prepare('SELECT * FROM shard_leases WHERE expires_at > 0 ORDER BY shard');
  }

  acquire(nodeId: string, shards: readonly number[], ttlMs: number, nowMs: number, force: boolean): ShardLease[] {
    const apply = (): ShardLease[] => {
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
    };
    return atomically(this.db, apply);
  }

  renew(nodeId: string, leases: readonly ShardLease[], ttlMs: number, nowMs: number): ShardLease[] {
    const held = new Map(leases.map((lease) => [lease.shard, lease.token]));
    const apply = (): ShardLease[] => {
      const renewed: ShardLease[] = [];
      // Rows still under this node's id; a row whose token is not the one the caller holds was
      // re-granted to this node since, and is not reported as renewed for the old token.
      for (const row of this.extendNodeLeases.all(nowMs + ttlMs, nodeId)) {
        const token = held.get(row.shard);
        if (token !== undefined && token === String(row.token)) {
          renewed.push({ shard: row.shard, nodeId, token, expiresAtMs: nowMs + ttlMs });
        }
      }
      return renewed;
    };
    return atomically(this.db, apply);
  }

  release(nodeId: string, leases: readonly ShardLease[]): void {
    const apply = () => {
      for (const lease of leases) {
        const token = parseDecimalId(lease.token);
        if (token !== null) this.expireLease.run(lease.shard, nodeId, token);
      }
    };
    atomically(this.db, apply);
  }

  /** Leases not released (some may have expired by now: the caller judges with its clock). */
  list(): ShardLease[] {
    return this.selectHeld.all().map(shardLeaseFromRow);
  }
}
