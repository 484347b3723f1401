/**
 * What a chaos worker saw, recorded at the HTTP boundary (or, for a worker straight to
 * PostgreSQL, at the `WorkerApi` boundary: recording-worker-api.ts, with the same records): a `fetch` for the worker SDK's
 * client that writes every lease, heartbeat and completion — and the server's answer to each
 * — to the worker's history. Recording the wire rather than the client's methods keeps the
 * history complete whichever routes the SDK uses (one request per run, or the batch routes
 * `POST /v1/runs:complete` and `/v1/runs:heartbeat`).
 *
 * It also plays the `outlive` behaviour's part: the heartbeats of a silenced attempt never
 * leave the process and are answered as if accepted, so the handler runs on past its lease
 * and its late completion must be refused.
 */
import type { AnswerOutcome } from './history.js';
import type { HistoryRecorder } from './recorder.js';

export interface RecordingFetchOptions {
  recorder: HistoryRecorder;
  workerName: string;
  nowMs: () => number;
  /** Whether a freshly leased run's attempt withholds its heartbeats. */
  silences(run: LeasedRunWire): boolean;
  fetch?: typeof fetch;
}

/** The fields of a leased run this module reads. */
export interface LeasedRunWire {
  run_id: string;
  job_id: string;
  scheduled_at: string;
  fire_at: string;
  attempt: number;
  fencing_token: string;
  lease_expires_at: string;
  ready_at?: string;
  payload?: unknown;
}

export interface ItemAnswer {
  outcome: AnswerOutcome;
  leaseExpiresAtMs?: number;
}

export interface WorkerCall {
  runId: string;
  fencingToken: string;
  status?: 'succeeded' | 'failed' | 'failed_permanent';
}

const singleCompletePath = /^\/v1\/runs\/([^/]+)\/complete$/;
const singleHeartbeatPath = /^\/v1\/runs\/([^/]+)\/heartbeat$/;

/** The outcome an error answer stands for; a 5xx or no answer leaves the call's effect unknown. */
export function outcomeOfAnswer(status: number, errorCode: string | undefined): AnswerOutcome {
  if (status >= 200 && status < 300) return 'accepted';
  if (errorCode === 'stale_token' || errorCode === 'cancelled' || errorCode === 'not_found') return errorCode;
  return status >= 500 ? 'unknown' : 'error';
}

function errorCodeOf(document: unknown): string | undefined {
  const code = (document as { error?: { code?: unknown } } | null | undefined)?.error?.code;
  return typeof code === 'string' ? code : undefined;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined; // not JSON (a proxy's page, an empty body): judged by status alone
  }
}

/** What a chaos worker records of its calls, whichever transport makes them (HTTP, or straight to PostgreSQL). */
export interface WorkerCallRecorder {
  /** Each leased run as a `dispatch`; notes the attempts whose heartbeats are silenced. */
  recordLeases(document: unknown): void;
  /** Each call with its answer, in order; a call with no answer is `unknown`. */
  recordCalls(kind: 'heartbeat' | 'completion', sentAtMs: number, calls: readonly WorkerCall[], answers: readonly ItemAnswer[]): void;
  /** Whether heartbeats under this token never leave the process (the `outlive` behaviour). */
  isSilenced(fencingToken: string): boolean;
}

export function workerCallRecorder(options: Omit<RecordingFetchOptions, 'fetch'>): WorkerCallRecorder {
  const silentTokens = new Set<string>();
  const { recorder, workerName } = options;

  const recordCalls = (kind: 'heartbeat' | 'completion', sentAtMs: number, calls: readonly WorkerCall[],
    answers: readonly ItemAnswer[]): void => {
    calls.forEach((call, index) => {
      const answer = answers[index] ?? { outcome: 'unknown' };
      if (kind === 'heartbeat') {
        recorder.record({ type: 'heartbeat', sentAtMs, worker: workerName, runId: call.runId, fencingToken: call.fencingToken,
          outcome: answer.outcome, ...(answer.leaseExpiresAtMs === undefined ? {} : { leaseExpiresAtMs: answer.leaseExpiresAtMs }) });
      } else {
        recorder.record({ type: 'completion', sentAtMs, worker: workerName, runId: call.runId,
          fencingToken: call.fencingToken, status: call.status ?? 'succeeded', outcome: answer.outcome });
      }
    });
  };

  const recordLeases = (document: unknown): void => {
    const runs = (document as { runs?: unknown } | undefined)?.runs;
    if (!Array.isArray(runs)) return;
    for (const run of runs as LeasedRunWire[]) {
      if (options.silences(run)) silentTokens.add(run.fencing_token);
      const payload = typeof run.payload === 'object' && run.payload !== null ? run.payload as { create_id?: unknown } : {};
      const readyAtMs = run.ready_at === undefined ? Number.NaN : Date.parse(run.ready_at);
      recorder.record({
        type: 'dispatch', worker: workerName, runId: run.run_id, jobId: run.job_id,
        ...(typeof payload.create_id === 'string' ? { createId: payload.create_id } : {}),
        scheduledAtMs: Date.parse(run.scheduled_at), fireAtMs: Date.parse(run.fire_at), attempt: run.attempt,
        fencingToken: run.fencing_token, leaseExpiresAtMs: Date.parse(run.lease_expires_at),
        ...(readyAtMs > options.nowMs() ? { readyAtMs } : {}),
      });
    }
  };

  return { recordCalls, recordLeases, isSilenced: (fencingToken) => silentTokens.has(fencingToken) };
}

export function recordingFetch(options: RecordingFetchOptions): typeof fetch {
  const inner = options.fetch ?? globalThis.fetch;
  const { recordCalls, recordLeases, isSilenced } = workerCallRecorder(options);

  /** Sends `calls` (all but the silenced heartbeats), records each answer, answers the SDK. */
  const forward = async (request: { url: string; init: RequestInit }, kind: 'heartbeat' | 'completion', batch: boolean,
    calls: WorkerCall[], body: Record<string, unknown>): Promise<Response> => {
    const sentAtMs = options.nowMs();
    let response: Response;
    try {
      response = await inner(request.url, { ...request.init, body: JSON.stringify(body) });
    } catch (error) {
      recordCalls(kind, sentAtMs, calls, []);
      throw error;
    }
    const text = await response.text();
    const document = parseJson(text);
    if (!batch) {
      const leaseExpiresAt = (document as { lease_expires_at?: unknown } | undefined)?.lease_expires_at;
      recordCalls(kind, sentAtMs, calls, [{ outcome: outcomeOfAnswer(response.status, errorCodeOf(document)),
        ...(response.ok && typeof leaseExpiresAt === 'string' ? { leaseExpiresAtMs: Date.parse(leaseExpiresAt) } : {}) }]);
    } else if (response.ok) {
      const results = (document as { results?: unknown } | undefined)?.results;
      const answers = (Array.isArray(results) ? results : []).map((result: { status?: unknown; error?: unknown;
        lease_expires_at?: unknown }): ItemAnswer => ({
        outcome: outcomeOfAnswer(typeof result.status === 'number' ? result.status : 500, errorCodeOf(result)),
        ...(typeof result.lease_expires_at === 'string' ? { leaseExpiresAtMs: Date.parse(result.lease_expires_at) } : {}),
      }));
      recordCalls(kind, sentAtMs, calls, answers);
    } else if (response.status !== 404 && response.status !== 405) {
      // A whole batch refused; a missing route (404/405) is retried per run by the SDK, recorded then.
      const outcome = outcomeOfAnswer(response.status, errorCodeOf(document));
      recordCalls(kind, sentAtMs, calls, calls.map(() => ({ outcome })));
    }
    return new Response(text, { status: response.status, statusText: response.statusText, headers: response.headers });
  };

  const fakeHeartbeatAnswer = (): { status: 200; lease_expires_at: string } =>
    ({ status: 200, lease_expires_at: new Date(options.nowMs()).toISOString() });

  return async (input, init) => {
    const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
    const path = new URL(url).pathname;
    const body = typeof init?.body === 'string' ? parseJson(init.body) as Record<string, unknown> | undefined : undefined;
    const request = { url, init: init ?? {} };
    if (path === '/v1/workers/lease') {
      const response = await inner(url, init);
      if (!response.ok) return response;
      const text = await response.text();
      recordLeases(parseJson(text));
      return new Response(text, { status: response.status, statusText: response.statusText, headers: response.headers });
    }
    if (body === undefined) return inner(url, init);
    const single = singleCompletePath.exec(path) ?? singleHeartbeatPath.exec(path);
    if (single !== null) {
      const runId = decodeURIComponent(single[1] as string);
      const fencingToken = String(body['fencing_token']);
      if (path.endsWith('/heartbeat')) {
        if (isSilenced(fencingToken)) {
          const { lease_expires_at: leaseExpiresAt } = fakeHeartbeatAnswer();
          return Response.json({ lease_expires_at: leaseExpiresAt });
        }
        return forward(request, 'heartbeat', false, [{ runId, fencingToken }], body);
      }
      return forward(request, 'completion', false,
        [{ runId, fencingToken, status: body['status'] as WorkerCall['status'] }], body);
    }
    if (path === '/v1/runs:complete' && Array.isArray(body['completions'])) {
      const items = body['completions'] as { run_id: string; fencing_token: string; status: WorkerCall['status'] }[];
      return forward(request, 'completion', true,
        items.map((item) => ({ runId: item.run_id, fencingToken: item.fencing_token, status: item.status })), body);
    }
    if (path === '/v1/runs:heartbeat' && Array.isArray(body['heartbeats'])) {
      return heartbeatBatch(request, body['heartbeats'] as { run_id: string; fencing_token: string }[]);
    }
    return inner(url, init);
  };

  /** A heartbeat batch: silenced items are answered here, the rest go to the server, in order. */
  async function heartbeatBatch(request: { url: string; init: RequestInit },
    items: { run_id: string; fencing_token: string }[]): Promise<Response> {
    const sent = items.filter((item) => !isSilenced(item.fencing_token));
    if (sent.length === items.length) {
      return forward(request, 'heartbeat', true, sent.map((item) => ({ runId: item.run_id, fencingToken: item.fencing_token })),
        { heartbeats: items });
    }
    let sentResults: unknown[] = [];
    if (sent.length > 0) {
      const response = await forward(request, 'heartbeat', true,
        sent.map((item) => ({ runId: item.run_id, fencingToken: item.fencing_token })), { heartbeats: sent });
      if (!response.ok) return response;
      const results = (parseJson(await response.text()) as { results?: unknown } | undefined)?.results;
      sentResults = Array.isArray(results) ? results : [];
    }
    let next = 0;
    const results = items.map((item) => (isSilenced(item.fencing_token) ? fakeHeartbeatAnswer() : sentResults[next++]));
    return Response.json({ results });
  }
}
