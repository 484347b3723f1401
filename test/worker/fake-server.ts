/**
 * A tiny real HTTP server that speaks the worker routes of API.md, for SDK and CLI tests.
 * Lease requests long-poll until the test offers runs (or the client hangs up); heartbeat
 * and complete answers are scripted per run, and the batch routes (`/v1/runs:complete`,
 * `/v1/runs:heartbeat`) answer each item with the same script (a `destroy` for any item
 * cuts the whole batch's connection). Offered runs go to parked leases in arrival order as the
 * real server leases them: a run whose `ready_at` is after `nowMs()` only to a lease with
 * `ahead_ms`, and ready runs up to a lease's `max_ready`. With `batchRoutes = false` they answer 404, as a
 * server without the extension does. Every request is recorded and announced as an
 * event, so tests wait on what happened instead of sleeping.
 */
import { EventEmitter, once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { CompleteRequest, LeasedRun, LeaseRequest } from '../../src/worker/wire.js';

/** A scripted answer: a status and JSON body, or `destroy` to cut the connection (a network error). */
export type ScriptedAnswer = { status: number; body: unknown } | 'destroy';

export interface RecordedRequest {
  method: string;
  path: string;
  headers: IncomingMessage['headers'];
  body: unknown;
}

interface PendingLease {
  request: LeaseRequest;
  response: ServerResponse;
}

export class FakeTicklerServer extends EventEmitter {
  readonly requests: RecordedRequest[] = [];
  readonly leases: LeaseRequest[] = [];
  readonly heartbeats: { runId: string; fencingToken: string }[] = [];
  readonly completions: { runId: string; body: CompleteRequest }[] = [];
  /** Answers for `POST /v1/workers/lease` taken before long-polling, in order (e.g. a 503). */
  readonly leaseAnswers: ScriptedAnswer[] = [];
  heartbeatAnswer: (runId: string) => ScriptedAnswer = () => ({
    status: 200,
    body: { lease_expires_at: new Date(0).toISOString() },
  });
  completeAnswer: (runId: string) => ScriptedAnswer = () => ({ status: 200, body: {} });
  /** Whether the batch routes exist. */
  batchRoutes = true;
  /** False: `runs:complete` refuses the `answer` field (400 on it), as a server from before it did. */
  briefAnswers = true;
  /** Items per batch request received, in order: how well the SDK coalesced. */
  readonly completeBatchSizes: number[] = [];
  readonly heartbeatBatchSizes: number[] = [];
  /** While set, batch completions are recorded but answered only once it resolves. */
  completeGate: Promise<void> | undefined;
  /** The time against which an offered run's `ready_at` makes it a run ahead (tests pass their clock's). */
  nowMs: () => number = Date.now;
  /** Other routes (for client tests): `METHOD /path?query` → answer. */
  readonly routes = new Map<string, ScriptedAnswer>();
  private readonly server: Server;
  private offered: LeasedRun[] = [];
  private readonly pendingLeases: PendingLease[] = [];
  url = '';

  constructor() {
    super();
    this.server = createServer((request, response) => {
      void this.handle(request, response);
    });
  }

  /** On `port`, or a free one. */
  async listen(port = 0): Promise<void> {
    this.server.listen(port, '127.0.0.1');
    await once(this.server, 'listening');
    const address = this.server.address() as AddressInfo;
    this.url = `http://127.0.0.1:${address.port}`;
  }

  async close(): Promise<void> {
    for (const pending of this.pendingLeases.splice(0)) pending.response.destroy();
    this.server.closeAllConnections();
    await new Promise<void>((resolve, reject) => this.server.close((error) => (error ? reject(error) : resolve())));
  }

  /** Makes runs available; a waiting lease request is answered at once. */
  offer(...runs: LeasedRun[]): void {
    this.offered.push(...runs);
    this.answerPendingLeases();
  }

  /** Resolves with the next event of `name` whose argument passes `predicate`. */
  next<T>(name: string, predicate: (value: T) => boolean = () => true): Promise<T> {
    // One listener for every event until one passes: a batch emits its items' events in one
    // go, and re-listening after each (`once` in a loop) missed the rest of them.
    return new Promise((resolve) => {
      const listener = (value: T): void => {
        if (!predicate(value)) return;
        this.off(name, listener);
        resolve(value);
      };
      this.on(name, listener);
    });
  }

  private async handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    const body: unknown = text === '' ? undefined : JSON.parse(text);
    const url = new URL(request.url ?? '/', 'http://fake');
    const method = request.method ?? 'GET';
    this.requests.push({ method, path: url.pathname + url.search, headers: request.headers, body });
    const runMatch = /^\/v1\/runs\/([^/]+)\/(heartbeat|complete)$/.exec(url.pathname);
    if (method === 'POST' && url.pathname === '/v1/workers/lease') {
      this.leases.push(body as LeaseRequest);
      this.emit('lease', body);
      const scripted = this.leaseAnswers.shift();
      if (scripted !== undefined) return answer(response, scripted);
      this.pendingLeases.push({ request: body as LeaseRequest, response });
      response.on('close', () => {
        const index = this.pendingLeases.findIndex((pending) => pending.response === response);
        if (index >= 0) this.pendingLeases.splice(index, 1);
      });
      this.answerPendingLeases();
    } else if (method === 'POST' && runMatch?.[2] === 'heartbeat') {
      const runId = decodeURIComponent(runMatch[1]!);
      this.heartbeats.push({ runId, fencingToken: (body as { fencing_token: string }).fencing_token });
      answer(response, this.heartbeatAnswer(runId));
      this.emit('heartbeat', runId);
    } else if (method === 'POST' && runMatch?.[2] === 'complete') {
      const runId = decodeURIComponent(runMatch[1]!);
      this.completions.push({ runId, body: body as CompleteRequest });
      answer(response, this.completeAnswer(runId));
      this.emit('complete', { runId, body });
    } else if (method === 'POST' && this.batchRoutes && url.pathname === '/v1/runs:complete') {
      const batch = body as { completions: (CompleteRequest & { run_id: string })[]; answer?: string };
      if (!this.briefAnswers && batch.answer !== undefined) {
        answer(response, { status: 400, body: { error: { code: 'invalid_request', message: 'unknown field', field: 'answer' } } });
        return;
      }
      await this.handleCompleteBatch(response, batch.completions);
    } else if (method === 'POST' && this.batchRoutes && url.pathname === '/v1/runs:heartbeat') {
      this.handleHeartbeatBatch(response, (body as { heartbeats: { run_id: string; fencing_token: string }[] }).heartbeats);
    } else {
      const scripted = this.routes.get(`${method} ${url.pathname}${url.search}`);
      answer(response, scripted ?? { status: 404, body: { error: { code: 'not_found', message: 'no such route' } } });
    }
  }

  private async handleCompleteBatch(response: ServerResponse, items: (CompleteRequest & { run_id: string })[]): Promise<void> {
    this.completeBatchSizes.push(items.length);
    this.emit('completeBatch', items.length);
    if (this.completeGate !== undefined) await this.completeGate;
    const answers = items.map(({ run_id: runId, ...body }) => {
      this.completions.push({ runId, body });
      return this.completeAnswer(runId);
    });
    answerBatch(response, answers, 'run');
    for (const { run_id: runId, ...body } of items) this.emit('complete', { runId, body });
  }

  private handleHeartbeatBatch(response: ServerResponse, items: { run_id: string; fencing_token: string }[]): void {
    this.heartbeatBatchSizes.push(items.length);
    const answers = items.map(({ run_id: runId, fencing_token: fencingToken }) => {
      this.heartbeats.push({ runId, fencingToken });
      return this.heartbeatAnswer(runId);
    });
    answerBatch(response, answers, 'lease_expires_at');
    for (const { run_id: runId } of items) this.emit('heartbeat', runId);
  }

  private answerPendingLeases(): void {
    for (const pending of [...this.pendingLeases]) {
      if (this.offered.length === 0) return;
      const runs = this.takeFor(pending.request);
      if (runs.length === 0) continue;
      this.pendingLeases.splice(this.pendingLeases.indexOf(pending), 1);
      answer(pending.response, { status: 200, body: { runs } });
    }
  }

  /** The offered runs a lease takes, oldest first: runs ahead only with `ahead_ms`, ready ones up to `max_ready`. */
  private takeFor(request: LeaseRequest): LeasedRun[] {
    const nowMs = this.nowMs();
    const max = request.max;
    const readyMax = Math.min(request.max_ready ?? max, max);
    const taken: LeasedRun[] = [];
    let ready = 0;
    this.offered = this.offered.filter((run) => {
      if (taken.length >= max) return true;
      const ahead = run.ready_at !== undefined && Date.parse(run.ready_at) > nowMs;
      if (ahead ? request.ahead_ms === undefined : ready >= readyMax) return true;
      if (!ahead) ready++;
      taken.push(run);
      return false;
    });
    return taken;
  }
}

function answer(response: ServerResponse, scripted: ScriptedAnswer): void {
  if (scripted === 'destroy') {
    response.destroy();
    return;
  }
  response.writeHead(scripted.status, { 'content-type': 'application/json' });
  response.end(JSON.stringify(scripted.body));
}

/** One batch answer from per-item scripts: a 200 item carries its body under `name`. */
function answerBatch(response: ServerResponse, answers: ScriptedAnswer[], name: 'run' | 'lease_expires_at'): void {
  if (answers.some((scripted) => scripted === 'destroy')) {
    response.destroy();
    return;
  }
  const results = answers.map((scripted) => {
    const { status, body } = scripted as { status: number; body: unknown };
    if (status !== 200) return { status, ...(body as object) };
    return { status, [name]: name === 'run' ? body : (body as { lease_expires_at: string }).lease_expires_at };
  });
  answer(response, { status: 200, body: { results } });
}

let runSequence = 0;

/** A leased run as the server would hand it out, expiring `leaseS` after `nowMs`. */
export function leasedRun(nowMs: number, overrides: Partial<LeasedRun> = {}, leaseS = 3): LeasedRun {
  runSequence += 1;
  return {
    run_id: `run-${runSequence}`,
    job_id: `job-${runSequence}`,
    attempt: 1,
    scheduled_at: new Date(nowMs).toISOString(),
    fire_at: new Date(nowMs).toISOString(),
    payload: { n: runSequence },
    fencing_token: `token-${runSequence}`,
    lease_expires_at: new Date(nowMs + leaseS * 1_000).toISOString(),
    ...overrides,
  };
}
