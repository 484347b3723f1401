/**
 * Team limits (docs/API.md "Team limits"): what each team may create and hold, and what it
 * gets of the workers. Stored (`PUT /v1/teams/{team}/limits`, `tickler serve --limits FILE`)
 * and kept in memory on every node, so that the create path asks `createQuotaOf(team)`, a map
 * lookup, and a team without `create_per_s` and `pending_max` (every team, when no limits are
 * configured) creates exactly as before: no query, no lock, the shared group commit.
 *
 * A team without an entry of its own takes the `default` entry; a field left out (null) is
 * unlimited; `weight` is 1 unless set. `teamLimits(team)` is the read the leasing side uses
 * for `dispatch_per_s` and `weight`. Each node reads the stored entries again every
 * `refreshIntervalMs`, so a change made through another node reaches it within that.
 */
import { TicklerError } from '../errors.js';
import { teamLimitsRefreshIntervalMs } from '../limits.js';
import { FatalError } from '../fatal-error.js';
import type { Clock } from '../clock.js';
import type { Logger } from '../obs/log.js';
import { defaultLimitsEntry, type CreateQuota, type QuotaLimitName, type Store, type TeamLimitsEntry } from '../store/store.js';

/** A team's limits in force, and whose entry they come from. */
export interface EffectiveTeamLimits {
  team: string;
  createPerS: number | null;
  pendingMax: number | null;
  dispatchPerS: number | null;
  weight: number;
  source: 'team' | 'default' | 'none';
}

/** The wire form (`GET`/`PUT /v1/teams/{team}/limits`, an entry of `--limits FILE`). */
export interface TeamLimitsWire {
  create_per_s: number | null;
  pending_max: number | null;
  dispatch_per_s: number | null;
  weight: number;
}

/** Bounds of each field, checked alike on the wire and in the file. */
export const teamLimitBounds = {
  ratePerSMax: 1_000_000,
  pendingMax: 1_000_000_000,
  weightMax: 1_000,
} as const;


const fieldNames = ['create_per_s', 'pending_max', 'dispatch_per_s', 'weight'] as const;

/**
 * Checks a limits object (a PUT body, a file entry) and answers it as stored, or throws
 * `invalid_request` naming the field (with `prefix` before it: `team-a.weight`).
 */
export function limitsFromWire(body: unknown, team: string, prefix = ''): TeamLimitsEntry {
  const fail = (field: string, message: string): never => {
    throw new TicklerError('invalid_request', `${prefix}${field} ${message}`, { field: `${prefix}${field}` });
  };
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new TicklerError('invalid_request', `${prefix === '' ? 'the limits' : prefix.slice(0, -1)} must be an object`,
      prefix === '' ? {} : { field: prefix.slice(0, -1) });
  }
  const fields = body as Record<string, unknown>;
  for (const name of Object.keys(fields)) {
    if (!(fieldNames as readonly string[]).includes(name)) fail(name, `is not a known field (${fieldNames.join(', ')})`);
  }
  const rate = (name: 'create_per_s' | 'dispatch_per_s'): number | null => {
    const value = fields[name];
    if (value === undefined || value === null) return null;
    if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0 || value > teamLimitBounds.ratePerSMax) {
      return fail(name, `must be a number above 0 and at most ${teamLimitBounds.ratePerSMax} (per second), or null for no limit`);
    }
    return value;
  };
  const pending = fields['pending_max'];
  if (pending !== undefined && pending !== null &&
    (typeof pending !== 'number' || !Number.isSafeInteger(pending) || pending < 1 || pending > teamLimitBounds.pendingMax)) {
    fail('pending_max', `must be an integer from 1 to ${teamLimitBounds.pendingMax}, or null for no limit`);
  }
  const weight = fields['weight'];
  if (weight !== undefined &&
    (typeof weight !== 'number' || !Number.isFinite(weight) || weight <= 0 || weight > teamLimitBounds.weightMax)) {
    fail('weight', `must be a number above 0 and at most ${teamLimitBounds.weightMax} (default 1)`);
  }
  return {
    team,
    createPerS: rate('create_per_s'),
    pendingMax: (pending as number | null | undefined) ?? null,
    dispatchPerS: rate('dispatch_per_s'),
    weight: (weight as number | undefined) ?? 1,
  };
}

/** Team names as API keys and routes take them. */
const teamNamePattern = /^[A-Za-z0-9_.-]{1,128}$/;

/**
 * `--limits FILE`: a JSON object from team (or `default`) to its limits. Anything wrong is a
 * FatalError naming the file and the fault, one line: a server must not start with limits
 * other than the ones its operator wrote.
 */
export function parseLimitsFile(text: string, source: string): TeamLimitsEntry[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new FatalError(`--limits ${source} is not valid JSON: ${(error as Error).message}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new FatalError(`--limits ${source} must hold a JSON object of team → limits, such as {"default": {"create_per_s": 100}}`);
  }
  const entries: TeamLimitsEntry[] = [];
  for (const [team, limits] of Object.entries(parsed as Record<string, unknown>)) {
    if (!teamNamePattern.test(team)) throw new FatalError(`--limits ${source}: bad team name ${JSON.stringify(team.slice(0, 80))}`);
    try {
      entries.push(limitsFromWire(limits, team, `${team}.`));
    } catch (error) {
      if (!(error instanceof TicklerError)) throw error;
      throw new FatalError(`--limits ${source}: ${error.message}`);
    }
  }
  return entries;
}

export function limitsToWire(limits: EffectiveTeamLimits): TeamLimitsWire & { team: string; source: string } {
  return {
    team: limits.team, create_per_s: limits.createPerS, pending_max: limits.pendingMax,
    dispatch_per_s: limits.dispatchPerS, weight: limits.weight, source: limits.source,
  };
}

/** A create refused by a team's quota: `429 rate_limited` with `Retry-After` (app.ts reads `retryAfterS`). */
export class QuotaExceededError extends TicklerError {
  readonly retryAfterS: number;

  constructor(readonly limit: QuotaLimitName, message: string, retryAfterMs: number) {
    super('rate_limited', message);
    this.retryAfterS = Math.max(1, Math.ceil(retryAfterMs / 1000));
  }
}

/** `Retry-After` of an error that carries one (a quota's refusal), or null. */
export function retryAfterSOf(error: unknown): number | null {
  return error instanceof QuotaExceededError ? error.retryAfterS : null;
}

export class TeamLimits {
  private entries = new Map<string, TeamLimitsEntry>();
  private refreshTimer: NodeJS.Timeout | null = null;

  constructor(private readonly deps: { store: Store; clock: Clock; logger?: Logger }) {}

  /**
   * Reads the stored entries, then again every `refreshIntervalMs` (real time, unref'd) until
   * `close`. A node whose store does not answer at start still starts (it answers 503 to what
   * needs the store) and takes the limits in force at the first read that succeeds.
   */
  async start(refreshIntervalMs = teamLimitsRefreshIntervalMs): Promise<void> {
    await this.refreshOrWarn();
    if (this.refreshTimer !== null) return;
    this.refreshTimer = setInterval(() => void this.refreshOrWarn(), refreshIntervalMs);
    this.refreshTimer.unref();
  }

  private async refreshOrWarn(): Promise<void> {
    try {
      await this.refresh();
    } catch (error) {
      this.deps.logger?.warn({ err: error }, 'reading the team limits failed; the ones read before stay in force');
    }
  }

  close(): void {
    if (this.refreshTimer !== null) clearInterval(this.refreshTimer);
    this.refreshTimer = null;
  }

  async refresh(): Promise<void> {
    const entries = await this.deps.store.listTeamLimits();
    this.entries = new Map(entries.map((entry) => [entry.team, entry]));
  }

  /** The limits in force for `team`: its own entry, else the default entry, else none (unlimited, weight 1). */
  teamLimits(team: string): EffectiveTeamLimits {
    const own = this.entries.get(team);
    const entry = own ?? this.entries.get(defaultLimitsEntry);
    if (entry === undefined) return { team, createPerS: null, pendingMax: null, dispatchPerS: null, weight: 1, source: 'none' };
    return { ...entry, team, source: own === undefined ? 'default' : 'team' };
  }

  /** What a create of `team` is held to, or null when nothing limits it (the create path's only question). */
  createQuotaOf(team: string): CreateQuota | null {
    if (this.entries.size === 0) return null;
    const entry = this.entries.get(team) ?? this.entries.get(defaultLimitsEntry);
    if (entry === undefined || (entry.createPerS === null && entry.pendingMax === null)) return null;
    return { team, createPerS: entry.createPerS, pendingMax: entry.pendingMax };
  }

  /** Stores the entries (the file at start, a PUT) and takes them in force on this node at once. */
  async put(entries: readonly TeamLimitsEntry[]): Promise<void> {
    await this.deps.store.putTeamLimits(entries, this.deps.clock.nowMs());
    await this.refresh();
  }

  /** Removes a team's own entry (it takes the default again); answers whether it had one. */
  async remove(team: string): Promise<boolean> {
    const removed = await this.deps.store.deleteTeamLimits(team);
    await this.refresh();
    return removed;
  }

  /** The refusal of a create over `limit`, its message naming the limit and the team's value. */
  refusal(quota: CreateQuota, limit: QuotaLimitName, retryAfterMs: number, count: number): QuotaExceededError {
    const message = limit === 'create_per_s'
      ? `team ${quota.team} is over its create_per_s limit (${quota.createPerS} creates a second): ${count} create(s) refused, nothing written`
      : `team ${quota.team} is at its pending_max limit (${quota.pendingMax} pending timers and ready runs): ${count} create(s) refused, nothing written`;
    return new QuotaExceededError(limit, message, retryAfterMs);
  }
}
