/**
 * Errors of the worker SDK. `TicklerApiError` is an answer from the server in the error
 * shape of API.md; `TicklerNetworkError` is a request that got no answer (connection
 * refused, reset, timed out). A handler throws `PermanentError` to send its run straight
 * to the dead-letter queue instead of retrying it.
 */

/** An error answer of the tickler API: `{"error": {"code", "message", "field"}}` with its status. */
export class TicklerApiError extends Error {
  readonly status: number;
  /** The stable code of API.md's error table, or `http_<status>` when the body was not an error document. */
  readonly code: string;
  readonly field: string | undefined;
  /** From `Retry-After` on a 429 or 503, when the server sent one. */
  readonly retryAfterS: number | undefined;

  constructor(options: {
    status: number;
    code: string;
    message: string;
    field?: string;
    retryAfterS?: number;
    cause?: unknown;
  }) {
    super(options.message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'TicklerApiError';
    this.status = options.status;
    this.code = options.code;
    this.field = options.field;
    this.retryAfterS = options.retryAfterS;
  }

  /** Whether repeating the same request later may succeed (429 and 5xx). */
  get retryable(): boolean {
    return this.status === 429 || this.status >= 500;
  }
}

/** A request that got no HTTP answer at all. */
export class TicklerNetworkError extends Error {
  constructor(message: string, options: { cause: unknown }) {
    super(message, options);
    this.name = 'TicklerNetworkError';
  }
}

/**
 * Thrown by a handler when retrying cannot help (bad payload, a refused operation): the run
 * completes as `failed_permanent` and goes to the DLQ at once.
 */
export class PermanentError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'PermanentError';
  }
}

export function isTicklerApiError(error: unknown, code?: string): error is TicklerApiError {
  return error instanceof TicklerApiError && (code === undefined || error.code === code);
}
