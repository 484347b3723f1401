/**
 * Where a create's CPU goes on this machine: the `tickler serve` process, PostgreSQL's
 * processes (all of them, from /proc, so PostgreSQL must run here) and this client, per
 * create, with the rate. Two shapes, as bench:peers W1 drives them:
 *   - `batch`: POST /v1/jobs:batch of 1,000 one-shot jobs answered with ids, from `--lanes`
 *     concurrent lanes (W1 batches uses 2);
 *   - `coalesced`: 64 callers calling the SDK's `createJobId` through a TicklerClient with
 *     `coalesceCreates` (W1 one at a time, coalesced);
 *   - `single`: the same 64 callers without `coalesceCreates`, a POST /v1/jobs each (W1 plain).
 * Jobs are due in an hour, so nothing fires. A warm-up of `--warmup` creates comes first.
 *
 *   node --import tsx bench/probes/create-cpu-split.ts [--store sqlite|postgres] [--mode batch|coalesced|single]
 *     [--creates 100000] [--warmup 20000] [--lanes 2] [--clients 1] [--cpu-prof-dir DIR]
 *
 * `TICKLER_BENCH_CLI=/other/tree/bin/tickler.js` runs another tree's server (built) for an A/B;
 * run the two alternately, as the load of a shared machine moves every figure.
 */
import { parseArgs } from 'node:util';
import { TicklerClient } from '../peers/systems/tickler-sdk.js';
import { postgresCpuMs, processCpuMs } from '../proc-cpu.js';
import { startStoreServer } from './store-server.js';

const { values: options } = parseArgs({
  options: {
    store: { type: 'string', default: 'sqlite' },
    mode: { type: 'string', default: 'batch' },
    creates: { type: 'string', default: '100000' },
    warmup: { type: 'string', default: '20000' },
    lanes: { type: 'string', default: '2' },
    clients: { type: 'string', default: '1' },
    'cpu-prof-dir': { type: 'string' },
  },
});
if (!['batch', 'coalesced', 'single'].includes(options.mode)) throw new Error('--mode is batch, coalesced or single');
const batchSize = 1_000;
const callers = 64;

const opened = await startStoreServer(options.store, 'create-cpu-split',
  { cpuProfileDir: options['cpu-prof-dir'] });
const { server, database } = opened;
// `--clients N` splits the callers among N clients (each coalesces its own: N requests in flight).
const clients = Array.from({ length: Number(options.clients) },
  () => new TicklerClient({ baseUrl: server.url, requestTimeoutMs: 600_000, coalesceCreates: options.mode === 'coalesced' }));
const client = clients[0]!;
const dueAtMs = Date.now() + 3_600_000;
const jobOf = (index: number) => ({ schedule: { at: new Date(dueAtMs).toISOString() }, pool: 'p', payload: { i: index, due: dueAtMs } });

/** Creates `count` jobs in the chosen shape; answers creates per second. */
async function create(count: number): Promise<number> {
  let next = 0;
  const batchLane = async (): Promise<void> => {
    while (next < count) {
      const first = next;
      next = Math.min(count, first + batchSize);
      const { results } = await client.batchCreateJobIds(Array.from({ length: next - first }, (_, offset) => jobOf(first + offset)));
      if (results.some((result) => !('job_id' in result))) throw new Error('a batch item failed');
    }
  };
  const caller = async (callerIndex: number): Promise<void> => {
    const own = clients[callerIndex % clients.length]!;
    while (next < count) await own.createJobId(jobOf(next++));
  };
  const startedMs = performance.now();
  if (options.mode === 'batch') await Promise.all(Array.from({ length: Number(options.lanes) }, batchLane));
  else await Promise.all(Array.from({ length: callers }, (_, callerIndex) => caller(callerIndex)));
  return count / ((performance.now() - startedMs) / 1_000);
}

try {
  await create(Number(options.warmup));
  const creates = Number(options.creates);
  const serverBeforeMs = processCpuMs(server.pid);
  const postgresBeforeMs = database === undefined ? 0 : postgresCpuMs();
  const clientBefore = process.cpuUsage();
  const rate = await create(creates);
  const clientUs = process.cpuUsage(clientBefore);
  const perCreateUs = (cpuMs: number): string => ((cpuMs * 1_000) / creates).toFixed(1);
  console.log(`${options.store} ${options.mode}${options.mode === 'batch' ? ` (${options.lanes} lanes of ${batchSize})` : ` (${callers} callers, ${clients.length} client${clients.length === 1 ? '' : 's'})`}: ` +
    `${Math.round(rate)} creates/s; CPU per create: server ${perCreateUs(processCpuMs(server.pid) - serverBeforeMs)} us` +
    (database === undefined ? '' : `, postgres ${perCreateUs(postgresCpuMs() - postgresBeforeMs)} us`) +
    `, this client ${((clientUs.user + clientUs.system) / creates).toFixed(1)} us`);
} finally {
  await opened.close();
}
