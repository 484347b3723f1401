/**
 * When a herd's runs are written and leased, against its due instant, on PostgreSQL: run it
 * beside `bench:peers` W4 on tickler-postgres, and it follows the newest `peers_tickler_*`
 * database (the harness makes one per run) until the herd is written and leased, printing
 * every second how many runs exist and how many have left `ready`, counted from the due
 * instant (the runs' `ready_at`; negative is before it).
 *
 *   node --import tsx bench/probes/herd-written.ts [--count 50000] [--timeout-s 120] &
 *   npx tsx bench/peers/run.ts --workload W4 --system tickler-postgres --results /tmp/w4.json --docs-dir /tmp/docs
 *
 * It polls with one connection every 250 ms (a count over the runs table): a small load of its
 * own beside the run it watches.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { postgresBaseUrl } from '../peers/services.js';

const { values: options } = parseArgs({
  options: { count: { type: 'string', default: '50000' }, 'timeout-s': { type: 'string', default: '120' } },
});
const count = Number(options.count);
const deadlineMs = Date.now() + Number(options['timeout-s']) * 1_000;

const admin = new pg.Client({ connectionString: `${postgresBaseUrl}/postgres` });
await admin.connect();
let watched: pg.Client | null = null;
let lastPrintedS = Number.NEGATIVE_INFINITY;
let dropped = false;
let dueMs: number | undefined;
try {
  while (Date.now() < deadlineMs && !dropped) {
    if (watched === null) {
      const newest = await admin.query<{ datname: string }>(
        "SELECT datname FROM pg_database WHERE datname LIKE 'peers_tickler%' ORDER BY oid DESC LIMIT 1");
      if (newest.rows.length > 0) {
        watched = new pg.Client({ connectionString: `${postgresBaseUrl}/${newest.rows[0]!.datname}` });
        // The harness drops the database (WITH FORCE) when its run ends.
        watched.on('error', () => {
          dropped = true;
        });
        await watched.connect();
      }
    } else {
      const reading = await watched.query<{ written: number; left_ready: number; due: string | null }>(
        `SELECT count(*)::int AS written, count(*) FILTER (WHERE status <> 'ready')::int AS left_ready,
                max(ready_at)::text AS due FROM runs`).catch((error: unknown) => {
          if (!/does not exist/.test(String(error))) console.log(`reading failed: ${String(error)}`); // not migrated yet: quiet
          return null;
        });
      const row = reading?.rows[0];
      // A leased run's ready_at is cleared: the instant is kept from the first reading that has it.
      if (row?.due !== null && row?.due !== undefined) dueMs ??= Number(row.due);
      if (row !== undefined && dueMs !== undefined) {
        const fromDueS = (Date.now() - dueMs) / 1_000;
        const done = row.written >= count && row.left_ready >= count;
        // Every second, and every reading once leases start (they take a few seconds).
        if (fromDueS - lastPrintedS >= 1 || row.left_ready > 0 || done) {
          console.log(`${fromDueS.toFixed(2)} s from the due instant: ${row.written} runs written, ${row.left_ready} leased or done`);
          lastPrintedS = fromDueS;
        }
        if (done) break;
      }
    }
    await sleep(250);
  }
  if (dropped) console.log('the database was dropped: the run ended');
} finally {
  if (!dropped) await watched?.end();
  await admin.end();
}
