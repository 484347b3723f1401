/**
 * Keyset cursors of every paged list (jobs, runs, silent jobs), on both stores: opaque
 * base64url of the last item's `[timeMs, id]`, the key the list is ordered by.
 */
import { TicklerError } from '../errors.js';

export function encodeCursor(timeMs: number, id: string): string {
  return Buffer.from(JSON.stringify([timeMs, id]), 'utf8').toString('base64url');
}

/** The key a cursor carries; a text this server did not make is the client's mistake (400). */
export function decodeCursor(cursor: string): { timeMs: number; id: string } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch (error) {
    throw new TicklerError('invalid_request', 'cursor is not one this server issued', { field: 'cursor', cause: error });
  }
  if (!Array.isArray(parsed) || parsed.length !== 2 || !Number.isSafeInteger(parsed[0]) || typeof parsed[1] !== 'string') {
    throw new TicklerError('invalid_request', 'cursor is not one this server issued', { field: 'cursor' });
  }
  return { timeMs: parsed[0] as number, id: parsed[1] };
}
