/**
 * Small checks the routes share: the caller of an authenticated route, body-less POSTs,
 * ids that cannot exist, and list paging.
 */
import type { FastifyRequest } from 'fastify';
import { TicklerError } from '../errors.js';
import * as limits from '../limits.js';
import type { Caller } from './auth.js';
import { notFound } from '../service/job-service.js';
import { parseInstant } from '../service/job-spec.js';

/** What fastify sends JSON as; a string or bytes answered with it are sent as they are (routes that write JSON text themselves). */
export const jsonType = 'application/json; charset=utf-8';

export function callerOf(request: FastifyRequest): Caller {
  if (request.caller === null) throw new Error(`route ${request.url} reads a caller but declares auth 'none'`);
  return request.caller;
}

/** A body-less POST accepts no body, `null` or `{}` (API.md "Conventions"). */
export function assertEmptyBody(body: unknown): void {
  if (body === undefined || body === null) return;
  if (typeof body === 'object' && !Array.isArray(body) && Object.keys(body).length === 0) return;
  throw new TicklerError('invalid_request', 'this call takes no body (or {})');
}

/** Ids are short and printable; anything else cannot exist, so it answers 404 without a lookup. */
const idShape = /^[A-Za-z0-9_-]{1,128}$/;

export function checkId(id: string, noun: 'job' | 'run'): string {
  if (!idShape.test(id)) throw notFound(noun, id);
  return id;
}

export function limitOf(limit: number | undefined): number {
  return limit ?? limits.listLimitDefault;
}

export function instantOf(text: string | undefined, field: string): number | undefined {
  return text === undefined ? undefined : parseInstant(text, field);
}

export function pageToWire<T>(page: { items: T[]; nextCursor: string | null }, toWire: (item: T) => unknown):
  { items: unknown[]; next_cursor: string | null } {
  return { items: page.items.map(toWire), next_cursor: page.nextCursor };
}
