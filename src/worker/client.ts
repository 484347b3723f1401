/**
 * A typed client for every route of API.md. One method per route; bodies and answers are
 * the wire shapes of `wire.ts`, unconverted. Error answers become `TicklerApiError`; requests
 * that get no answer become `TicklerNetworkError`.
 *
 * By default it speaks `node:http` through a keep-alive agent of its own
 * (http-transport.ts), so a worker's lease, heartbeat and complete calls reuse sockets; a
 * `fetch` passed in is used instead.
 */
import { TicklerApiError, TicklerNetworkError } from './errors.js';
import { httpTransport, type Transport, type TransportAnswer } from './http-transport.js';
import type {
  BatchResult,
  ClockAnswer,
  CompleteBatchItem,
  CompleteBatchResult,
  CompleteBatchStatusResult,
  CompleteRequest,
  HeartbeatBatchItem,
  HeartbeatBatchResult,
  Job,
  JobCreateRequest,
  JobPatchRequest,
  JsonObject,
  LeasedRun,
  LeaseRequest,
  ListDlqQuery,
  ListJobsQuery,
  ListPage,
  ListRunsQuery,
  PreviewItem,
  PreviewQuery,
  Run,
} from './wire.js';

export interface TicklerClientOptions {
  /** e.g. `http://127.0.0.1:7070`; a trailing slash is ignored. */
  baseUrl: string;
  apiKey?: string;
  /** Replaces the default `node:http` transport (a recording or instrumented fetch, say). */
  fetch?: typeof fetch;
  /** Per-request timeout; long-polls add their own `wait_s` on top. Default 30 s. */
  requestTimeoutMs?: number;
}

export interface RequestOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
}

type QueryValue = string | number | boolean | undefined | null;

const requestTimeoutMsDefault = 30_000;
/** Headroom over `wait_s` so a long-poll that answers on time is never cut short by its timeout. */
const longPollTimeoutHeadroomMs = 10_000;

export class TicklerClient {
  readonly baseUrl: string;
  private readonly apiKey: string | undefined;
  private readonly transport: Transport;
  private readonly requestTimeoutMs: number;

  constructor(options: TicklerClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.apiKey = options.apiKey;
    this.transport = options.fetch ?? httpTransport();
    this.requestTimeoutMs = options.requestTimeoutMs ?? requestTimeoutMsDefault;
  }

  // Jobs

  createJob(body: JobCreateRequest, options?: RequestOptions): Promise<Job> {
    return this.json('POST', '/v1/jobs', { body, ...options });
  }

  getJob(jobId: string, options?: RequestOptions): Promise<Job> {
    return this.json('GET', `/v1/jobs/${segment(jobId)}`, options);
  }

  listJobs(query: ListJobsQuery = {}, options?: RequestOptions): Promise<ListPage<Job>> {
    return this.json('GET', '/v1/jobs', { query: { ...query }, ...options });
  }

  patchJob(jobId: string, body: JobPatchRequest, options?: RequestOptions): Promise<Job> {
    return this.json('PATCH', `/v1/jobs/${segment(jobId)}`, { body, ...options });
  }

  cancelJob(jobId: string, options?: RequestOptions): Promise<Job> {
    return this.json('DELETE', `/v1/jobs/${segment(jobId)}`, options);
  }

  /** Cancels every job of the team whose key starts with `keyPrefix`; answers the count. */
  cancelJobsByKeyPrefix(keyPrefix: string, options?: RequestOptions): Promise<{ cancelled: number }> {
    return this.json('DELETE', '/v1/jobs', { query: { key_prefix: keyPrefix }, ...options });
  }

  pauseJob(jobId: string, options?: RequestOptions): Promise<Job> {
    return this.json('POST', `/v1/jobs/${segment(jobId)}/pause`, { body: {}, ...options });
  }

  resumeJob(jobId: string, options?: RequestOptions): Promise<Job> {
    return this.json('POST', `/v1/jobs/${segment(jobId)}/resume`, { body: {}, ...options });
  }

  /** Runs the job now, once, outside its schedule; answers the new run. */
  triggerJob(jobId: string, options?: RequestOptions): Promise<Run> {
    return this.json('POST', `/v1/jobs/${segment(jobId)}/trigger`, { body: {}, ...options });
  }

  /** Up to 1,000 creates; one bad item fails only itself. */
  batchCreateJobs(jobs: JobCreateRequest[], options?: RequestOptions): Promise<{ results: BatchResult[] }> {
    return this.json('POST', '/v1/jobs:batch', { body: { jobs }, ...options });
  }

  previewSchedule(query: PreviewQuery, options?: RequestOptions): Promise<{ items: PreviewItem[] }> {
    return this.json('GET', '/v1/schedules/preview', { query: { ...query }, ...options });
  }

  // Runs

  listJobRuns(jobId: string, query: ListRunsQuery = {}, options?: RequestOptions): Promise<ListPage<Run>> {
    return this.json('GET', `/v1/jobs/${segment(jobId)}/runs`, { query: { ...query }, ...options });
  }

  listRuns(query: ListRunsQuery = {}, options?: RequestOptions): Promise<ListPage<Run>> {
    return this.json('GET', '/v1/runs', { query: { ...query }, ...options });
  }

  /** One run with its events. */
  getRun(runId: string, options?: RequestOptions): Promise<Run> {
    return this.json('GET', `/v1/runs/${segment(runId)}`, options);
  }

  listDlq(query: ListDlqQuery = {}, options?: RequestOptions): Promise<ListPage<Run>> {
    return this.json('GET', '/v1/dlq', { query: { ...query }, ...options });
  }

  /** A dead run back to ready under the same `run_id`, with a fresh retry budget. */
  replayRun(runId: string, options?: RequestOptions): Promise<Run> {
    return this.json('POST', `/v1/runs/${segment(runId)}/replay`, { body: {}, ...options });
  }

  // Workers

  /** Waits up to `wait_s` for work; the request's own timeout allows for that wait. */
  leaseRuns(body: LeaseRequest, options?: RequestOptions): Promise<{ runs: LeasedRun[] }> {
    const timeoutMs = options?.timeoutMs ?? this.requestTimeoutMs + (body.wait_s ?? 0) * 1_000 + longPollTimeoutHeadroomMs;
    return this.json('POST', '/v1/workers/lease', { body, ...options, timeoutMs });
  }

  heartbeat(runId: string, fencingToken: string, options?: RequestOptions): Promise<{ lease_expires_at: string }> {
    return this.json('POST', `/v1/runs/${segment(runId)}/heartbeat`, { body: { fencing_token: fencingToken }, ...options });
  }

  completeRun(runId: string, body: CompleteRequest, options?: RequestOptions): Promise<JsonObject> {
    return this.json('POST', `/v1/runs/${segment(runId)}/complete`, { body, ...options });
  }

  /**
   * Up to 1,000 completions in one request (`POST /v1/runs:complete`, an extension of
   * API.md); each item is fenced and answers for itself, in order.
   */
  completeRuns(completions: CompleteBatchItem[], options?: RequestOptions): Promise<{ results: CompleteBatchResult[] }> {
    return this.json('POST', '/v1/runs:complete', { body: { completions }, ...options });
  }

  /** As `completeRuns`, with `answer: 'status'`: accepted items answer their status without the run. */
  completeRunsBriefly(completions: CompleteBatchItem[], options?: RequestOptions):
    Promise<{ results: CompleteBatchStatusResult[] }> {
    return this.json('POST', '/v1/runs:complete', { body: { completions, answer: 'status' }, ...options });
  }

  /** Up to 1,000 heartbeats in one request (`POST /v1/runs:heartbeat`); each answers for itself. */
  heartbeatRuns(heartbeats: HeartbeatBatchItem[], options?: RequestOptions): Promise<{ results: HeartbeatBatchResult[] }> {
    return this.json('POST', '/v1/runs:heartbeat', { body: { heartbeats }, ...options });
  }

  // Virtual clock (only on a server started with --virtual-clock; 404 otherwise)

  getClock(options?: RequestOptions): Promise<ClockAnswer> {
    return this.json('GET', '/v1/clock', options);
  }

  /** Answers once everything due up to the new time has happened. */
  advanceClock(seconds: number, options?: RequestOptions): Promise<ClockAnswer> {
    return this.json('POST', '/v1/clock/advance', { body: { seconds }, ...options });
  }

  // Operations

  healthz(options?: RequestOptions): Promise<JsonObject> {
    return this.json('GET', '/healthz', options);
  }

  readyz(options?: RequestOptions): Promise<JsonObject> {
    return this.json('GET', '/readyz', options);
  }

  /** Prometheus text. */
  async metrics(options?: RequestOptions): Promise<string> {
    const response = await this.send('GET', '/metrics', options ?? {});
    return response.text();
  }

  private async json<T>(
    method: string,
    path: string,
    options: RequestOptions & { body?: unknown; query?: Record<string, QueryValue> } = {},
  ): Promise<T> {
    const response = await this.send(method, path, options);
    const text = await response.text();
    if (text === '') return undefined as T;
    try {
      return JSON.parse(text) as T;
    } catch (error) {
      throw new TicklerApiError({
        status: response.status,
        code: 'invalid_answer',
        message: `${method} ${path} answered ${response.status} with a body that is not JSON: ${text.slice(0, 200)}`,
        cause: error,
      });
    }
  }

  private async send(
    method: string,
    path: string,
    options: RequestOptions & { body?: unknown; query?: Record<string, QueryValue> },
  ): Promise<TransportAnswer> {
    const url = this.baseUrl + path + queryString(options.query);
    const headers: Record<string, string> = { accept: 'application/json' };
    if (this.apiKey !== undefined) headers['authorization'] = `Bearer ${this.apiKey}`;
    if (options.body !== undefined) headers['content-type'] = 'application/json';
    const timeout = AbortSignal.timeout(options.timeoutMs ?? this.requestTimeoutMs);
    const signal = options.signal === undefined ? timeout : AbortSignal.any([options.signal, timeout]);
    let response: TransportAnswer;
    try {
      response = await this.transport(url, {
        method,
        headers,
        body: options.body === undefined ? undefined : JSON.stringify(options.body),
        signal,
      });
    } catch (error) {
      throw new TicklerNetworkError(`${method} ${path} got no answer from ${this.baseUrl}: ${describe(error)}`, {
        cause: error,
      });
    }
    if (response.ok) return response;
    throw await apiErrorOf(method, path, response);
  }
}

async function apiErrorOf(method: string, path: string, response: TransportAnswer): Promise<TicklerApiError> {
  const text = await response.text().catch((error: unknown) => `(body unreadable: ${describe(error)})`);
  const retryAfter = Number(response.headers.get('retry-after'));
  const retryAfterS = Number.isFinite(retryAfter) && retryAfter >= 0 && response.headers.has('retry-after')
    ? retryAfter
    : undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined; // Not an error document (a proxy's HTML page, say): described below by status.
  }
  const error = (parsed as { error?: { code?: unknown; message?: unknown; field?: unknown } } | undefined)?.error;
  if (error !== undefined && typeof error.code === 'string') {
    return new TicklerApiError({
      status: response.status,
      code: error.code,
      message: typeof error.message === 'string' ? error.message : `${method} ${path}: ${error.code}`,
      ...(typeof error.field === 'string' ? { field: error.field } : {}),
      ...(retryAfterS === undefined ? {} : { retryAfterS }),
    });
  }
  return new TicklerApiError({
    status: response.status,
    code: `http_${response.status}`,
    message: `${method} ${path} answered ${response.status}: ${text.slice(0, 200)}`,
    ...(retryAfterS === undefined ? {} : { retryAfterS }),
  });
}

function queryString(query: Record<string, QueryValue> | undefined): string {
  if (query === undefined) return '';
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined && value !== null) params.append(name, String(value));
  }
  const text = params.toString();
  return text === '' ? '' : `?${text}`;
}

function segment(id: string): string {
  return encodeURIComponent(id);
}

export function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = error.cause instanceof Error ? ` (${error.cause.message})` : '';
    return `${error.message}${cause}`;
  }
  return String(error);
}
