/**
 * What one create request costs the server by its size: `POST /v1/jobs:batch` requests of
 * 1, 8, 64, 256 ... one-shot jobs due in an hour (answered with ids), sent one at a time, so
 * each request is a whole round trip with nothing beside it (the shape of W1 one at a time
 * through the SDK's coalescer, 64 callers, is one request of 64 at a time). Prints the server's
 * CPU per request and per create, the wall time per request, and the CPU per request of each of
 * the server's threads, from /proc: the main thread (the first listed) and the rest (V8's
 * threads, libuv's pool, the checkpoint thread: all named `node`, so which is which does not
 * show). The sizes run twice, in order; the second pass is printed.
 *
 * The fixed part of a request (its cost at size 1) is what splitting W1's 64 callers into
 * more requests in flight would pay again per request.
 *
 *   node --import tsx bench/probes/create-request-cost.ts [--store sqlite|postgres] [--sizes 1,8,64,256]
 *     [--creates 40000] [--cpu-prof-dir DIR]
 */
import { parseArgs } from 'node:util';
import { TicklerClient } from '../peers/systems/tickler-sdk.js';
import { processCpuMs, threadCpuMs } from '../proc-cpu.js';
import { startStoreServer } from './store-server.js';

const { values: options } = parseArgs({
  options: {
    store: { type: 'string', default: 'sqlite' },
    sizes: { type: 'string', default: '1,8,64,256' },
    creates: { type: 'string', default: '40000' },
    'cpu-prof-dir': { type: 'string' },
  },
});
const sizes = options.sizes.split(',').map(Number);
if (sizes.some((size) => !(Number.isInteger(size) && size >= 1 && size <= 1_000))) throw new Error('--sizes are 1 to 1000');
const opened = await startStoreServer(options.store, 'create-request-cost', { cpuProfileDir: options['cpu-prof-dir'] });
const { server } = opened;
try {
  const client = new TicklerClient({ baseUrl: server.url, requestTimeoutMs: 600_000 });
  const dueAtMs = Date.now() + 3_600_000;
  const jobOf = (index: number) => ({ schedule: { at: new Date(dueAtMs).toISOString() }, pool: 'p', payload: { i: index, due: dueAtMs } });
  for (const pass of [1, 2]) {
    for (const size of sizes) {
      const requests = Math.max(20, Math.round(Number(options.creates) / size));
      const threadsBefore = threadCpuMs(server.pid);
      const cpuBeforeMs = processCpuMs(server.pid);
      const startedMs = performance.now();
      for (let request = 0; request < requests; request++) {
        const { results } = await client.batchCreateJobIds(Array.from({ length: size }, (_, offset) => jobOf(offset)));
        if (results.some((result) => !('job_id' in result))) throw new Error('a batch item failed');
      }
      const wallMs = performance.now() - startedMs;
      if (pass === 1) continue;
      const cpuUs = (processCpuMs(server.pid) - cpuBeforeMs) * 1_000;
      const threads = [...threadCpuMs(server.pid)]
        .map(([thread, ms]) => [thread, ((ms - (threadsBefore.get(thread) ?? 0)) * 1_000) / requests] as const)
        .filter(([, us]) => us >= 1)
        .map(([thread, us]) => `${thread} ${us.toFixed(0)}`);
      console.log(`${options.store}, requests of ${size}: server ${(cpuUs / requests).toFixed(0)} us CPU per request ` +
        `(${(cpuUs / requests / size).toFixed(1)} per create), ${((wallMs * 1_000) / requests).toFixed(0)} us wall per request; ` +
        `by thread: ${threads.join(', ')}`);
    }
  }
} finally {
  await opened.close();
}
