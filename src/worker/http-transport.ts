/**
 * The client's default transport: `node:http` (or `node:https`) with a keep-alive agent per
 * client, shaped like the subset of `fetch` the client uses, so a caller's own `fetch` (a
 * recording one in the chaos run, say) still plugs in. Measured on this machine: a 50-run
 * batch request with its 25 KB answer cost ~1.3 ms of CPU through the global fetch (undici's
 * WHATWG streams, AbortSignal plumbing) against ~0.4 ms through `node:http`, and a worker
 * sends two such requests per batch of runs.
 */
import http from 'node:http';
import https from 'node:https';

/** What the client reads of an answer; fetch's `Response` has all of it. */
export interface TransportAnswer {
  readonly ok: boolean;
  readonly status: number;
  readonly headers: { get(name: string): string | null; has(name: string): boolean };
  text(): Promise<string>;
}

export interface TransportRequest {
  method: string;
  headers: Record<string, string>;
  body: string | undefined;
  /** The caller's own signal, if it gave one. */
  signal?: AbortSignal;
  /** The request fails with a `TimeoutError` once this long has passed without a whole answer. */
  timeoutMs: number;
}

export type Transport = (url: string, request: TransportRequest) => Promise<TransportAnswer>;

/**
 * A `fetch` as a transport: the timeout becomes an `AbortSignal.timeout`, joined to the
 * caller's signal. (The default transport arms a plain timer instead: `AbortSignal.timeout`
 * cost ~10 us of CPU per request on this machine, a plain timer under 0.5 us, and its timer
 * stays armed for the whole timeout after the answer.)
 */
export function fetchTransport(fetchFunction: typeof fetch): Transport {
  return (url, { method, headers, body, signal, timeoutMs }) => {
    const timeout = AbortSignal.timeout(timeoutMs);
    return fetchFunction(url, { method, headers, body, signal: signal === undefined ? timeout : AbortSignal.any([signal, timeout]) });
  };
}

/** A transport over one keep-alive agent; requests to other origins work too, without reuse. */
export function httpTransport(): Transport {
  const agents = {
    'http:': new http.Agent({ keepAlive: true }),
    'https:': new https.Agent({ keepAlive: true }),
  };
  return (url, request) => new Promise<TransportAnswer>((resolve, reject) => {
    const { signal } = request;
    if (signal?.aborted === true) {
      reject(abortReasonOf(signal));
      return;
    }
    const target = new URL(url);
    const protocol = target.protocol === 'https:' ? 'https:' : 'http:';
    const headers: Record<string, string | number> = { ...request.headers };
    if (request.body !== undefined) headers['content-length'] = Buffer.byteLength(request.body, 'utf8');
    const call = (protocol === 'https:' ? https : http).request(target, { method: request.method, headers, agent: agents[protocol] });
    let abortedBy: Error | null = null;
    const abort = (reason: Error): void => {
      abortedBy = reason;
      call.destroy(reason);
    };
    const onAbort = (): void => abort(abortReasonOf(signal!));
    signal?.addEventListener('abort', onAbort, { once: true });
    const timer = setTimeout(() => abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError')),
      request.timeoutMs);
    const settle = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    };
    call.once('error', (error) => {
      settle();
      reject(error);
    });
    call.once('response', (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.once('error', (error) => {
        settle();
        reject(error);
      });
      response.once('close', () => {
        if (response.complete) return;
        settle();
        reject(abortedBy ?? new Error('the connection closed before the answer ended'));
      });
      response.once('end', () => {
        settle();
        const status = response.statusCode ?? 0;
        const text = Buffer.concat(chunks).toString('utf8');
        const answerHeaders = response.headers;
        resolve({
          ok: status >= 200 && status < 300,
          status,
          headers: {
            get: (name) => headerText(answerHeaders[name.toLowerCase()]),
            has: (name) => answerHeaders[name.toLowerCase()] !== undefined,
          },
          text: () => Promise.resolve(text),
        });
      });
    });
    call.end(request.body);
  });
}

function headerText(value: string | string[] | undefined): string | null {
  if (value === undefined) return null;
  return Array.isArray(value) ? value.join(', ') : value;
}

function abortReasonOf(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  return reason instanceof Error ? reason : new Error(`request aborted: ${String(reason)}`);
}
