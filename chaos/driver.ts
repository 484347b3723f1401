/**
 * Plays a workload plan against the API nodes and records every request and its answer: a
 * create is acknowledged (2xx), refused (4xx: nothing was created) or unknown (5xx, timeout,
 * no connection: it may exist). After the faults heal, each unknown create is repeated with
 * the same key, which names the job if the first attempt did create it (API.md: the same key
 * and body answer the existing job).
 */
import type { Clock } from '../src/clock.js';
import { TicklerClient } from '../src/worker/client.js';
import { TicklerApiError } from '../src/worker/errors.js';
import type { JobCreateRequest } from '../src/worker/wire.js';
import type { HistoryRecorder } from './recorder.js';
import { runFetch } from './run-tag.js';
import { createRequestOf, jobPolicies, type PlannedControl, type PlannedCreate, type WorkloadPlan } from './workload.js';

const requestTimeoutMs = 5_000;
const inFlightMax = 64;

type Action = { offsetMs: number; create: PlannedCreate } | { offsetMs: number; control: PlannedControl };

export class WorkloadDriver {
  private readonly clients: TicklerClient[];
  private readonly recorder: HistoryRecorder;
  private readonly clock: Clock;
  private readonly runTag: string;
  private readonly requests = new Map<string, JobCreateRequest>();
  private readonly unknownCreates = new Set<string>();
  readonly jobIds = new Map<string, string>();
  private readonly inFlight = new Set<Promise<void>>();
  private nextClient = 0;

  constructor(options: { apiUrls: readonly string[]; recorder: HistoryRecorder; clock: Clock; runTag: string }) {
    // Answers only from this run's nodes (run-tag.ts); another's is recorded and counts as none.
    const fetch = runFetch(options.runTag, options.recorder, 'driver');
    this.clients = options.apiUrls.map((baseUrl) => new TicklerClient({ baseUrl, requestTimeoutMs, fetch }));
    this.recorder = options.recorder;
    this.clock = options.clock;
    this.runTag = options.runTag;
  }

  private client(): TicklerClient {
    this.nextClient = (this.nextClient + 1) % this.clients.length;
    return this.clients[this.nextClient] as TicklerClient;
  }

  /** Sends every planned request at its time; resolves when all have been answered. */
  async play(plan: WorkloadPlan, phaseStartMs: number): Promise<void> {
    const actions: Action[] = [
      ...plan.creates.map((create) => ({ offsetMs: create.sendOffsetMs, create })),
      ...plan.controls.map((control) => ({ offsetMs: control.sendOffsetMs, control })),
    ].sort((left, right) => left.offsetMs - right.offsetMs);
    for (const action of actions) {
      await this.waitUntil(phaseStartMs + action.offsetMs);
      while (this.inFlight.size >= inFlightMax) await Promise.race(this.inFlight);
      const sent = 'create' in action ? this.sendCreate(action.create, phaseStartMs) : this.sendControl(action.control);
      this.inFlight.add(sent);
      void sent.finally(() => this.inFlight.delete(sent));
    }
    await Promise.all(this.inFlight);
  }

  private waitUntil(atMs: number): Promise<void> {
    if (this.clock.nowMs() >= atMs) return Promise.resolve();
    return new Promise((resolve) => this.clock.setTimer(atMs, resolve));
  }

  private async sendCreate(create: PlannedCreate, phaseStartMs: number): Promise<void> {
    const { request, schedule } = createRequestOf(create, phaseStartMs, this.runTag);
    this.requests.set(create.createId, request);
    this.recorder.record({ type: 'create_sent', createId: create.createId, schedule, policies: jobPolicies });
    await this.createOnce(create.createId, request);
  }

  private async createOnce(createId: string, request: JobCreateRequest): Promise<void> {
    try {
      const job = await this.client().createJob(request);
      this.jobIds.set(createId, job.job_id);
      this.unknownCreates.delete(createId);
      this.recorder.record({ type: 'create_acked', createId, jobId: job.job_id, createdAtMs: Date.parse(job.created_at) });
    } catch (error) {
      if (error instanceof TicklerApiError && error.status < 500) {
        this.unknownCreates.delete(createId);
        this.recorder.record({ type: 'create_failed', createId, status: error.status, code: error.code });
        return;
      }
      this.unknownCreates.add(createId);
      this.recorder.record({ type: 'create_unknown', createId, error: describeError(error) });
    }
  }

  private async sendControl(control: PlannedControl): Promise<void> {
    const jobId = this.jobIds.get(control.createId);
    if (jobId === undefined) return; // its create was not acknowledged (yet): nothing to change
    this.recorder.record({ type: 'control_sent', kind: control.kind, jobId });
    const client = this.client();
    try {
      if (control.kind === 'cancel') await client.cancelJob(jobId);
      else if (control.kind === 'pause') await client.pauseJob(jobId);
      else await client.resumeJob(jobId);
      this.recorder.record({ type: 'control_answer', kind: control.kind, jobId, outcome: 'acked' });
    } catch (error) {
      const refused = error instanceof TicklerApiError && error.status < 500;
      this.recorder.record({ type: 'control_answer', kind: control.kind, jobId, outcome: refused ? 'failed' : 'unknown',
        detail: describeError(error) });
    }
  }

  /** Repeats each create whose outcome is unknown, with the same key and body, until answered or out of tries. */
  async resolveUnknownCreates(triesMax: number): Promise<number> {
    for (let tryNumber = 0; tryNumber < triesMax && this.unknownCreates.size > 0; tryNumber++) {
      await Promise.all([...this.unknownCreates].map((createId) =>
        this.createOnce(createId, this.requests.get(createId) as JobCreateRequest)));
    }
    return this.unknownCreates.size;
  }
}

export function describeError(error: unknown): string {
  if (error instanceof TicklerApiError) return `${error.status} ${error.code}: ${error.message}`;
  if (error instanceof Error) return error.cause instanceof Error ? `${error.message} (${error.cause.message})` : error.message;
  return String(error);
}
