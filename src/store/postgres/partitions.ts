/**
 * Daily range partitions of `timers` on `fire_at` (DESIGN.md "Storage"). A cancel deletes its
 * timer row; the dead tuple leaves with its partition, which is dropped once its day has
 * passed and it is empty (an overdue timer keeps it alive until fired). Partitions are
 * created a few days ahead; the default partition catches far-future and unpartitioned past
 * timers, and rows of a day are moved out of it when that day's partition is created.
 *
 * `maintainPartitions` is safe to call from every node at once: it runs under an advisory
 * lock and takes the parent's SHARE ROW EXCLUSIVE lock so no insert can land in the default
 * partition between the move and the ATTACH (which would make the ATTACH fail). The stall it
 * causes is a few milliseconds once a day per partition created.
 */
import type pg from 'pg';

export const partitionDurationMs = 86_400_000;
/** Days of partitions kept ahead of now; timers further out wait in the default partition. */
export const partitionDaysAhead = 3;
/** A fixed advisory-lock key: "tickler partitions". */
const partitionLockKey = 0x74706172;

export interface PartitionReport {
  created: string[];
  dropped: string[];
}

interface DayPartition {
  name: string;
  startMs: number;
  endMs: number;
}

function dayPartition(dayIndex: number): DayPartition {
  const startMs = dayIndex * partitionDurationMs;
  const date = new Date(startMs).toISOString().slice(0, 10).replaceAll('-', '');
  return { name: `timers_${date}`, startMs, endMs: startMs + partitionDurationMs };
}

const partitionNamePattern = /^timers_(\d{4})(\d{2})(\d{2})$/;

function parsePartition(name: string): DayPartition | null {
  const match = partitionNamePattern.exec(name);
  if (match === null) return null;
  const startMs = Date.UTC(Number(match[1]), Number(match[2]) - 1, Number(match[3]));
  return dayPartition(Math.floor(startMs / partitionDurationMs));
}

export async function maintainPartitions(client: pg.ClientBase, nowMs: number,
  daysAhead = partitionDaysAhead): Promise<PartitionReport> {
  const report: PartitionReport = { created: [], dropped: [] };
  const todayIndex = Math.floor(nowMs / partitionDurationMs);
  await client.query('BEGIN');
  try {
    await client.query('SELECT pg_advisory_xact_lock($1)', [partitionLockKey]);
    const existing = await client.query<{ name: string }>(
      `SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'timers'::regclass`);
    const existingNames = new Set(existing.rows.map((row) => row.name));
    const wanted: DayPartition[] = [];
    for (let day = todayIndex; day <= todayIndex + daysAhead; day++) {
      const partition = dayPartition(day);
      if (!existingNames.has(partition.name)) wanted.push(partition);
    }
    const expired = [...existingNames]
      .map(parsePartition)
      .filter((partition): partition is DayPartition => partition !== null && partition.endMs <= todayIndex * partitionDurationMs);
    if (wanted.length > 0 || expired.length > 0) {
      await client.query('LOCK TABLE timers IN SHARE ROW EXCLUSIVE MODE');
    }
    for (const partition of wanted) {
      await createPartition(client, partition);
      report.created.push(partition.name);
    }
    for (const partition of expired) {
      if (await dropIfEmpty(client, partition)) report.dropped.push(partition.name);
    }
    await client.query('COMMIT');
    return report;
  } catch (error) {
    await client.query('ROLLBACK').catch((rollbackError: unknown) => {
      throw new Error('partition maintenance failed and so did its rollback', { cause: [error, rollbackError] });
    });
    throw error;
  }
}

async function createPartition(client: pg.ClientBase, partition: DayPartition): Promise<void> {
  // Names are generated from dates only (timers_YYYYMMDD), so they are safe to interpolate.
  await client.query(`CREATE TABLE ${partition.name} (LIKE timers INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`);
  await client.query(
    `WITH moved AS (DELETE FROM timers_default WHERE fire_at >= $1 AND fire_at < $2 RETURNING *)
     INSERT INTO ${partition.name} SELECT * FROM moved`, [partition.startMs, partition.endMs]);
  await client.query(
    `ALTER TABLE timers ATTACH PARTITION ${partition.name} FOR VALUES FROM (${partition.startMs}) TO (${partition.endMs})`);
}

async function dropIfEmpty(client: pg.ClientBase, partition: DayPartition): Promise<boolean> {
  const rows = await client.query(`SELECT 1 FROM ${partition.name} LIMIT 1`);
  if (rows.rowCount !== 0) return false;
  await client.query(`DROP TABLE ${partition.name}`);
  return true;
}

/** The partitions of `timers`, for tests and operators. */
export async function listPartitions(client: pg.ClientBase): Promise<{ name: string; isDefault: boolean }[]> {
  const result = await client.query<{ name: string; bound: string }>(
    `SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound
       FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = 'timers'::regclass ORDER BY c.relname`);
  return result.rows.map((row) => ({ name: row.name, isDefault: row.bound === 'DEFAULT' }));
}
