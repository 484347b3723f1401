/**
 * Create throughput: one-shot timers due next week, so nothing fires during the
 * measurement. Two shapes, each on a fresh server:
 *   - `POST /v1/jobs:batch` of 1,000 items, on one connection and on four; the bodies are
 *     built before the clock starts and answers are checked by scanning, not parsing, as the
 *     client shares the server's 2 cores (its notes say so);
 *   - single `POST /v1/jobs` from 64 concurrent keep-alive clients (autocannon), which only
 *     reaches its target if the server group-commits concurrent requests.
 */
import autocannon from 'autocannon';
import { httpTransport } from '../src/worker/http-transport.js';
import type { BenchContext, Benchmark } from './context.js';
import { isoOf, nextWeekFireAtMs, oneShotAt, wallClock, weekMs } from './load.js';
import type { BenchResult, Figure } from './report.js';
import type { JobCreateRequest } from '../src/worker/wire.js';
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
    const createdBefore = sumMetric(await batchServer.client.metrics(), 'tickler_jobs_created_total');
    const bodies = batchBodies(count, sizes.batchSize, (index) => oneShotAt(nextWeekFireAtMs(nowMs, index, count), index));
    const outcome = await postBatches(batchServer.url, bodies, concurrency);
    const ratePerS = outcome.created / (outcome.elapsedMs / 1_000);
    figures.push({
      label: `POST /v1/jobs:batch (${sizes.batchSize} per request, ${concurrency} connection${concurrency > 1 ? 's' : ''})`,
      value: ratePerS, unit: 'timers/s', target: { comparison: '>=', value: 50_000 },
    });
    if (outcome.created < count) notes.push(`${count - outcome.created} batch items were not created, e.g. ${outcome.errorSample}`);
    const createdOnServer = sumMetric(await batchServer.client.metrics(), 'tickler_jobs_created_total') - createdBefore;
    if (createdOnServer !== outcome.created) {
      notes.push(`the server counted ${createdOnServer} creates but the answers held ${outcome.created} 201s`);
    }
  }
  notes.push('batch creates: the client (this process, on the same 2 cores as the server) builds every request body ' +
    'before the timed section and counts the 201s of each answer by scanning its text instead of parsing it; ' +
    'the server does the same work as for any client. Until 2026-11-29 the client built and parsed inside the ' +
    'timed section through TicklerClient (~0.6 us a job to build, ~1.6 us to parse, CPU time)');
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

interface BatchBody {
  text: string;
  itemCount: number;
}

/** `{"jobs": [...]}` texts of `batchSize` items each, built before anything is timed. */
function batchBodies(count: number, batchSize: number, specOf: (index: number) => JobCreateRequest): BatchBody[] {
  const bodies: BatchBody[] = [];
  for (let first = 0; first < count; first += batchSize) {
    const jobs: JobCreateRequest[] = [];
    for (let index = first; index < Math.min(count, first + batchSize); index++) jobs.push(specOf(index));
    bodies.push({ text: JSON.stringify({ jobs }), itemCount: jobs.length });
  }
  return bodies;
}

/** The first result of a batch answer that is not a 201, for the notes. */
function firstFailure(text: string): string {
  const results = (JSON.parse(text) as { results: { status: number }[] }).results;
  return JSON.stringify(results.find((result) => result.status !== 201) ?? null).slice(0, 300);
}

/** How each created item's answer begins (API.md: `{"status": 201, "job": {...}}`, as the server writes it). */
const createdMark = '{"status":201,';

/**
 * Posts the bodies in order with `concurrency` requests in flight over the SDK's keep-alive
 * transport, and counts created items by their mark in each answer's text.
 */
async function postBatches(baseUrl: string, bodies: readonly BatchBody[], concurrency: number):
  Promise<{ created: number; elapsedMs: number; errorSample: string }> {
  const transport = httpTransport();
  let next = 0;
  let created = 0;
  let errorSample = '';
  const startedMs = performance.now();
  const lane = async (): Promise<void> => {
    while (next < bodies.length) {
      const body = bodies[next++]!;
      const answer = await transport(`${baseUrl}/v1/jobs:batch`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: body.text, timeoutMs: 600_000,
      });
      const text = await answer.text();
      if (!answer.ok) throw new Error(`POST /v1/jobs:batch answered ${answer.status}: ${text.slice(0, 300)}`);
      let marks = 0;
      for (let at = text.indexOf(createdMark); at !== -1; at = text.indexOf(createdMark, at + createdMark.length)) marks++;
      created += marks;
      if (errorSample === '' && marks < body.itemCount) errorSample = firstFailure(text);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, lane));
  return { created, elapsedMs: performance.now() - startedMs, errorSample };
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
