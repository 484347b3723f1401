/**
 * A chaos worker process: the real worker SDK (`createWorker`) pulling the chaos pool, its
 * client's fetch recording every lease, heartbeat and completion — and the answer to it — to
 * this worker's own history file, on the machine's clock (recording-fetch.ts). The harness kills and stops these
 * processes; what they wrote survives (one synchronous write per event).
 *
 * Each job's payload says how its handler behaves: `ok` (a short sleep), `fail_first` (the first
 * attempt fails, a retry succeeds), `fail_permanent` (straight to the DLQ), `slow` (outlasts
 * its lease, kept alive by heartbeats) or `outlive` (the first attempt withholds its heartbeats
 * and outlives its lease, so its completion must be refused).
 *
 * With `--lease-ahead-ms N` it leases runs written ahead up to N ms before they are ready
 * (the SDK's `leaseAheadMs`); every handler records its start (`handler_start`), so the
 * checker sees when a run held that way actually began.
 *
 * With `--store-url URL` it speaks straight to PostgreSQL instead of to `--base-url`
 * (`openPostgresWorkerApi`), recorded at that boundary (recording-worker-api.ts).
 *
 * With `--run-tag T` it takes answers only from nodes naming run T (run-tag.ts); any other
 * answer is recorded as `foreign_answer` and treated as no answer.
 *
 * Usage: tsx chaos/worker.ts --name W (--base-url URL | --store-url URL) --history FILE [--lease-s 5]
 *   [--concurrency 16] [--lease-ahead-ms 0] [--run-tag T]
 */
import { parseArgs } from 'node:util';
import { SystemClock } from '../src/clock.js';
import { TicklerClient } from '../src/worker/client.js';
import { PermanentError } from '../src/worker/errors.js';
import type { WorkerRun } from '../src/worker/run-attempt.js';
import { openPostgresWorkerApi, type PostgresWorkerApi } from '../src/direct-worker/postgres-direct.js';
import { createWorker } from '../src/worker/worker.js';
import type { WorkerApi } from '../src/worker/worker-api.js';
import { HistoryRecorder } from './recorder.js';
import { recordingFetch } from './recording-fetch.js';
import { runFetch } from './run-tag.js';
import { recordingWorkerApi } from './recording-worker-api.js';
import { chaosPool, type ChaosPayload } from './workload.js';

function payloadOf(run: { payload?: unknown }): Partial<ChaosPayload> {
  return typeof run.payload === 'object' && run.payload !== null ? run.payload as Partial<ChaosPayload> : {};
}

function sleep(clock: SystemClock, ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = clock.setTimer(clock.nowMs() + ms, resolve);
    signal.addEventListener('abort', () => {
      timer.cancel();
      resolve();
    }, { once: true });
  });
}

async function handle(run: WorkerRun, signal: AbortSignal, clock: SystemClock, leaseMs: number): Promise<unknown> {
  const behaviour = payloadOf(run).behaviour ?? 'ok';
  switch (behaviour) {
    case 'fail_first':
      await sleep(clock, 20, signal);
      if (run.attempt === 1) throw new Error('chaos: the first attempt fails');
      return { ok: true };
    case 'fail_permanent':
      throw new PermanentError('chaos: this run cannot succeed');
    case 'slow':
      await sleep(clock, leaseMs * 1.5, signal);
      return { ok: true };
    case 'outlive':
      await sleep(clock, run.attempt === 1 ? leaseMs * 1.6 : 20, signal);
      return { ok: true };
    case 'ok':
    default:
      await sleep(clock, Math.floor(Math.random() * 100), signal);
      return { ok: true };
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: {
    name: { type: 'string' }, 'base-url': { type: 'string' }, 'store-url': { type: 'string' }, history: { type: 'string' },
    'lease-s': { type: 'string', default: '5' }, concurrency: { type: 'string', default: '16' },
    'lease-ahead-ms': { type: 'string', default: '0' }, 'run-tag': { type: 'string' },
  } });
  if (values.name === undefined || (values['base-url'] === undefined) === (values['store-url'] === undefined)
    || values.history === undefined) {
    throw new Error('usage: worker.ts --name W (--base-url URL | --store-url URL) --history FILE [--lease-s 5] [--concurrency 16]');
  }
  const clock = new SystemClock();
  const recorder = new HistoryRecorder(values.history, () => clock.nowMs());
  const leaseS = Number(values['lease-s']);
  const recording = {
    recorder, workerName: values.name, nowMs: () => clock.nowMs(),
    silences: (run: { payload?: unknown; attempt: number }) => payloadOf(run).behaviour === 'outlive' && run.attempt === 1,
  };
  let direct: PostgresWorkerApi | undefined;
  let client: WorkerApi;
  if (values['store-url'] !== undefined) {
    direct = await openPostgresWorkerApi({ url: values['store-url'], clock });
    client = recordingWorkerApi(direct, recording);
  } else {
    // With --run-tag, only this run's nodes are listened to (run-tag.ts).
    const tagged = values['run-tag'] === undefined ? undefined : runFetch(values['run-tag'], recorder, values.name);
    client = new TicklerClient({ baseUrl: values['base-url'] as string,
      fetch: recordingFetch({ ...recording, ...(tagged === undefined ? {} : { fetch: tagged }) }) });
  }
  const workerName = values.name;
  const worker = createWorker({
    client, pool: chaosPool, concurrency: Number(values.concurrency), leaseS, waitS: 5, workerId: workerName, clock,
    leaseAheadMs: Number(values['lease-ahead-ms']),
    handler: (run, context) => {
      recorder.record({ type: 'handler_start', worker: workerName, runId: run.run_id, attempt: run.attempt });
      return handle(run, context.signal, clock, leaseS * 1_000);
    },
  });
  process.once('SIGTERM', () => {
    void worker.stop({ timeoutMs: 5_000 }).then(async () => {
      await direct?.close();
      recorder.close();
      process.exit(0);
    });
  });
  worker.start();
  process.stdout.write(`chaos worker ${values.name} started${direct === undefined ? '' : ' (straight to PostgreSQL)'}\n`);
}

main().catch((error: unknown) => {
  process.stderr.write(`chaos worker failed: ${error instanceof Error ? error.stack ?? error.message : String(error)}\n`);
  process.exit(1);
});
