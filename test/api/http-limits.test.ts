/**
 * The HTTP server's timeouts and connection cap (src/api/http-limits.ts), on a real socket of
 * 127.0.0.1 with short timeouts: a body dribbled a byte at a time is cut with 408, a
 * connection that sends nothing is closed, a long-poll parked past the request timeout is
 * answered all the same, and connections over the cap are answered 503 and closed, each in
 * API.md's error shape. The waits are for the server's own answers and closes.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type net from 'node:net';
import { startHarness, type Harness } from './harness.js';
import { connect, ended, listen, rawRequest, readAnswer } from './raw-http.js';

const shortLimits = { headersTimeoutMs: 200, requestTimeoutMs: 400, idleTimeoutMs: 30_000, connectionsMax: 1_000 };

function dribble(socket: net.Socket, text: string, everyMs: number): () => void {
  let index = 0;
  const timer = setInterval(() => {
    if (index < text.length && socket.writable) socket.write(text[index++]!);
  }, everyMs);
  return () => clearInterval(timer);
}

function assertErrorShape(json: unknown, code: string): void {
  const body = json as { error: { code: string; message: string } };
  assert.equal(body.error.code, code, JSON.stringify(json));
  assert.equal(typeof body.error.message, 'string');
  assert.deepEqual(Object.keys(body), ['error']);
}

describe('request timeouts', () => {
  let h: Harness;
  let port: number;
  before(async () => {
    h = await startHarness({ config: { http: shortLimits } });
    port = await listen(h.app);
  });
  after(async () => {
    await h.close();
  });

  /** Sends `text` a byte every 50 ms after `head`; the server must answer 408 and close the connection. */
  async function assertCutWhileDribbling(head: string, text: string): Promise<void> {
    const socket = await connect(port);
    socket.write(head);
    const stop = dribble(socket, text, 50);
    try {
      const answer = await readAnswer(socket);
      assert.equal(answer.status, 408);
      assertErrorShape(answer.json, 'request_timeout');
      assert.ok(await ended(socket), 'and the connection is closed');
    } finally {
      stop();
      socket.destroy();
    }
  }

  it('cuts a body sent a byte at a time with 408 request_timeout', async () => {
    const body = JSON.stringify({ schedule: { delay_s: 900 }, pool: 'slow' });
    // The whole body would take ~2 s, five times the request timeout.
    await assertCutWhileDribbling(
      `POST /v1/jobs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n`, body);
    assert.deepEqual((await h.call('GET', '/v1/jobs')).json.items, [], 'nothing was created');
  });

  it('cuts headers sent a byte at a time, and closes a connection that sends nothing', async () => {
    const silent = await connect(port);
    try {
      await assertCutWhileDribbling('', 'GET /v1/jobs HTTP/1.1\r\nhost: x\r\nx-padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n');
      assert.ok(await ended(silent), 'the silent connection is closed');
    } finally {
      silent.destroy();
    }
  });

  it('does not count a long-poll\'s wait: it is answered after the request timeout has passed', async () => {
    const body = JSON.stringify({ pool: 'quiet', wait_s: 60 });
    const poll = await connect(port);
    const polled = readAnswer(poll, `POST /v1/workers/lease HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`);
    let answered = false;
    void polled.then(() => {
      answered = true;
    }, () => undefined);
    // A request cut by its timeout on another connection shows that time has passed.
    const slow = await connect(port);
    slow.write('POST /v1/jobs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 50\r\n\r\n{');
    assert.equal((await readAnswer(slow)).status, 408);
    slow.destroy();
    assert.equal(answered, false, 'the long-poll is still parked');
    // A job due at once in its pool: its run goes to the parked long-poll.
    const created = await h.call('POST', '/v1/jobs', { body: { schedule: { delay_s: 0 }, pool: 'quiet' } });
    assert.equal(created.status, 201);
    const answer = await polled;
    assert.equal(answer.status, 200);
    assert.equal(answer.json.runs.length, 1);
    assert.equal(answer.json.runs[0].job_id, created.json.job_id);
    poll.destroy();
  });
});

describe('the connection cap', () => {
  let h: Harness;
  let port: number;
  before(async () => {
    h = await startHarness({ config: { http: { headersTimeoutMs: 10_000, requestTimeoutMs: 10_000, idleTimeoutMs: 30_000, connectionsMax: 2 } } });
    port = await listen(h.app);
  });
  after(async () => {
    await h.close();
  });

  it('answers connections over the cap 503 unavailable and closes them; a freed place is taken again', async () => {
    const held: net.Socket[] = [];
    for (let index = 0; index < 2; index++) {
      const socket = await connect(port);
      // An answer on a kept-alive connection: the server has counted it.
      assert.equal((await readAnswer(socket, 'GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n')).status, 200);
      held.push(socket);
    }
    for (let index = 0; index < 3; index++) {
      const refused = await rawRequest(port, 'GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n');
      assert.equal(refused.status, 503);
      assertErrorShape(refused.json, 'unavailable');
      assert.equal(refused.headers['retry-after'], '1');
      assert.ok(refused.closed, 'and closed');
    }
    const closedOne = held.shift()!;
    const gone = new Promise((resolve) => closedOne.once('close', resolve));
    closedOne.end();
    await gone;
    // The server counts the place free once it has seen the close: ask until it has.
    for (let attempt = 0; ; attempt++) {
      const socket = await connect(port);
      const answer = await readAnswer(socket, 'GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n');
      socket.destroy();
      if (answer.status === 200) break;
      assert.equal(answer.status, 503);
      assert.ok(attempt < 1_000, 'the freed place was never taken again');
      await new Promise((resolve) => setImmediate(resolve));
    }
    for (const socket of held) socket.destroy();
  });
});
