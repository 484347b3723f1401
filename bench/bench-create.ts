/**
 * Create throughput (issue 2): one-shot timers due next week, so nothing fires during the
 * measurement. Two shapes, each on a fresh server:
 *   - `POST /v1/jobs:batch` of 1,000 items, on one connection and on four;
 *   - single `POST /v1/jobs` from 64 concurrent keep-alive clients (autocannon), which only
 *     reaches its target if the server group-commits concurrent requests.
 */
import autocannon from 'autocannon';
import type { BenchContext, Benchmark } from './context.js';
import { createInBatches, isoOf, nextWeekFireAtMs, oneShotAt, wallClock, weekMs } from './load.js';
import type { BenchResult, Figure } from './report.js';
import { sumMetric, type BenchServer } from './server-process.js';
import { startManagedServer, stopAndProfile } from './profile.js';

interface CreateSizes {
  batchSize: number;
  batchCount: number;
  singleConnections: number;
  singleDurationS: number;
}

const fullSizes: CreateSizes = { batchSize: 1_000, batchCount: 100, singleConnections: 64, singleDurationS: 10 };
const quickSizes: CreateSizes = { batchSize: 50, batchCount: 4, singleConnections: 8, singleDurationS: 1 };

export const createBenchmark: Benchmark = {
  name: 'create',
  title: 'create throughput: batches of 1,000 and single creates from 64 clients',
  run: runCreate,
};

async function runCreate(context: BenchContext): Promise<BenchResult> {
  const sizes = context.quick ? quickSizes : fullSizes;
  const figures: Figure[] = [];
  const notes: string[] = [];

  const batchServer = await startManagedServer(context, 'create-batch', { dataDir: context.tempDir('tickler-bench-create-') });
  for (const concurrency of [1, 4]) {
    const count = sizes.batchSize * sizes.batchCount;
    const nowMs = wallClock.nowMs();
    context.log(`create: ${count} timers in batches of ${sizes.batchSize}, ${concurrency} in flight`);
    const outcome = await createInBatches(batchServer.client, count,
      (index) => oneShotAt(nextWeekFireAtMs(nowMs, index, count), index),
      { batchSize: sizes.batchSize, concurrency });
    const ratePerS = outcome.created / (outcome.elapsedMs / 1_000);
    figures.push({
      label: `POST /v1/jobs:batch (${sizes.batchSize} per request, ${concurrency} connection${concurrency > 1 ? 's' : ''})`,
      value: ratePerS, unit: 'timers/s', target: { comparison: '>=', value: 50_000 },
    });
    if (outcome.failed > 0) notes.push(`${outcome.failed} batch items failed, e.g. ${outcome.errorSamples[0]}`);
  }
  notes.push(...await stopAndProfile(context, 'create-batch', batchServer));

  const singleServer = await startManagedServer(context, 'create-single', { dataDir: context.tempDir('tickler-bench-create1-') });
  const single = await singleCreates(singleServer, sizes);
  figures.push(
    { label: `POST /v1/jobs, ${sizes.singleConnections} concurrent clients`, value: single.ratePerS, unit: 'creates/s',
      target: { comparison: '>=', value: 10_000 } },
    { label: 'single create latency p99 (autocannon)', value: single.latencyMsP99, unit: 'ms' },
  );
  if (single.notes.length > 0) notes.push(...single.notes);
  notes.push(...await stopAndProfile(context, 'create-single', singleServer));
  return {
    name: createBenchmark.name,
    title: createBenchmark.title,
    parameters: { ...sizes },
    figures,
    notes,
  };
}

async function singleCreates(server: BenchServer, sizes: CreateSizes):
  Promise<{ ratePerS: number; latencyMsP99: number; notes: string[] }> {
  const createdBefore = sumMetric(await server.client.metrics(), 'tickler_jobs_created_total');
  // One body for every request: no `key`, so each request creates a new job.
  const body = JSON.stringify(oneShotAt(wallClock.nowMs() + weekMs, 0));
  const result = await autocannon({
    url: `${server.url}/v1/jobs`,
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
    connections: sizes.singleConnections,
    duration: sizes.singleDurationS,
  });
  const createdAfter = sumMetric(await server.client.metrics(), 'tickler_jobs_created_total');
  const notes: string[] = [];
  const created = result['2xx'];
  if (result.non2xx > 0 || result.errors > 0) {
    notes.push(`single creates: ${result.non2xx} non-2xx answers, ${result.errors} errors ` +
      `(${JSON.stringify(result.statusCodeStats)})`);
  }
  if (createdAfter - createdBefore < created) {
    notes.push(`the server counted ${createdAfter - createdBefore} creates but autocannon saw ${created} 2xx answers`);
  }
  notes.push(`single creates: ${created} created in ${result.duration.toFixed(1)} s at ${isoOf(wallClock.nowMs())}; ` +
    'autocannon runs inside the benchmark process and shares the 2 cores with the server');
  return { ratePerS: created / result.duration, latencyMsP99: result.latency.p99, notes };
}
