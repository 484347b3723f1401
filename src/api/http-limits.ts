/**
 * The HTTP server's own limits (limits.ts `HttpLimits`) and the answers to what never reaches
 * a route. Node cuts a request whose head or whole body is not in by its timeout, a request
 * line and headers over 16 KiB, and bytes that are not HTTP; it reports each on the socket
 * (`clientError`), and `answerClientError` answers it in API.md's error shape (fastify's own
 * answer is in another) before closing the connection. A connection over the cap is
 * answered `503 unavailable` the same way and closed before any request of it is read.
 *
 * Fastify's `connectionTimeout` (socket inactivity) stays off: a long-poll waits up to 60 s
 * with nothing on the wire, after its request was read, which the request timeout does not
 * count. A kept-alive connection's idle time is `idleTimeoutMs` (Node's `keepAliveTimeout`).
 */
import { STATUS_CODES, type ServerOptions, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { TicklerError } from '../errors.js';
import { apiHttpTimeoutCheckIntervalMsMax, httpHeadersBytesMax, type HttpLimits } from '../limits.js';

/** The fastify options that set the limits; `onError` counts what was answered. */
export function httpServerOptions(limits: HttpLimits, onError: (code: string) => void) {
  const http: ServerOptions = {
    headersTimeout: limits.headersTimeoutMs,
    requestTimeout: limits.requestTimeoutMs,
    keepAliveTimeout: limits.idleTimeoutMs,
    maxHeaderSize: httpHeadersBytesMax,
    connectionsCheckingInterval: Math.max(10, Math.min(apiHttpTimeoutCheckIntervalMsMax, Math.floor(limits.headersTimeoutMs / 4))),
  };
  return {
    http,
    requestTimeout: limits.requestTimeoutMs,
    keepAliveTimeout: limits.idleTimeoutMs,
    connectionTimeout: 0,
    clientErrorHandler: (error: Error & { code?: string }, socket: Socket) => answerClientError(error, socket, limits, onError),
  };
}

function answerClientError(error: Error & { code?: string }, socket: Socket, limits: HttpLimits, onError: (code: string) => void): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  const answer = clientErrorAnswer(error.code, limits);
  // A response already under way (its headers sent) cannot be followed by another one.
  const response = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
  if (socket.writable && response?.headersSent !== true) {
    onError(answer.code);
    socket.write(rawAnswer(answer));
  }
  socket.destroy();
}

function clientErrorAnswer(code: string | undefined, limits: HttpLimits): TicklerError {
  switch (code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new TicklerError('request_timeout', `the request was not received in time: headers within ${limits.headersTimeoutMs / 1000} s, ` +
        `the whole request within ${limits.requestTimeoutMs / 1000} s`);
    case 'HPE_HEADER_OVERFLOW':
      return new TicklerError('headers_too_large', `the request line and headers are over ${httpHeadersBytesMax} bytes`);
    default:
      return new TicklerError('invalid_request', 'the request is not valid HTTP/1.1');
  }
}

/** A whole HTTP/1.1 response carrying the error document, for a socket no route answers on. */
function rawAnswer(error: TicklerError, headers: Record<string, string> = {}): string {
  const body = JSON.stringify(error.toBody());
  const lines = [`HTTP/1.1 ${error.status} ${STATUS_CODES[error.status] ?? ''}`, 'content-type: application/json; charset=utf-8',
    `content-length: ${Buffer.byteLength(body)}`, 'connection: close',
    ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`)];
  return `${lines.join('\r\n')}\r\n\r\n${body}`;
}

/**
 * Holds the server to `connectionsMax` open connections. Node's own `maxConnections` closes
 * the ones over it without a word; here they get `503 unavailable` (with `Retry-After`) and
 * are closed once it is written, before Node's HTTP parser ever sees them.
 */
export function capConnections(server: Server, connectionsMax: number, onError: (code: string) => void): void {
  const accept = server.listeners('connection') as ((this: Server, socket: Socket) => void)[];
  server.removeAllListeners('connection');
  let open = 0;
  server.on('connection', (socket: Socket) => {
    if (open >= connectionsMax) {
      onError('unavailable');
      // A client that resets first must not make the write's error an unhandled one.
      socket.on('error', () => socket.destroy());
      const answer = new TicklerError('unavailable', `the server has ${connectionsMax} connections open, its limit; retry`);
      socket.end(rawAnswer(answer, { 'retry-after': '1' }), () => socket.destroy());
      return;
    }
    open++;
    socket.once('close', () => {
      open--;
    });
    for (const listener of accept) listener.call(server, socket);
  });
}
