/**
 * `tickler serve` configuration as pure functions: flags first, then `TICKLER_<NAME>`
 * environment variables, then defaults, checked and turned into `ServeOptions`. Kept apart
 * from the command so every fallback and refusal is testable without starting a server.
 *
 * API keys (`--api-keys FILE`, or inline in `TICKLER_API_KEYS`) come in two formats:
 *   - lines `team=KEY` (blank lines and lines starting with `#` are ignored); inline, the
 *     pairs are separated by commas: `team-a=KEY1,team-b=KEY2`;
 *   - a JSON object `{"team-a": "KEY1", "admin": "KEY0"}`.
 * The team named `admin` is an admin (API.md "Auth").
 *
 * Timing overrides for tests and chaos runs: every field of `TimingConfig` reads
 * `TICKLER_TIMING_<FIELD>` or `TICKLER_<FIELD>`, the field in upper snake case, e.g.
 * `TICKLER_SHARD_LEASE_TTL_MS=2000`, `TICKLER_TIMING_LOAD_REFRESH_INTERVAL_MS=5000`.
 */
import { FatalError } from '../fatal-error.js';
import { httpLimitsDefaults, timingDefaults, type HttpLimits, type TimingConfig } from '../limits.js';
import type { Role, ServeOptions } from '../server.js';
import { parseLabelSelector } from '../service/job-spec.js';
import { parseLimitsFile } from '../service/team-limits.js';

/** A mistake in how the command was called: the message is printed and the process exits 2. */
export class CliUsageError extends Error {
  readonly exitCode = 2;

  constructor(message: string) {
    super(message);
    this.name = 'CliUsageError';
  }
}

export interface ServeFlags {
  host?: string;
  port?: string;
  dataDir?: string;
  store?: string;
  roles?: string;
  nodeId?: string;
  apiKeys?: string;
  virtualClock?: boolean;
  startAt?: string;
  logLevel?: string;
  cronToleranceDefaultS?: string;
  p2Share?: string;
  payloadBytesMax?: string;
  requireMaxSilenceLabel?: string;
  alertWebhook?: string;
  alertWebhookSecretFile?: string;
  headersTimeoutS?: string;
  requestTimeoutS?: string;
  idleTimeoutS?: string;
  connectionsMax?: string;
  limits?: string;
}

export type Environment = Record<string, string | undefined>;

const roleNames: readonly Role[] = ['api', 'scheduler'];
export const logLevels: readonly string[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

export const serveDefaults = {
  host: '127.0.0.1',
  port: 7070,
  dataDir: './.tickler',
  roles: 'api,scheduler',
  logLevel: 'info',
} as const;

/** Resolves flags and environment into ServeOptions; `readFile` reads the api-keys file. */
export function resolveServeOptions(flags: ServeFlags, env: Environment, readFile: (path: string) => string): ServeOptions {
  const pick = (flag: string | undefined, name: string): string | undefined => flag ?? nonEmpty(env[`TICKLER_${name}`]);
  const host = pick(flags.host, 'HOST') ?? serveDefaults.host;
  const virtualClock = flags.virtualClock === true || isTrue(env['TICKLER_VIRTUAL_CLOCK']);
  const startAt = pick(flags.startAt, 'START_AT');
  const apiKeys = apiKeysOf(flags.apiKeys, env, readFile);
  if (apiKeys === null && !isLoopbackHost(host)) {
    throw new CliUsageError(`refusing to listen on ${host} without API keys: pass --api-keys FILE or set ` +
      'TICKLER_API_KEYS (team=KEY,...), or bind to 127.0.0.1');
  }
  if (startAt !== undefined && !virtualClock) throw new CliUsageError('--start-at needs --virtual-clock');
  const logLevel = pick(flags.logLevel, 'LOG_LEVEL') ?? serveDefaults.logLevel;
  if (!logLevels.includes(logLevel)) throw new CliUsageError(`--log-level must be one of ${logLevels.join(', ')}`);
  const cronToleranceDefaultS = pick(flags.cronToleranceDefaultS, 'CRON_TOLERANCE_DEFAULT_S');
  const payloadBytesMax = pick(flags.payloadBytesMax, 'PAYLOAD_BYTES_MAX');
  const timing = timingFromEnv(env);
  const http = httpLimitsOf(flags, pick);
  const dispatchAtCreate = nonEmpty(env['TICKLER_DISPATCH_AT_CREATE']);
  const silenceLabel = pick(flags.requireMaxSilenceLabel, 'REQUIRE_MAX_SILENCE_LABEL');
  if (silenceLabel !== undefined && (silenceLabel.startsWith('=') || silenceLabel === '')) {
    throw new CliUsageError('--require-max-silence-label takes a label name, or name=value');
  }
  const p2Share = pick(flags.p2Share, 'P2_SHARE');
  const teamLimits = teamLimitsOf(pick(flags.limits, 'LIMITS'), readFile);
  const alertWebhook = alertWebhookOf(pick(flags.alertWebhook, 'ALERT_WEBHOOK'), flags.alertWebhookSecretFile, env, readFile);
  return {
    host,
    port: integerIn(pick(flags.port, 'PORT') ?? String(serveDefaults.port), 'port', 0, 65_535),
    dataDir: pick(flags.dataDir, 'DATA_DIR') ?? serveDefaults.dataDir,
    storeUrl: pick(flags.store, 'STORE') ?? null,
    roles: rolesOf(pick(flags.roles, 'ROLES') ?? serveDefaults.roles),
    nodeId: pick(flags.nodeId, 'NODE_ID') ?? null,
    apiKeys,
    virtualClock,
    startAtMs: startAt === undefined ? null : instantOf(startAt, 'start-at'),
    logLevel,
    ...(cronToleranceDefaultS === undefined
      ? {}
      : { cronToleranceDefaultS: integerIn(cronToleranceDefaultS, 'cron-tolerance-default-s', 0, 86_400) }),
    ...(payloadBytesMax === undefined
      ? {}
      : { payloadBytesMax: integerIn(payloadBytesMax, 'payload-bytes-max', 1, 16 * 1_048_576) }),
    ...(Object.keys(timing).length === 0 ? {} : { timing }),
    http,
    ...(dispatchAtCreate === undefined ? {} : { dispatchAtCreate: switchOf(dispatchAtCreate, 'TICKLER_DISPATCH_AT_CREATE') }),
    ...(silenceLabel === undefined ? {} : { silenceRequiredLabel: parseLabelSelector(silenceLabel) }),
    ...(alertWebhook === null ? {} : { alertWebhook }),
    ...(p2Share === undefined ? {} : { p2Share: shareOf(p2Share) }),
    ...(teamLimits === null ? {} : { teamLimits }),
  };
}

/**
 * `--limits FILE` (`TICKLER_LIMITS`): team limits stored at start (docs/API.md "Team limits").
 * An unreadable or wrong file is a FatalError, one line naming it and the fault.
 */
function teamLimitsOf(path: string | undefined, readFile: (path: string) => string): ReturnType<typeof parseLimitsFile> | null {
  if (path === undefined) return null;
  let text: string;
  try {
    text = readFile(path);
  } catch (error) {
    throw new FatalError(`cannot read the --limits file ${path}: ${(error as Error).message}`);
  }
  return parseLimitsFile(text, path);
}

/**
 * `--alert-webhook URL` with its HMAC secret, from `TICKLER_ALERT_WEBHOOK_SECRET` or a file
 * (`--alert-webhook-secret-file`, `TICKLER_ALERT_WEBHOOK_SECRET_FILE`): an alert a receiver
 * cannot verify is not sent, so a webhook without a secret is a usage error.
 */
function alertWebhookOf(url: string | undefined, secretFileFlag: string | undefined, env: Environment,
  readFile: (path: string) => string): { url: string; secret: string } | null {
  if (url === undefined) {
    if (secretFileFlag !== undefined) throw new CliUsageError('--alert-webhook-secret-file needs --alert-webhook');
    return null;
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new CliUsageError(`--alert-webhook must be an http(s) URL, got ${url}`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new CliUsageError(`--alert-webhook must be an http(s) URL, got ${url}`);
  }
  const secretFile = secretFileFlag ?? nonEmpty(env['TICKLER_ALERT_WEBHOOK_SECRET_FILE']);
  let secret = nonEmpty(env['TICKLER_ALERT_WEBHOOK_SECRET']);
  if (secretFile !== undefined) {
    try {
      secret = readFile(secretFile).trim();
    } catch (error) {
      throw new CliUsageError(`cannot read the alert webhook secret file ${secretFile}: ${(error as Error).message}`);
    }
  }
  if (secret === undefined || secret === '') {
    throw new CliUsageError('--alert-webhook needs an HMAC secret: set TICKLER_ALERT_WEBHOOK_SECRET or pass --alert-webhook-secret-file FILE');
  }
  return { url, secret };
}

/** The HTTP server's timeouts (whole seconds) and connection cap: flags, `TICKLER_*`, then the defaults. */
function httpLimitsOf(flags: ServeFlags, pick: (flag: string | undefined, name: string) => string | undefined): HttpLimits {
  const seconds = (flag: string | undefined, name: string, defaultMs: number): number => {
    const text = pick(flag, name.toUpperCase().replace(/-/g, '_'));
    return text === undefined ? defaultMs : integerIn(text, name, 1, 3_600) * 1000;
  };
  const connectionsMax = pick(flags.connectionsMax, 'CONNECTIONS_MAX');
  const http: HttpLimits = {
    headersTimeoutMs: seconds(flags.headersTimeoutS, 'headers-timeout-s', httpLimitsDefaults.headersTimeoutMs),
    requestTimeoutMs: seconds(flags.requestTimeoutS, 'request-timeout-s', httpLimitsDefaults.requestTimeoutMs),
    idleTimeoutMs: seconds(flags.idleTimeoutS, 'idle-timeout-s', httpLimitsDefaults.idleTimeoutMs),
    connectionsMax: connectionsMax === undefined
      ? httpLimitsDefaults.connectionsMax : integerIn(connectionsMax, 'connections-max', 1, 1_000_000),
  };
  if (http.headersTimeoutMs > http.requestTimeoutMs) {
    throw new CliUsageError('--headers-timeout-s must not be longer than --request-timeout-s (the headers are part of the request)');
  }
  return http;
}

/** `--api-keys FILE` wins over inline `TICKLER_API_KEYS`; `TICKLER_API_KEYS_FILE` names a file too. */
function apiKeysOf(flag: string | undefined, env: Environment, readFile: (path: string) => string): Map<string, string> | null {
  const path = flag ?? nonEmpty(env['TICKLER_API_KEYS_FILE']);
  if (path !== undefined) {
    let text: string;
    try {
      text = readFile(path);
    } catch (error) {
      throw new CliUsageError(`cannot read the api-keys file ${path}: ${(error as Error).message}`);
    }
    return parseApiKeys(text, path);
  }
  const inline = nonEmpty(env['TICKLER_API_KEYS']);
  return inline === undefined ? null : parseApiKeys(inline.split(',').join('\n'), 'TICKLER_API_KEYS');
}

/** Parses `team=KEY` lines or a JSON `{"team": "KEY"}` object into a Map from key to team. */
export function parseApiKeys(text: string, source: string): Map<string, string> {
  const pairs: [team: string, key: string][] = [];
  if (text.trimStart().startsWith('{')) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (error) {
      throw new CliUsageError(`${source} is not valid JSON: ${(error as Error).message}`);
    }
    for (const [team, key] of Object.entries(parsed as Record<string, unknown>)) {
      if (typeof key !== 'string') throw new CliUsageError(`${source}: the key of team ${team} must be a string`);
      pairs.push([team, key]);
    }
  } else {
    text.split(/\r?\n/).forEach((rawLine, index) => {
      const line = rawLine.trim();
      if (line === '' || line.startsWith('#')) return;
      const equals = line.indexOf('=');
      if (equals < 0) throw new CliUsageError(`${source} line ${index + 1}: expected team=KEY`);
      pairs.push([line.slice(0, equals).trim(), line.slice(equals + 1).trim()]);
    });
  }
  const keys = new Map<string, string>();
  for (const [team, key] of pairs) {
    if (!/^[A-Za-z0-9_.-]{1,128}$/.test(team)) throw new CliUsageError(`${source}: bad team name ${JSON.stringify(team)}`);
    if (key === '' || /\s/.test(key)) throw new CliUsageError(`${source}: the key of team ${team} is empty or has spaces`);
    if (keys.has(key)) throw new CliUsageError(`${source}: teams ${keys.get(key)} and ${team} share a key`);
    keys.set(key, team);
  }
  if (keys.size === 0) throw new CliUsageError(`${source} holds no keys`);
  return keys;
}

/** Reads `TICKLER_TIMING_<FIELD>` or `TICKLER_<FIELD>` for every TimingConfig field. */
export function timingFromEnv(env: Environment): Partial<TimingConfig> {
  const timing: Partial<TimingConfig> = {};
  for (const field of Object.keys(timingDefaults) as (keyof TimingConfig)[]) {
    const name = upperSnakeCase(field);
    const value = nonEmpty(env[`TICKLER_TIMING_${name}`]) ?? nonEmpty(env[`TICKLER_${name}`]);
    // Only dispatching ahead and its finish's delay may be 0; every other setting is a period or a TTL.
    const minimum = field === 'dispatchAheadMs' || field === 'finishAheadDelayMs' ? 0 : 1;
    if (value !== undefined) timing[field] = integerIn(value, `TICKLER_TIMING_${name}`, minimum, 86_400_000);
  }
  return timing;
}

export function upperSnakeCase(camelCase: string): string {
  return camelCase.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toUpperCase();
}

export function isLoopbackHost(host: string): boolean {
  return host === 'localhost' || host === '::1' || host === '[::1]' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

function rolesOf(text: string): Role[] {
  const roles = text.split(',').map((role) => role.trim()).filter((role) => role !== '');
  for (const role of roles) {
    if (!roleNames.includes(role as Role)) throw new CliUsageError(`unknown role ${role}: use api, scheduler or both`);
  }
  if (roles.length === 0) throw new CliUsageError('--roles needs at least one of api, scheduler');
  return [...new Set(roles as Role[])];
}

export function integerIn(text: string, name: string, min: number, max: number): number {
  const value = Number(text);
  if (!/^-?\d+$/.test(text.trim()) || !Number.isSafeInteger(value) || value < min || value > max) {
    throw new CliUsageError(`${name} must be an integer within ${min}..${max}, got ${JSON.stringify(text)}`);
  }
  return value;
}

function instantOf(text: string, name: string): number {
  const instantMs = Date.parse(text);
  if (!/^\d{4}-\d{2}-\d{2}T/.test(text) || Number.isNaN(instantMs)) {
    throw new CliUsageError(`${name} must be an RFC 3339 time such as 2026-11-29T02:00:00.000Z, got ${text}`);
  }
  return instantMs;
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value;
}

/** An on/off environment setting; anything else is a usage error, not a silent default. */
function switchOf(value: string, name: string): boolean {
  const lower = value.toLowerCase();
  if (['1', 'true', 'yes', 'on'].includes(lower)) return true;
  if (['0', 'false', 'no', 'off'].includes(lower)) return false;
  throw new CliUsageError(`${name} must be 1 or 0 (on or off), not ${JSON.stringify(value)}`);
}

function isTrue(value: string | undefined): boolean {
  return value !== undefined && ['1', 'true', 'yes', 'on'].includes(value.toLowerCase());
}

/** `--p2-share`: P2's share of a pool's leases while P0 or P1 have ready runs, a fraction from 0 to 1. */
function shareOf(text: string): number {
  const share = Number(text);
  if (!/^\d*\.?\d+$/.test(text.trim()) || !(share >= 0 && share <= 1)) {
    throw new CliUsageError(`--p2-share must be a fraction from 0 to 1, not ${JSON.stringify(text)}`);
  }
  return share;
}
