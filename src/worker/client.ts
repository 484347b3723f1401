/**
 * A typed client for every route of API.md. One method per route; bodies and answers are
 * the wire shapes of `wire.ts`, unconverted. Error answers become `TicklerApiError`; requests
 * that get no answer become `TicklerNetworkError`.
 *
 * By default it speaks `node:http` through a keep-alive agent of its own
 * (http-transport.ts), so a worker's lease, heartbeat and complete calls reuse sockets; a
 * `fetch` passed in is used instead.
 *
 * With `coalesceCreates`, concurrent `createJob` calls share `POST /v1/jobs:batch` requests
 * (create-batcher.ts).
 */
import { batchJobsMax, batchRequestBodyBytesMax, requestBodyBytesMax, clientLongPollTimeoutHeadroomMs, clientRequestTimeoutMsDefault } from '../limits.js';
import { createBatcher, type CreateBatcher, type CreateText } from './create-batcher.js';
import { TicklerApiError, TicklerNetworkError } from './errors.js';
import { RequestBatcher, aloneAsItem, itemErrorOf, type BatchItemResult } from './request-batcher.js';
import { fetchTransport, httpTransport, type Transport, type TransportAnswer } from './http-transport.js';
import type { RequestOptions, WorkerApi } from './worker-api.js';
import type {
  BatchIdResult,
  BatchResult,
  CancelBatchResult,
  CancelBatchStatusResult,
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
  SilentJob,
} from './wire.js';

export interface TicklerClientOptions {
  /** e.g. `http://127.0.0.1:7070`; a trailing slash is ignored. */
  baseUrl: string;
  apiKey?: string;
  /** Replaces the default `node:http` transport (a recording or instrumented fetch, say). */
  fetch?: typeof fetch;
  /** Per-request timeout; long-polls add their own `wait_s` on top. Default 30 s. */
  requestTimeoutMs?: number;
  /**
   * Off by default. On: concurrent `createJob` calls (without per-call options) are coalesced
   * into `POST /v1/jobs:batch` requests of up to 1,000, one in flight at a time, the next one
   * leaving the moment it answers; a create made alone still goes alone to `POST /v1/jobs`, at
   * once. Each call resolves to its job or rejects with the status and code a single create
   * would have. The trade-off: under load a create waits for the batch in flight before its own
   * leaves, and a batch that gets no answer (network error, 5xx, 429) fails every call in it,
   * each as unknown as a single create that got no answer; give jobs a `key` where callers retry.
   * A call with `signal` or `timeoutMs` always goes alone.
   */
  coalesceCreates?: boolean;
  /**
   * Off by default. On: concurrent `cancelJob` calls (without per-call options) share
   * `POST /v1/jobs:cancel` requests of up to 1,000 ids, as `coalesceCreates` does for creates
   * (one in flight; a cancel made alone goes alone to `DELETE /v1/jobs/{id}`; each call
   * resolves to its job or rejects with the error a single cancel would have; a server without
   * the route gets single cancels). A batch that gets no answer fails every call in it; cancel
   * is idempotent, so such a call can simply be repeated.
   */
  coalesceCancels?: boolean;
}

export type { RequestOptions } from './worker-api.js';

type QueryValue = string | number | boolean | undefined | null;

interface SendOptions extends RequestOptions {
  body?: unknown;
  /** A body already serialized (coalesced creates serialize each item once). */
  bodyText?: string;
  query?: Record<string, QueryValue>;
}

export class TicklerClient implements WorkerApi {
  readonly baseUrl: string;
  private readonly apiKey: string | undefined;
  private readonly transport: Transport;
  private readonly requestTimeoutMs: number;
  /** Present with `coalesceCreates` until the server turns out not to know the batch route. */
  private creates: CreateBatcher | undefined;
  /** Present with `coalesceCancels` until the server turns out not to know the batch route. */
  private cancels: RequestBatcher<string, Job> | undefined;
  /** As `creates`, for `createJobId`: its batches ask for ids only. */
  private createIds: CreateBatcher<string> | undefined;
  private readonly createStats: { requests: number; items: number } | undefined;

  constructor(options: TicklerClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.apiKey = options.apiKey;
    this.transport = options.fetch === undefined ? httpTransport() : fetchTransport(options.fetch);
    this.requestTimeoutMs = options.requestTimeoutMs ?? clientRequestTimeoutMsDefault;
    if (options.coalesceCreates === true) {
      const timeoutOf = (timeoutMs: number | undefined): RequestOptions => (timeoutMs === undefined ? {} : { timeoutMs });
      const createOne = (text: string, timeoutMs: number | undefined): Promise<Job> =>
        this.json('POST', '/v1/jobs', { bodyText: text, ...timeoutOf(timeoutMs) });
      const createBatch = (texts: string[], timeoutMs: number | undefined, head = ''): Promise<{ results: BatchResult[] }> =>
        this.json('POST', '/v1/jobs:batch', { bodyText: `{${head}"jobs":[${texts.join(',')}]}`, ...timeoutOf(timeoutMs) });
      this.creates = createBatcher<Job>({
        createOne,
        createBatch,
        valueOf: (result) => ('job' in result ? result.job : undefined),
      }, () => {
        // Creates already queued go one by one through the batcher; later ones skip it.
        this.creates = undefined;
      });
      // A server older than `answer: "id"` refuses the field (400 on `answer`): whole jobs from then on.
      let idsOnly = true;
      this.createIds = createBatcher<string>({
        createOne: async (text, timeoutMs) => (await createOne(text, timeoutMs)).job_id,
        createBatch: async (texts, timeoutMs) => {
          if (!idsOnly) return createBatch(texts, timeoutMs);
          try {
            return await createBatch(texts, timeoutMs, '"answer":"id",');
          } catch (error) {
            if (!(error instanceof TicklerApiError && error.status === 400 && error.field === 'answer')) throw error;
            idsOnly = false;
            return createBatch(texts, timeoutMs);
          }
        },
        valueOf: (result) => ('job_id' in result ? result.job_id : 'job' in result ? result.job.job_id : undefined),
      }, () => {
        this.createIds = undefined;
      });
      const jobStats = this.creates.stats;
      const idStats = this.createIds.stats;
      this.createStats = {
        get requests() { return jobStats.requests + idStats.requests; },
        get items() { return jobStats.items + idStats.items; },
      };
    }
    if (options.coalesceCancels === true) this.cancels = this.cancelBatcher();
  }

  /** Concurrent `cancelJob` calls sharing `POST /v1/jobs:cancel` requests (`coalesceCancels`). */
  private cancelBatcher(): RequestBatcher<string, Job> {
    const timeoutOf = (timeoutMs: number | undefined): RequestOptions => (timeoutMs === undefined ? {} : { timeoutMs });
    const cancelOne = (jobId: string, timeoutMs: number | undefined): Promise<Job> =>
      this.json('DELETE', `/v1/jobs/${segment(jobId)}`, timeoutOf(timeoutMs));
    const sendAlone = (jobId: string, timeoutMs: number | undefined): Promise<BatchItemResult<Job>> =>
      aloneAsItem(cancelOne(jobId, timeoutMs));
    return new RequestBatcher<string, Job>({
      sendBatch: async (jobIds, timeoutMs) => {
        // A batch of one goes to the single route: a quiet caller's answer is byte for byte today's.
        if (jobIds.length === 1) return [await sendAlone(jobIds[0]!, timeoutMs)];
        let results: CancelBatchResult[];
        try {
          ({ results } = await this.cancelJobs(jobIds, timeoutOf(timeoutMs)));
        } catch (error) {
          // Refused whole as bad input, so nothing was cancelled: each goes alone, and only an
          // item at fault fails (as coalesced creates do).
          if (!(error instanceof TicklerApiError && error.status === 400)) throw error;
          return Promise.all(jobIds.map((jobId) => sendAlone(jobId, timeoutMs)));
        }
        return results.map((result): BatchItemResult<Job> => (result.status === 200 && 'job' in result
          ? { ok: true, value: result.job }
          : { ok: false, error: itemErrorOf(result.status, 'error' in result ? result.error : undefined, 'POST /v1/jobs:cancel') }));
      },
      sendOne: cancelOne,
      // The quotes and comma around each id.
      bytesOf: (jobId) => Buffer.byteLength(jobId, 'utf8') + 3,
    }, {
      itemsMax: batchJobsMax,
      bytesMax: batchRequestBodyBytesMax / 2,
      onBatchRouteMissing: () => {
        this.cancels = undefined;
      },
    });
  }

  /**
   * With `coalesceCreates`: requests the coalesced creates took and creates they carried
   * (a batch of one is one request to `POST /v1/jobs`). Undefined when the option is off.
   */
  get coalescedCreateStats(): { requests: number; items: number } | undefined {
    return this.createStats === undefined ? undefined : { ...this.createStats };
  }

  // Jobs

  /** 201 or 200 (the same `key` and body again) both answer the job. */
  createJob(body: JobCreateRequest, options?: RequestOptions): Promise<Job> {
    const alone = this.creates === undefined || options?.signal !== undefined || options?.timeoutMs !== undefined;
    const item = alone ? undefined : coalescibleCreate(body);
    if (item === undefined || this.creates === undefined) return this.json('POST', '/v1/jobs', { body, ...options });
    return this.creates.submit(item);
  }

  /**
   * As `createJob`, answering only the new (or, for a repeated key and body, the existing)
   * job's id. With `coalesceCreates` its batches ask for `answer: "id"`, so neither side
   * writes or parses the whole job: for callers that keep only the id. Coalesced apart from
   * `createJob`'s calls, in batches of their own.
   */
  async createJobId(body: JobCreateRequest, options?: RequestOptions): Promise<string> {
    const alone = this.createIds === undefined || options?.signal !== undefined || options?.timeoutMs !== undefined;
    const item = alone ? undefined : coalescibleCreate(body);
    if (item === undefined || this.createIds === undefined) {
      return (await this.json<Job>('POST', '/v1/jobs', { body, ...options })).job_id;
    }
    return this.createIds.submit(item);
  }

  getJob(jobId: string, options?: RequestOptions): Promise<Job> {
    return this.json('GET', `/v1/jobs/${segment(jobId)}`, options);
  }

  listJobs(query: ListJobsQuery = {}, options?: RequestOptions): Promise<ListPage<Job>> {
    return this.json('GET', '/v1/jobs', { query: { ...query }, ...options });
  }

  /** Active jobs whose last success is older than their `max_silence_s`, longest silent first, paged. */
  listSilentJobs(query: { team?: string; cursor?: string; limit?: number } = {}, options?: RequestOptions):
    Promise<ListPage<SilentJob>> {
    return this.json('GET', '/v1/jobs:silent', { query: { ...query }, ...options });
  }

  /**
   * Creates the job with this key or replaces its definition (`PUT /v1/jobs/by-key/{key}`, an
   * extension of API.md); `dryRun` answers what would happen and writes nothing.
   */
  upsertJob(key: string, body: JobCreateRequest & { paused?: boolean }, upsert: { dryRun?: boolean; team?: string } = {},
    options?: RequestOptions): Promise<{ job: Job; created: boolean; changed: boolean }> {
    const query = { ...(upsert.dryRun === true ? { dry_run: 'true' } : {}), ...(upsert.team === undefined ? {} : { team: upsert.team }) };
    return this.json('PUT', `/v1/jobs/by-key/${segment(key)}`, { body, query, ...options });
  }

  patchJob(jobId: string, body: JobPatchRequest, options?: RequestOptions): Promise<Job> {
    return this.json('PATCH', `/v1/jobs/${segment(jobId)}`, { body, ...options });
  }

  cancelJob(jobId: string, options?: RequestOptions): Promise<Job> {
    // An id that is not a string (an untyped caller) goes alone, answered as the single route answers it.
    const alone = this.cancels === undefined || options?.signal !== undefined || options?.timeoutMs !== undefined ||
      typeof jobId !== 'string';
    if (alone || this.cancels === undefined) return this.json('DELETE', `/v1/jobs/${segment(jobId)}`, options);
    return this.cancels.submit(jobId);
  }

  /**
   * Cancels up to 1,000 jobs in one request and one transaction (`POST /v1/jobs:cancel`, an
   * extension of API.md); each id answers for itself, in order (an unknown one `404`).
   */
  cancelJobs(jobIds: string[], options?: RequestOptions): Promise<{ results: CancelBatchResult[] }> {
    return this.json('POST', '/v1/jobs:cancel', { body: { job_ids: jobIds }, ...options });
  }

  /** As `cancelJobs`, with `answer: 'status'`: a cancelled item answers its status without the job. */
  cancelJobsBriefly(jobIds: string[], options?: RequestOptions): Promise<{ results: CancelBatchStatusResult[] }> {
    return this.json('POST', '/v1/jobs:cancel', { body: { job_ids: jobIds, answer: 'status' }, ...options });
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

  /**
   * As `batchCreateJobs`, answering each accepted item's `job_id` instead of the whole job
   * (`answer: "id"`): for bulk loads that keep only the ids.
   */
  batchCreateJobIds(jobs: JobCreateRequest[], options?: RequestOptions): Promise<{ results: BatchIdResult[] }> {
    return this.json('POST', '/v1/jobs:batch', { body: { jobs, answer: 'id' }, ...options });
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
    const timeoutMs = options?.timeoutMs ?? this.requestTimeoutMs + (body.wait_s ?? 0) * 1_000 + clientLongPollTimeoutHeadroomMs;
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
    options: SendOptions = {},
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

  private async send(method: string, path: string, options: SendOptions): Promise<TransportAnswer> {
    const url = this.baseUrl + path + queryString(options.query);
    const headers: Record<string, string> = { accept: 'application/json' };
    if (this.apiKey !== undefined) headers['authorization'] = `Bearer ${this.apiKey}`;
    const body = options.bodyText ?? (options.body === undefined ? undefined : JSON.stringify(options.body));
    if (body !== undefined) headers['content-type'] = 'application/json';
    let response: TransportAnswer;
    try {
      response = await this.transport(url, {
        method,
        headers,
        body,
        ...(options.signal === undefined ? {} : { signal: options.signal }),
        timeoutMs: options.timeoutMs ?? this.requestTimeoutMs,
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

/**
 * A create's text for a batch, or undefined when it must go alone to be answered exactly as
 * today: a body that is not a JSON object, cannot be serialized (the single path throws the
 * same error to its caller), or is over the single route's body limit (a 413 there, while the
 * batch route would take it).
 */
function coalescibleCreate(body: unknown): CreateText | undefined {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return undefined;
  let text: unknown;
  try {
    text = JSON.stringify(body);
  } catch {
    return undefined; // Sent alone, where JSON.stringify throws the same error to the caller.
  }
  if (typeof text !== 'string' || !text.startsWith('{')) return undefined;
  const bytes = Buffer.byteLength(text, 'utf8');
  return bytes > requestBodyBytesMax ? undefined : { text, bytes };
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
