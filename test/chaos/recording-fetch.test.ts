// The chaos worker's wire recorder: every lease, heartbeat and completion lands in the history
// with the server's answer, whether the SDK sends one request per run or a batch, and a
// silenced attempt's heartbeats never reach the server. The "server" here is a fetch function
// answering as the API does; what is under test is the recording, not the API.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { parseHistory, type HistoryEvent } from '../../chaos/history.js';
import { HistoryRecorder } from '../../chaos/recorder.js';
import { outcomeOfAnswer, recordingFetch } from '../../chaos/recording-fetch.js';

const base = 'http://127.0.0.1:1';
const leasedRun = (runId: string, token: string, behaviour: string) => ({
  run_id: runId, job_id: `j_${runId}`, scheduled_at: '2026-11-29T00:00:00.000Z', fire_at: '2026-11-29T00:00:00.000Z',
  attempt: 1, fencing_token: token, lease_expires_at: '2026-11-29T00:00:05.000Z',
  payload: { create_id: `c_${runId}`, behaviour },
});

function withRecorder(serve: (path: string, body: unknown) => Response,
  body: (fetchFn: typeof fetch, sent: string[]) => Promise<void>): Promise<HistoryEvent[]> {
  const dir = mkdtempSync(join(tmpdir(), 'tickler-recording-fetch-'));
  const path = join(dir, 'worker.jsonl');
  const recorder = new HistoryRecorder(path, () => 1_000);
  const sent: string[] = [];
  const inner: typeof fetch = (input, init) => {
    const url = new URL(String(input));
    const parsed: unknown = typeof init?.body === 'string' ? JSON.parse(init.body) : undefined;
    sent.push(`${url.pathname} ${typeof init?.body === 'string' ? init.body : ''}`);
    return Promise.resolve(serve(url.pathname, parsed));
  };
  const fetchFn = recordingFetch({ recorder, workerName: 'w1', nowMs: () => 1_000, fetch: inner,
    silences: (run) => (run.payload as { behaviour?: string }).behaviour === 'outlive' });
  return body(fetchFn, sent).then(() => {
    recorder.close();
    const events = parseHistory(readFileSync(path, 'utf8'));
    rmSync(dir, { recursive: true, force: true });
    return events;
  });
}

const post = (fetchFn: typeof fetch, path: string, body: unknown): Promise<Response> =>
  fetchFn(`${base}${path}`, { method: 'POST', body: JSON.stringify(body) });

test('leases, per-run and batched completions are recorded with their answers', async () => {
  const events = await withRecorder((path) => {
    if (path === '/v1/workers/lease') return Response.json({ runs: [leasedRun('r1', '7', 'ok'), leasedRun('r2', '8', 'ok')] });
    if (path === '/v1/runs/r1/complete') return Response.json({ error: { code: 'stale_token', message: 'x' } }, { status: 409 });
    if (path === '/v1/runs:complete') {
      return Response.json({ results: [{ status: 200, run: {} }, { status: 503, error: { code: 'unavailable', message: 'x' } }] });
    }
    return new Response('not found', { status: 404 });
  }, async (fetchFn) => {
    const lease = await post(fetchFn, '/v1/workers/lease', { pool: 'p', max_runs: 2 });
    assert.equal(((await lease.json()) as { runs: unknown[] }).runs.length, 2, 'the SDK still gets the answer');
    assert.equal((await post(fetchFn, '/v1/runs/r1/complete', { fencing_token: '7', status: 'succeeded' })).status, 409);
    await post(fetchFn, '/v1/runs:complete', { completions: [
      { run_id: 'r2', fencing_token: '8', status: 'failed' }, { run_id: 'r3', fencing_token: '9', status: 'succeeded' }] });
  });
  assert.deepEqual(events.filter((event) => event.type === 'dispatch').map((event) => [event.runId, event.createId]),
    [['r1', 'c_r1'], ['r2', 'c_r2']]);
  assert.deepEqual(events.filter((event) => event.type === 'completion')
    .map((event) => [event.runId, event.status, event.outcome]),
  [['r1', 'succeeded', 'stale_token'], ['r2', 'failed', 'accepted'], ['r3', 'succeeded', 'unknown']]);
});

test('a silenced attempt\'s heartbeats never leave the process; the rest of a batch does, in order', async () => {
  let events: HistoryEvent[] = [];
  let sentPaths: string[] = [];
  events = await withRecorder((path, body) => {
    if (path === '/v1/workers/lease') return Response.json({ runs: [leasedRun('quiet', '5', 'outlive')] });
    if (path === '/v1/runs:heartbeat') {
      const items = (body as { heartbeats: unknown[] }).heartbeats;
      return Response.json({ results: items.map(() => ({ status: 200, lease_expires_at: '2026-11-29T00:00:09.000Z' })) });
    }
    return new Response('not found', { status: 404 });
  }, async (fetchFn, sent) => {
    await post(fetchFn, '/v1/workers/lease', { pool: 'p' });
    const single = await post(fetchFn, '/v1/runs/quiet/heartbeat', { fencing_token: '5' });
    assert.equal(single.status, 200);
    const batch = await post(fetchFn, '/v1/runs:heartbeat', { heartbeats: [
      { run_id: 'loud', fencing_token: '6' }, { run_id: 'quiet', fencing_token: '5' }] });
    const results = ((await batch.json()) as { results: { status: number }[] }).results;
    assert.deepEqual(results.map((result) => result.status), [200, 200]);
    sentPaths = [...sent];
  });
  assert.deepEqual(sentPaths.slice(1), ['/v1/runs:heartbeat {"heartbeats":[{"run_id":"loud","fencing_token":"6"}]}'],
    'only the loud heartbeat reached the server');
  assert.deepEqual(events.filter((event) => event.type === 'heartbeat').map((event) => [event.runId, event.outcome]),
    [['loud', 'accepted']]);
});

test('answers map to outcomes: 2xx accepted, fencing codes as they are, 5xx unknown, other 4xx error', () => {
  assert.equal(outcomeOfAnswer(200, undefined), 'accepted');
  assert.equal(outcomeOfAnswer(409, 'stale_token'), 'stale_token');
  assert.equal(outcomeOfAnswer(409, 'cancelled'), 'cancelled');
  assert.equal(outcomeOfAnswer(404, 'not_found'), 'not_found');
  assert.equal(outcomeOfAnswer(503, 'unavailable'), 'unknown');
  assert.equal(outcomeOfAnswer(400, 'invalid_request'), 'error');
});
