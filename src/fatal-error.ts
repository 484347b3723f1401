/**
 * A failure that waiting cannot heal: a data directory another live process holds, a store
 * whose schema a newer build wrote, an API key the server refuses. Retrying such a thing only
 * fills the logs, so the process ends instead, with a non-zero exit code and the message as
 * one line: what failed, why, and what to do. No stack trace follows it: nothing in tickler's
 * own code is wrong. What can heal (a refused connection, a 5xx, a 503) is retried instead.
 */
export class FatalError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'FatalError';
  }
}

export function isFatalError(error: unknown): error is FatalError {
  return error instanceof FatalError;
}
