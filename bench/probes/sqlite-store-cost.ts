/**
 * What one run costs the embedded SQLite store, phase by phase, through the Store API alone
 * (no HTTP, no scheduler): create N one-shot jobs, dispatch their timers, lease the runs,
 * complete them (store-cost-phases.ts). For each phase: wall time, CPU of this process and
 * the WAL's growth, per run. The sibling of pg-store-cost.ts; HTTP and the worker are
 * bench:peers' W3.
 *
 *   node --import tsx bench/probes/sqlite-store-cost.ts [--runs 50000] [--lease-max 100]
 *     [--dispatch-batch 500] [--complete-batch 100] [--payload-pad 0] [--store-root DIR]
 *     [--create-batch 1000] [--create-in-flight 4] [--only-create]
 *
 * `--create-batch 64 --create-in-flight 1 --only-create` is the shape of bench:peers W1 one at a
 * time through the coalescing client: one create call of 64 jobs per transaction, one at a time.
 *
 * `--store-root` loads src/store/sqlite from another tree (a `git archive` of an older commit)
 * for an A/B on the same machine; run the two alternately.
 */
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import type { SqliteStore, SqliteStoreOptions } from '../../src/store/sqlite/sqlite-store.js';
import { runStoreCostPhases } from './store-cost-phases.js';

const { values: options } = parseArgs({
  options: {
    runs: { type: 'string', default: '50000' },
    'lease-max': { type: 'string', default: '100' },
    'dispatch-batch': { type: 'string', default: '500' },
    'payload-pad': { type: 'string', default: '0' },
    'complete-batch': { type: 'string', default: '100' },
    'create-batch': { type: 'string', default: '1000' },
    'create-in-flight': { type: 'string', default: '4' },
    'only-create': { type: 'boolean', default: false },
    'store-root': { type: 'string', default: resolve(import.meta.dirname, '../..') },
  },
});
const runCount = Number(options.runs);
const dir = mkdtempSync(join(tmpdir(), 'sqlite-store-cost-'));
const path = join(dir, 'tickler.db');
const storeModule = (await import(resolve(options['store-root'], 'src/store/sqlite/index.ts'))) as
  { openSqliteStore: (options: SqliteStoreOptions) => Promise<SqliteStore> };
// No background checkpoint within the run, so the WAL's growth counts the frames written
// (until the fallback autocheckpoint at 100,000 pages, which a run of 50,000 stays under).
const store = await storeModule.openSqliteStore({ path, checkpointIntervalMs: 3_600_000 });

let walBytesSeen = 0;
let walSizeLast = 0;
/** Adds the WAL's growth since the last look; a restarted WAL counts from zero. */
function sampleWal(): void {
  let size = 0;
  try {
    size = statSync(`${path}-wal`).size;
  } catch {
    size = 0;
  }
  walBytesSeen += size >= walSizeLast ? size - walSizeLast : size;
  walSizeLast = size;
}
const sampler = setInterval(sampleWal, 5);

async function phase(name: string, body: () => Promise<void>): Promise<void> {
  sampleWal();
  const walBefore = walBytesSeen;
  const cpuBefore = process.cpuUsage();
  const startedMs = performance.now();
  await body();
  const wallMs = performance.now() - startedMs;
  const cpu = process.cpuUsage(cpuBefore);
  sampleWal();
  const perRun = (value: number): string => (value / runCount).toFixed(1);
  console.log(`${name.padEnd(9)} ${(wallMs / 1_000).toFixed(2)} s, ${Math.round((runCount * 1_000) / wallMs)} runs/s; per run: `
    + `${perRun(wallMs * 1_000)} us wall, ${perRun(cpu.user + cpu.system)} us CPU, WAL ${perRun(walBytesSeen - walBefore)} B`);
}

try {
  console.log(`${runCount} runs; lease max ${options['lease-max']}, dispatch batch ${options['dispatch-batch']}, `
    + `completions ${options['complete-batch']} at a time; store from ${options['store-root']}; `
    + `load average ${readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')}`);
  await runStoreCostPhases(store, {
    payloadPadBytes: Number(options['payload-pad']),
    runs: runCount, createBatch: Number(options['create-batch']), createInFlight: Number(options['create-in-flight']),
    onlyCreate: options['only-create'], dispatchBatch: Number(options['dispatch-batch']),
    leaseMax: Number(options['lease-max']), leasers: 1,
    completeBatch: Number(options['complete-batch']), completeInFlight: 2,
  }, phase);
} finally {
  clearInterval(sampler);
  await store.close();
  rmSync(dir, { recursive: true, force: true });
}
