/**
 * From what a team sent to a complete JobSpec: defaults filled in (DESIGN.md "Defaults"),
 * the checks a schema cannot express (exactly one kind of schedule, payload bytes, retry
 * cap not below its base), and the schedule compiled so that a spec that is accepted can
 * always be fired. Pure: the caller passes `nowMs` (for `delay_s`).
 */
import { TicklerError } from '../errors.js';
import * as limits from '../limits.js';
import type { JobSpec, ScheduleSpec } from '../domain/types.js';
import { canonicalInstantMs } from '../domain/instant.js';
import { compileSchedule, type CompiledSchedule } from '../domain/schedule.js';
import type { JobCreateInput, JobPatchInput, ScheduleInput } from './job-input.js';

/**
 * Bounds of inputs that src/limits.ts does not name yet; kept in one place here until they
 * move there (requested of the owner of limits.ts).
 */
export const specLimits = {
  /** Ten years: a timer further out is a calendar entry, not a timer. */
  delaySecondsMax: 10 * 366 * 86_400,
  catchUpWindowSecondsMax: 366 * 86_400,
  maxSilenceSecondsMax: 366 * 86_400,
  /** One advance of the virtual clock covers at most a year of simulated time. */
  clockAdvanceSecondsMax: 366 * 86_400,
} as const;

export interface SpecContext {
  nowMs: number;
  cronToleranceDefaultS: number;
  payloadBytesMax: number;
  /** Jobs carrying this label (`value` null: any value) must set `max_silence_s`. */
  silenceRequiredLabel?: LabelSelector | null;
}

/** A label, or a label with a given value. */
export interface LabelSelector {
  name: string;
  value: string | null;
}

/** `name` or `name=value`. */
export function parseLabelSelector(text: string): LabelSelector {
  const separator = text.indexOf('=');
  return separator === -1 ? { name: text, value: null } : { name: text.slice(0, separator), value: text.slice(separator + 1) };
}

function carriesLabel(labels: Record<string, string>, selector: LabelSelector): boolean {
  return Object.hasOwn(labels, selector.name) && (selector.value === null || labels[selector.name] === selector.value);
}

/** A server's rule that jobs with a label (compliance jobs, say) watch their own silence. */
function checkSilenceRequired(spec: JobSpec, selector: LabelSelector | null | undefined): void {
  if (selector === null || selector === undefined || spec.max_silence_s !== null || !carriesLabel(spec.labels, selector)) return;
  const label = selector.value === null ? selector.name : `${selector.name}=${selector.value}`;
  throw new TicklerError('invalid_request', `jobs labelled ${label} must set max_silence_s on this server`,
    { field: 'max_silence_s' });
}

export interface CompiledJobSpec {
  spec: JobSpec;
  schedule: CompiledSchedule;
}

const rfc3339 = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/i;

/** Date.parse rolls 2026-02-30 over into March and takes 24:00; a calendar date must exist. */
function isCalendarDate(match: RegExpExecArray): boolean {
  const [year, month, day, hour] = [Number(match[1]), Number(match[2]), Number(match[3]), Number(match[4])];
  const probe = new Date(Date.UTC(year, month - 1, day));
  return probe.getUTCMonth() === month - 1 && probe.getUTCDate() === day && hour <= 23;
}

/** Parses an RFC 3339 instant, or throws `code` with `field`. */
export function parseInstant(text: string, field: string, code: 'invalid_request' | 'invalid_schedule' = 'invalid_request'): number {
  const match = rfc3339.exec(text);
  const instantMs = match !== null && isCalendarDate(match) ? Date.parse(text) : Number.NaN;
  if (!Number.isFinite(instantMs) || instantMs < 0 || instantMs > maxInstantMs) {
    throw new TicklerError(code, `${field} must be an RFC 3339 time between 1970 and 9999, got ${JSON.stringify(text.slice(0, 64))}`, { field });
  }
  return instantMs;
}

/** 9999-12-31T23:59:59.999Z */
const maxInstantMs = 253_402_300_799_999;

export function iso(instantMs: number): string {
  return new Date(instantMs).toISOString();
}


/** Exactly one of cron, at, delay_s; `tz` only beside cron. `delay_s` becomes `at`. */
export function normalizeSchedule(input: ScheduleInput, nowMs: number): ScheduleSpec {
  const kindCount = Number(input.cron !== undefined) + Number(input.at !== undefined) + Number(input.delay_s !== undefined);
  if (kindCount !== 1) {
    throw new TicklerError('invalid_request', 'schedule needs exactly one of cron, at or delay_s', { field: 'schedule' });
  }
  if (input.cron !== undefined) return { cron: input.cron, tz: input.tz ?? 'UTC' };
  if (input.tz !== undefined) {
    throw new TicklerError('invalid_request', 'schedule.tz applies only to a cron schedule', { field: 'schedule.tz' });
  }
  if (input.delay_s !== undefined) {
    const atMs = nowMs + Math.round(input.delay_s * 1000);
    return { at: iso(atMs), delay_s: input.delay_s };
  }
  const at = input.at ?? '';
  // Already in normal form (year 9999 at most, by its four digits): kept as given.
  if (canonicalInstantMs(at) !== null) return { at };
  return { at: iso(parseInstant(at, 'schedule.at', 'invalid_schedule')) };
}

function checkPayload(payload: unknown, payloadBytesMax: number): void {
  const text = JSON.stringify(payload ?? null);
  // JSON.stringify writes NUL and lone surrogates as \u escapes (and a backslash as \\), so
  // the plain search finds every one, and rarely something else, which the walk rules out.
  if (text.includes('\\u') && holdsUnreadableText(payload)) {
    throw new TicklerError('invalid_request', `payload ${unreadableTextRule}; encode binary data (base64, say)`,
      { field: 'payload' });
  }
  // A UTF-16 code unit is at most 3 bytes of UTF-8: short texts need no count.
  if (text.length * 3 <= payloadBytesMax) return;
  const payloadBytes = Buffer.byteLength(text, 'utf8');
  if (payloadBytes > payloadBytesMax) {
    throw new TicklerError('payload_too_large', `payload is ${payloadBytes} bytes of JSON, over the limit of ${payloadBytesMax}`,
      { field: 'payload' });
  }
}

/** Checks across fields, then compiles the schedule (which throws invalid_schedule / invalid_timezone). */
export function checkSpec(spec: JobSpec, payloadBytesMax: number, nowMs: number): CompiledSchedule {
  checkPayload(spec.payload, payloadBytesMax);
  if (spec.retry.max_s < spec.retry.base_s) {
    throw new TicklerError('invalid_request', 'retry.max_s must not be below retry.base_s', { field: 'retry.max_s' });
  }
  if (spec.key !== null && unreadableText.test(spec.key)) {
    throw new TicklerError('invalid_request', `key ${unreadableTextRule}`, { field: 'key' });
  }
  if (spec.resources.some((resource) => unreadableText.test(resource))) {
    throw new TicklerError('invalid_request', `a resource ${unreadableTextRule}`, { field: 'resources' });
  }
  for (const [name, value] of Object.entries(spec.labels)) {
    if (unreadableText.test(name) || unreadableText.test(value)) {
      throw new TicklerError('invalid_request', `a label ${unreadableTextRule}`, { field: 'labels' });
    }
    if (name.length === 0 || name.includes('=') || hasControlCharacter(name)) {
      throw new TicklerError('invalid_request', 'label names are non-empty, printable and hold no "="', { field: 'labels' });
    }
    // The schema's Record cannot bound its keys; a name is held to the limit of a value.
    if (name.length > limits.labelLengthMax) {
      throw new TicklerError('invalid_request', `label names are at most ${limits.labelLengthMax} characters`, { field: 'labels' });
    }
    if (hasControlCharacter(value)) {
      throw new TicklerError('invalid_request', `label ${name} holds a control character`, { field: `labels.${name}` });
    }
  }
  // With nowMs the compiler also rejects a cron expression with no occurrence in the next 5 years.
  return compileSchedule(spec.schedule, spec.dst, { nowMs });
}

/** A create body with every default filled in, checked and compiled. */
export function specFromCreate(input: JobCreateInput, context: SpecContext): CompiledJobSpec {
  const schedule = normalizeSchedule(input.schedule, context.nowMs);
  const recurring = 'cron' in schedule;
  const spec: JobSpec = {
    key: input.key ?? null,
    schedule,
    pool: input.pool,
    payload: input.payload ?? null,
    lane: input.lane ?? 'P1',
    tolerance_s: input.tolerance_s ?? (recurring ? context.cronToleranceDefaultS : limits.oneShotToleranceSecondsDefault),
    retry: input.retry === undefined ? { ...limits.retryDefault } : { ...limits.retryDefault, ...definedOnly(input.retry) },
    overlap: input.overlap ?? 'forbid',
    catch_up: input.catch_up ?? 'latest',
    catch_up_window_s: input.catch_up_window_s ?? limits.catchUpWindowSecondsDefault,
    dst: { gap: input.dst?.gap ?? 'shift', repeat: input.dst?.repeat ?? 'first' },
    idempotency: input.idempotency ?? 'keyed',
    lease_s: input.lease_s ?? limits.leaseSecondsDefault,
    max_silence_s: input.max_silence_s ?? null,
    resources: input.resources ?? [],
    labels: input.labels ?? {},
    owner: input.owner ?? null,
    pager: input.pager ?? null,
  };
  checkSilenceRequired(spec, context.silenceRequiredLabel);
  return { spec, schedule: checkSpec(spec, context.payloadBytesMax, context.nowMs) };
}

/**
 * A PATCH over an existing spec: top-level fields replace, `retry` and `dst` merge field by
 * field (so `{"retry": {"max_attempts": 3}}` keeps the backoff). Answers whether the
 * pending timer has to be recomputed.
 */
export function specFromPatch(current: JobSpec, patch: JobPatchInput, context: SpecContext):
  CompiledJobSpec & { timingChanged: boolean } {
  const spec: JobSpec = { ...current };
  if (patch.schedule !== undefined) spec.schedule = normalizeSchedule(patch.schedule, context.nowMs);
  if (patch.pool !== undefined) spec.pool = patch.pool;
  if ('payload' in patch) spec.payload = patch.payload ?? null;
  if (patch.lane !== undefined) spec.lane = patch.lane;
  if (patch.tolerance_s !== undefined) spec.tolerance_s = patch.tolerance_s;
  if (patch.retry !== undefined) spec.retry = { ...current.retry, ...definedOnly(patch.retry) };
  if (patch.overlap !== undefined) spec.overlap = patch.overlap;
  if (patch.catch_up !== undefined) spec.catch_up = patch.catch_up;
  if (patch.catch_up_window_s !== undefined) spec.catch_up_window_s = patch.catch_up_window_s;
  if (patch.dst !== undefined) spec.dst = { ...current.dst, ...definedOnly(patch.dst) };
  if (patch.idempotency !== undefined) spec.idempotency = patch.idempotency;
  if (patch.lease_s !== undefined) spec.lease_s = patch.lease_s;
  if (patch.max_silence_s !== undefined) spec.max_silence_s = patch.max_silence_s;
  if (patch.resources !== undefined) spec.resources = patch.resources;
  if (patch.labels !== undefined) spec.labels = patch.labels;
  if (patch.owner !== undefined) spec.owner = patch.owner;
  if (patch.pager !== undefined) spec.pager = patch.pager;
  const timingChanged = patch.schedule !== undefined || patch.tolerance_s !== undefined || patch.dst !== undefined;
  checkSilenceRequired(spec, context.silenceRequiredLabel);
  return { spec, schedule: checkSpec(spec, context.payloadBytesMax, context.nowMs), timingChanged };
}

/**
 * PostgreSQL's JSON functions refuse a document holding U+0000 or a lone UTF-16 surrogate
 * (`\ud800` not followed by its pair), and a job's spec is one document: on that store such
 * a job could be created and dispatched and then never leased, every lease of its pool
 * failing with it. The free text of a spec (payload, key, labels, resources) is refused
 * such characters on every store, so a job valid on one is valid on the other.
 */
// eslint-disable-next-line no-control-regex -- NUL is exactly what this looks for
const unreadableText = /[\u0000\p{Cs}]/u;
const unreadableTextRule = 'holds a NUL character (U+0000) or a lone surrogate, which the PostgreSQL store cannot read back';

/** Whether a string or an object key anywhere in `value` holds what `unreadableText` matches. */
function holdsUnreadableText(value: unknown): boolean {
  if (typeof value === 'string') return unreadableText.test(value);
  if (Array.isArray(value)) return value.some(holdsUnreadableText);
  if (value !== null && typeof value === 'object') {
    return Object.entries(value).some(([key, entry]) => unreadableText.test(key) || holdsUnreadableText(entry));
  }
  return false;
}

/** NUL, newlines and the other C0 controls, and DEL. */
export function hasControlCharacter(text: string): boolean {
  for (let index = 0; index < text.length; index++) {
    const code = text.charCodeAt(index);
    if (code < 0x20 || code === 0x7f) return true;
  }
  return false;
}

/** Drops keys whose value is undefined, so a spread does not overwrite a default with it. */
function definedOnly<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, entry]) => entry !== undefined)) as Partial<T>;
}
