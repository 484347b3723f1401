/**
 * Many workers on one pool: `--runs` jobs due now are created with no worker running, then
 * `--workers` SDK workers (each its own client, worker id and lease requests, as separate
 * worker processes would be; `--concurrency` slots each, no-op handler) drain the pool. Prints
 * the runs handled a second (first handler start to last) and the CPU per run, leases and
 * completions, of the server, of PostgreSQL (all its processes, from /proc, so PostgreSQL must
 * run here) and of this process, which runs the workers.
 *
 *   node --import tsx bench/probes/many-workers.ts [--store postgres|sqlite] [--workers 8]
 *     [--concurrency 10] [--runs 50000] [--cpu-prof-dir DIR]
 *
 * `TICKLER_BENCH_CLI=/other/tree/bin/tickler.js` runs another tree's server (built) for an A/B;
 * run the two alternately, as the load of a shared machine moves every figure.
 */
import { parseArgs } from 'node:util';
import { createWorker, TicklerClient } from '../peers/systems/tickler-sdk.js';
import { postgresCpuMs, processCpuMs } from '../proc-cpu.js';
import { startStoreServer } from './store-server.js';

const { values: options } = parseArgs({
  options: {
    store: { type: 'string', default: 'postgres' },
    workers: { type: 'string', default: '8' },
    concurrency: { type: 'string', default: '10' },
    runs: { type: 'string', default: '50000' },
    'cpu-prof-dir': { type: 'string' },
  },
});
const workerCount = Number(options.workers);
const concurrency = Number(options.concurrency);
const runCount = Number(options.runs);
const batchSize = 1_000;
const pool = 'many';

const opened = await startStoreServer(options.store, 'many-workers',
  { cpuProfileDir: options['cpu-prof-dir'] });
const { server, database } = opened;

try {
  const creator = new TicklerClient({ baseUrl: server.url, requestTimeoutMs: 600_000 });
  const dueAt = new Date().toISOString();
  for (let first = 0; first < runCount; first += batchSize) {
    const count = Math.min(batchSize, runCount - first);
    const { results } = await creator.batchCreateJobIds(Array.from({ length: count }, () => ({ schedule: { at: dueAt }, pool })));
    if (results.some((result) => !('job_id' in result))) throw new Error('a batch item failed');
  }
  let handled = 0;
  let firstStartMs = 0;
  let lastStartMs = 0;
  let allHandled: () => void = () => undefined;
  const done = new Promise<void>((resolve) => {
    allHandled = resolve;
  });
  const serverBeforeMs = processCpuMs(server.pid);
  const postgresBeforeMs = database === undefined ? 0 : postgresCpuMs();
  const clientBefore = process.cpuUsage();
  const workers = Array.from({ length: workerCount }, (_, index) => createWorker({
    client: new TicklerClient({ baseUrl: server.url, requestTimeoutMs: 600_000 }),
    pool,
    workerId: `many-${index}`,
    concurrency,
    prefetch: concurrency,
    handler: () => {
      lastStartMs = performance.now();
      if (handled === 0) firstStartMs = lastStartMs;
      handled += 1;
      if (handled === runCount) allHandled();
    },
  }));
  for (const worker of workers) worker.start();
  await done;
  // Stopping flushes the last completions: the CPU figures cover each run's lease and completion.
  await Promise.all(workers.map((worker) => worker.stop({ timeoutMs: 10_000 })));
  const serverMs = processCpuMs(server.pid) - serverBeforeMs;
  const postgresMs = database === undefined ? 0 : postgresCpuMs() - postgresBeforeMs;
  const clientUs = process.cpuUsage(clientBefore);
  const perRunUs = (cpuMs: number): string => ((cpuMs * 1_000) / runCount).toFixed(1);
  console.log(`${options.store}, ${workerCount} workers x ${concurrency} slots: ` +
    `${Math.round(((runCount - 1) * 1_000) / (lastStartMs - firstStartMs))} handled/s; CPU per run: ` +
    `server ${perRunUs(serverMs)} us` + (database === undefined ? '' : `, postgres ${perRunUs(postgresMs)} us`) +
    `, workers ${((clientUs.user + clientUs.system) / runCount).toFixed(1)} us (leases and completions)`);
} finally {
  await opened.close();
}
