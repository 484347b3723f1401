/**
 * HTTP over a bare socket, for what fetch cannot send or see: a body dribbled a byte at a
 * time, a header over the limit, a connection that never sends a byte, a repeated header, the
 * answer a server writes before it closes. Also an app built by the harness listening on an
 * ephemeral port of 127.0.0.1.
 */
import net from 'node:net';
import type { FastifyInstance } from 'fastify';

export interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  // Tests read answers loosely; assertions pin what matters.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  json: any;
  /** Whether the server closed the connection (as against the answer being complete on a kept-alive one). */
  closed: boolean;
}

export async function listen(app: FastifyInstance): Promise<number> {
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  if (address === null || typeof address === 'string') throw new Error('not listening on a port');
  return address.port;
}

export function connect(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => resolve(socket));
    socket.once('error', reject);
  });
}

/**
 * Reads one answer from the socket: resolves once its whole body (by Content-Length) is in,
 * or the server closed the connection; rejects if neither happened within `capMs`. Sends
 * `request` first when given.
 */
export function readAnswer(socket: net.Socket, request?: string | Buffer, capMs = 10_000): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    let received = Buffer.alloc(0);
    let settled = false;
    const cap = setTimeout(() => {
      settled = true;
      socket.off('data', onData);
      reject(new Error(`no answer within ${capMs} ms: ${JSON.stringify(received.toString().slice(0, 200))}`));
    }, capMs);
    const finish = (closed: boolean): void => {
      if (settled) return;
      const answer = parse(received, closed);
      if (answer === null) {
        if (closed) {
          settled = true;
          clearTimeout(cap);
          reject(new Error(`the connection closed before a whole answer: ${JSON.stringify(received.toString())}`));
        }
        return;
      }
      settled = true;
      clearTimeout(cap);
      socket.off('data', onData);
      resolve(answer);
    };
    const onData = (chunk: Buffer): void => {
      received = Buffer.concat([received, chunk]);
      finish(false);
    };
    socket.on('data', onData);
    socket.once('close', () => {
      if (!settled) finish(true);
    });
    socket.on('error', () => undefined); // a reset after the answer is part of being cut off
    if (request !== undefined) socket.write(request);
  });
}

/** One request on a fresh connection; the answer, and whether the server then closed it. */
export async function rawRequest(port: number, request: string | Buffer): Promise<RawAnswer> {
  const socket = await connect(port);
  try {
    const answer = await readAnswer(socket, request);
    if (!answer.closed) answer.closed = await ended(socket);
    return answer;
  } finally {
    socket.destroy();
  }
}

/** Resolves true once the server ends the connection; false if it has not within `capMs`. */
export function ended(socket: net.Socket, capMs = 10_000): Promise<boolean> {
  if (socket.readableEnded || socket.destroyed) return Promise.resolve(true);
  return new Promise((resolve) => {
    const cap = setTimeout(() => resolve(false), capMs);
    const done = (): void => {
      clearTimeout(cap);
      resolve(true);
    };
    socket.once('end', done);
    socket.once('close', done);
    socket.resume();
  });
}

function parse(received: Buffer, closed: boolean): RawAnswer | null {
  const headEnd = received.indexOf('\r\n\r\n');
  if (headEnd < 0) return null;
  const [statusLine, ...headerLines] = received.subarray(0, headEnd).toString('latin1').split('\r\n');
  const headers: Record<string, string> = {};
  for (const line of headerLines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  const body = received.subarray(headEnd + 4);
  const length = Number(headers['content-length'] ?? Number.NaN);
  if (Number.isFinite(length) ? body.length < length : !closed) return null;
  const text = body.subarray(0, Number.isFinite(length) ? length : body.length).toString('utf8');
  let json: unknown = null;
  try {
    json = text.length > 0 ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(statusLine ?? '')?.[1] ?? 0), headers, json, closed };
}
