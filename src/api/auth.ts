/**
 * Who is calling (API.md "Auth"): a Bearer key names one team, the team `admin` acts on
 * every team, and with no keys configured (a loopback development server) every caller
 * is team `default`. Another team's ids answer 404 exactly like unknown ones; that is the
 * store's team scope, chosen here.
 */
import { timingSafeEqual } from 'node:crypto';
import { TicklerError } from '../errors.js';
import type { TeamScope } from '../store/store.js';

export type AuthLevel = 'none' | 'team' | 'admin';

export interface Caller {
  team: string;
  admin: boolean;
}

export const adminTeam = 'admin';
export const openModeTeam = 'default';

/**
 * Resolves the caller of a route that needs `level`. In open mode admin-only routes are
 * open too (development), but the caller still acts as team `default`.
 */
export function resolveCaller(apiKeys: Map<string, string> | null, authorization: string | undefined, level: AuthLevel): Caller | null {
  if (level === 'none') return null;
  if (apiKeys === null) return { team: openModeTeam, admin: false };
  const match = /^Bearer +(\S+) *$/i.exec(authorization ?? '');
  if (match === null) throw new TicklerError('unauthorized', 'send Authorization: Bearer <key>');
  const team = lookupKey(apiKeys, match[1]!);
  if (team === null) throw new TicklerError('unauthorized', 'unknown API key');
  const caller = { team, admin: team === adminTeam };
  if (level === 'admin' && !caller.admin) throw new TicklerError('forbidden', 'this route needs an admin key');
  return caller;
}

/** Compares against every key in constant time per key, so timing does not reveal a prefix. */
function lookupKey(apiKeys: Map<string, string>, presented: string): string | null {
  const presentedBytes = Buffer.from(presented);
  let team: string | null = null;
  for (const [key, keyTeam] of apiKeys) {
    const keyBytes = Buffer.from(key);
    if (keyBytes.length === presentedBytes.length && timingSafeEqual(keyBytes, presentedBytes)) team = keyTeam;
  }
  return team;
}

/**
 * The team scope of a read or change: an admin sees every team, or the one named by
 * `?team=`; a team sees itself (naming another team is refused).
 */
export function scopeOf(caller: Caller, requestedTeam: string | undefined): TeamScope {
  if (caller.admin) return requestedTeam ?? null;
  if (requestedTeam !== undefined && requestedTeam !== caller.team) {
    throw new TicklerError('forbidden', 'only an admin key may act on another team', { field: 'team' });
  }
  return caller.team;
}

/** The one team a write acts for (create, cancel by key prefix): an admin names it or acts as `admin`. */
export function teamOf(caller: Caller, requestedTeam: string | undefined): string {
  return scopeOf(caller, requestedTeam) ?? caller.team;
}
