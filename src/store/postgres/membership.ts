/**
 * Cluster membership on PostgreSQL (the contract: src/store/membership.ts): small tables
 * of nodes and the instant each stops counting as alive, judged by the database's clock so
 * that nodes with skewed clocks agree. It has its own one-connection pool so that a busy store
 * pool never delays the heartbeat that keeps a node's share. Scheduler nodes beat in
 * `scheduler_nodes`; nodes with only the api role in `api_nodes`, a table of its own so that
 * an older scheduler, which counts every row of `scheduler_nodes` for its fair share, never
 * counts them (it would leave shards unowned).
 */
import pg from 'pg';
import type { ClusterMembership } from '../membership.js';
import type { Logger } from '../../obs/log.js';
import { connectionConfig, queryPool, quoteIdentifier, withClient } from './connection.js';

const createTablesSql = [`
  CREATE TABLE IF NOT EXISTS scheduler_nodes (
    node_id text PRIMARY KEY,
    expires_at bigint NOT NULL
  )`, `
  CREATE TABLE IF NOT EXISTS api_nodes (
    node_id text PRIMARY KEY,
    expires_at bigint NOT NULL
  )`];

/** `$1` = use the database clock, `$2` = the caller's nowMs. */
const nowSql = '(CASE WHEN $1::bool THEN (extract(epoch FROM clock_timestamp()) * 1000)::bigint ELSE $2::bigint END)';

/** `schedules`: whether this node takes shards (scheduler role); default true. */
export async function openPostgresMembership(options: {
  url: string; schema?: string; useDatabaseClock: boolean; logger: Logger; schedules?: boolean;
}): Promise<ClusterMembership> {
  const table = (options.schedules ?? true) ? 'scheduler_nodes' : 'api_nodes';
  const schema = options.schema ?? 'public';
  const pool = new pg.Pool({ ...connectionConfig(options.url, schema), max: 1 });
  pool.on('error', (error) => options.logger.warn({ err: error }, 'postgres membership: idle client failed; reconnecting'));
  // Several nodes start together: serialise the CREATE under the same advisory lock key space
  // the store's migrations use a different key of, so concurrent creates cannot collide.
  // withClient keeps an 'error' listener on the client and answers `unavailable` when the
  // database is away (a node starting during a restart retries on that).
  try {
    await withClient(pool, 'openMembership', async (client) => {
      await client.query('BEGIN');
      await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`tickler-membership-${quoteIdentifier(schema)}`]);
      for (const sql of createTablesSql) await client.query(sql);
      await client.query('COMMIT');
    });
  } catch (error) {
    await pool.end();
    throw error;
  }
  return {
    heartbeat: async (nodeId, ttlMs, nowMs) => {
      const result = await queryPool<{ node_id: string; expires_at: number; schedules: boolean }>(pool, 'membershipHeartbeat',
        `WITH beat AS (
           INSERT INTO ${table} (node_id, expires_at) VALUES ($3, ${nowSql} + $4)
           ON CONFLICT (node_id) DO UPDATE SET expires_at = EXCLUDED.expires_at
           RETURNING node_id, expires_at
         ), swept AS (
           DELETE FROM ${table} WHERE expires_at < ${nowSql} - 3600000
         )
         SELECT node_id, expires_at, true AS schedules FROM scheduler_nodes
          WHERE expires_at > ${nowSql} AND NOT (node_id = $3 AND $5::bool)
         UNION ALL
         SELECT node_id, expires_at, false FROM api_nodes WHERE expires_at > ${nowSql} AND NOT (node_id = $3 AND NOT $5::bool)
         UNION ALL SELECT node_id, expires_at, $5::bool FROM beat`,
        [options.useDatabaseClock, nowMs, nodeId, ttlMs, table === 'scheduler_nodes']);
      return result.rows.map((row) => ({ nodeId: row.node_id, expiresAtMs: Number(row.expires_at), schedules: row.schedules }))
        .sort((left, right) => (left.nodeId < right.nodeId ? -1 : left.nodeId > right.nodeId ? 1 : 0));
    },
    leave: async (nodeId) => {
      await queryPool(pool, 'membershipLeave', `DELETE FROM ${table} WHERE node_id = $1`, [nodeId]);
    },
    close: () => pool.end(),
  };
}
