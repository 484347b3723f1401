/**
 * The error catalogue of API.md: a stable code, its HTTP status and whether a client may
 * retry. Codes are never reused. Expected failures travel as `TicklerError`; anything else
 * is a programmer error and answers 500.
 */

export const errorCatalogue = {
  invalid_json: { status: 400, retryable: false },
  invalid_request: { status: 400, retryable: false },
  invalid_schedule: { status: 400, retryable: false },
  invalid_timezone: { status: 400, retryable: false },
  unauthorized: { status: 401, retryable: false },
  forbidden: { status: 403, retryable: false },
  not_found: { status: 404, retryable: false },
  key_conflict: { status: 409, retryable: false },
  stale_token: { status: 409, retryable: false },
  cancelled: { status: 409, retryable: false },
  invalid_state: { status: 409, retryable: false },
  request_timeout: { status: 408, retryable: false },
  payload_too_large: { status: 413, retryable: false },
  unsupported_media_type: { status: 415, retryable: false },
  headers_too_large: { status: 431, retryable: false },
  rate_limited: { status: 429, retryable: true },
  unavailable: { status: 503, retryable: true },
  /** A programmer error, never a client's mistake; the log has the details. */
  internal: { status: 500, retryable: false },
} as const;

export type ErrorCode = keyof typeof errorCatalogue;

export class TicklerError extends Error {
  readonly code: ErrorCode;
  readonly field: string | undefined;
  readonly status: number;

  constructor(code: ErrorCode, message: string, options?: { field?: string; cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'TicklerError';
    this.code = code;
    this.field = options?.field;
    this.status = errorCatalogue[code].status;
  }

  toBody(): { error: { code: ErrorCode; message: string; field?: string } } {
    return {
      error: {
        code: this.code,
        message: this.message,
        ...(this.field === undefined ? {} : { field: this.field }),
      },
    };
  }
}

export function isTicklerError(error: unknown): error is TicklerError {
  return error instanceof TicklerError;
}
