/**
 * What it costs to hand the store's work to a thread of its own (a store thread was built,
 * measured slower and not kept: docs/benchmarks.md, "Tried and did not help"): a batch of N
 * completion items posted to a worker_threads Worker, which answers one brief result per item,
 * as a store thread would. Prints the round trip with one batch in flight and the main thread's
 * CPU per item (the part the HTTP thread would still pay), so the idea can be judged against the
 * server's CPU per run on bench:peers W3.
 *
 *   node --import tsx bench/probes/thread-hop-cost.ts [--batch 100] [--rounds 20000]
 */
import { parseArgs } from 'node:util';
import { Worker } from 'node:worker_threads';
import { performance } from 'node:perf_hooks';

const { values: options } = parseArgs({
  options: { batch: { type: 'string', default: '100' }, rounds: { type: 'string', default: '20000' } },
});
const batchSize = Number(options.batch);
const rounds = Number(options.rounds);

const thread = new Worker(`
  const { parentPort } = require('node:worker_threads');
  parentPort.on('message', (items) => parentPort.postMessage(items.map(() => ({ status: 200 }))));
`, { eval: true });

const items = Array.from({ length: batchSize }, (_, index) => ({
  run_id: index.toString(16).padStart(32, '0'), fencing_token: String(4_294_967_296 + index), status: 'succeeded',
  error: null, result: null,
}));

function roundTrip(): Promise<unknown> {
  return new Promise((resolve) => {
    thread.once('message', resolve);
    thread.postMessage(items);
  });
}

for (let warm = 0; warm < 2_000; warm++) await roundTrip();
const loopBefore = performance.eventLoopUtilization();
const startedMs = performance.now();
for (let round = 0; round < rounds; round++) await roundTrip();
const elapsedMs = performance.now() - startedMs;
const loop = performance.eventLoopUtilization(loopBefore);
const busyMs = loop.active;
console.log(`batch ${batchSize}, ${rounds} round trips, one in flight: ${((elapsedMs * 1_000) / rounds).toFixed(1)} µs each; ` +
  `main thread busy ${((busyMs * 1_000) / rounds).toFixed(1)} µs per batch, ${((busyMs * 1_000) / (rounds * batchSize)).toFixed(2)} µs per item`);
await thread.terminate();
