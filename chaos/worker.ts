/**
 * A chaos worker process: the real worker SDK (`createWorker`) pulling the chaos pool, with a
 * client that records every lease, heartbeat and completion — and the answer to it — to this
 * worker's own history file, on the machine's clock. The harness kills and stops these
 * processes; what they wrote survives (one synchronous write per event).
 *
 * Each job's payload says how its handler behaves: `ok` (a short sleep), `fail_first` (the first
 * attempt fails, a retry succeeds), `fail_permanent` (straight to the DLQ), `slow` (outlasts
 * its lease, kept alive by heartbeats) or `outlive` (the first attempt withholds its heartbeats
 * and outlives its lease, so its completion must be refused).
 *
 * Usage: tsx chaos/worker.ts --name W --base-url URL --history FILE [--lease-s 5] [--concurrency 16]
 */
import { parseArgs } from 'node:util';
import { SystemClock } from '../src/clock.js';
import { TicklerClient, type RequestOptions } from '../src/worker/client.js';
import { PermanentError, TicklerApiError } from '../src/worker/errors.js';
import type { WorkerRun } from '../src/worker/run-attempt.js';
import type { CompleteRequest, JsonObject, LeaseRequest, LeasedRun } from '../src/worker/wire.js';
import { createWorker } from '../src/worker/worker.js';
import type { AnswerOutcome } from './history.js';
import { HistoryRecorder } from './recorder.js';
import { chaosPool, type ChaosPayload } from './workload.js';

function payloadOf(run: { payload: unknown }): Partial<ChaosPayload> {
  return typeof run.payload === 'object' && run.payload !== null ? run.payload as Partial<ChaosPayload> : {};
}

function outcomeOf(error: unknown): AnswerOutcome {
  if (!(error instanceof TicklerApiError)) return 'unknown';
  if (error.code === 'stale_token' || error.code === 'cancelled' || error.code === 'not_found') return error.code;
  return error.status >= 500 ? 'unknown' : 'error';
}

/** The SDK's client, recording what it is handed and how the server answers. */
class RecordingClient extends TicklerClient {
  private readonly recorder: HistoryRecorder;
  private readonly clock: SystemClock;
  private readonly workerName: string;
  /** Tokens whose attempt withholds its heartbeats (`outlive`). */
  private readonly silentTokens = new Set<string>();

  constructor(baseUrl: string, recorder: HistoryRecorder, clock: SystemClock, workerName: string) {
    super({ baseUrl });
    this.recorder = recorder;
    this.clock = clock;
    this.workerName = workerName;
  }

  override async leaseRuns(body: LeaseRequest, options?: RequestOptions): Promise<{ runs: LeasedRun[] }> {
    const answer = await super.leaseRuns(body, options);
    for (const run of answer.runs) {
      const payload = payloadOf(run);
      if (payload.behaviour === 'outlive' && run.attempt === 1) this.silentTokens.add(run.fencing_token);
      this.recorder.record({
        type: 'dispatch', worker: this.workerName, runId: run.run_id, jobId: run.job_id,
        ...(typeof payload.create_id === 'string' ? { createId: payload.create_id } : {}),
        scheduledAtMs: Date.parse(run.scheduled_at), fireAtMs: Date.parse(run.fire_at), attempt: run.attempt,
        fencingToken: run.fencing_token, leaseExpiresAtMs: Date.parse(run.lease_expires_at),
      });
    }
    return answer;
  }

  override async heartbeat(runId: string, fencingToken: string, options?: RequestOptions):
    Promise<{ lease_expires_at: string }> {
    if (this.silentTokens.has(fencingToken)) {
      // Pretends the heartbeat went through, so the handler runs on past its lease.
      return { lease_expires_at: new Date(this.clock.nowMs()).toISOString() };
    }
    const sentAtMs = this.clock.nowMs();
    try {
      const answer = await super.heartbeat(runId, fencingToken, options);
      this.recorder.record({ type: 'heartbeat', sentAtMs, worker: this.workerName, runId, fencingToken,
        outcome: 'accepted', leaseExpiresAtMs: Date.parse(answer.lease_expires_at) });
      return answer;
    } catch (error) {
      this.recorder.record({ type: 'heartbeat', sentAtMs, worker: this.workerName, runId, fencingToken,
        outcome: outcomeOf(error) });
      throw error;
    }
  }

  override async completeRun(runId: string, body: CompleteRequest, options?: RequestOptions): Promise<JsonObject> {
    const sentAtMs = this.clock.nowMs();
    const base = { type: 'completion', sentAtMs, worker: this.workerName, runId, fencingToken: body.fencing_token,
      status: body.status } as const;
    try {
      const answer = await super.completeRun(runId, body, options);
      this.recorder.record({ ...base, outcome: 'accepted' });
      return answer;
    } catch (error) {
      this.recorder.record({ ...base, outcome: outcomeOf(error) });
      throw error;
    }
  }
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
    name: { type: 'string' }, 'base-url': { type: 'string' }, history: { type: 'string' },
    'lease-s': { type: 'string', default: '5' }, concurrency: { type: 'string', default: '16' },
  } });
  if (values.name === undefined || values['base-url'] === undefined || values.history === undefined) {
    throw new Error('usage: worker.ts --name W --base-url URL --history FILE [--lease-s 5] [--concurrency 16]');
  }
  const clock = new SystemClock();
  const recorder = new HistoryRecorder(values.history, () => clock.nowMs());
  const leaseS = Number(values['lease-s']);
  const client = new RecordingClient(values['base-url'], recorder, clock, values.name);
  const worker = createWorker({
    client, pool: chaosPool, concurrency: Number(values.concurrency), leaseS, waitS: 5, workerId: values.name, clock,
    handler: (run, context) => handle(run, context.signal, clock, leaseS * 1_000),
  });
  process.once('SIGTERM', () => {
    void worker.stop({ timeoutMs: 5_000 }).then(() => {
      recorder.close();
      process.exit(0);
    });
  });
  worker.start();
  process.stdout.write(`chaos worker ${values.name} started\n`);
}

main().catch((error: unknown) => {
  process.stderr.write(`chaos worker failed: ${error instanceof Error ? error.stack ?? error.message : String(error)}\n`);
  process.exit(1);
});
