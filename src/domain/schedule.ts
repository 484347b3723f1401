/**
 * Schedules (docs/schedules.md): compile a job's `schedule` once, then ask for its occurrences. Pure:
 * every function takes the instants it needs and never reads a clock. The cron grammar lives
 * in schedule/cron-expression.ts, wall-clock matching in schedule/wall-calendar.ts, zone
 * offsets in schedule/time-zone.ts and the DST rules in schedule/occurrence-stream.ts.
 */
import { TicklerError } from './errors.js';
import { cronLengthMax, scheduleLookaheadYears } from './limits.js';
import { canonicalInstantMs } from './instant.js';
import type { DstSpec, ScheduleSpec } from './types.js';
import { dstGapRules, dstRepeatRules } from './types.js';
import { parseCron, type CronExpression } from './schedule/cron-expression.js';
import { minTimeOfDayGapSeconds, nextMatchingDay } from './schedule/wall-calendar.js';
import { isValidTimeZone } from './schedule/time-zone.js';
import {
  countCronOccurrences, cronOccurrences, newestCronOccurrences, type CronStreamSchedule, type Occurrence,
} from './schedule/occurrence-stream.js';

export type { Occurrence } from './schedule/occurrence-stream.js';
export { isValidTimeZone, localWallTime } from './schedule/time-zone.js';

export interface CompiledSchedule {
  readonly kind: 'cron' | 'once';
  readonly cron: string | null;
  /** 'UTC' for once. */
  readonly tz: string;
  /** Vixie split: second, minute or hour field begins with `*`. */
  readonly intervalLike: boolean;
  readonly dst: DstSpec;
  /** For once. */
  readonly atMs: number | null;
  /**
   * Smallest gap between consecutive occurrences (ms); Infinity for once. Computed from the
   * wall-clock fields as if every day matched, so it never overstates the gap; a DST
   * transition can still shorten one real gap by the size of its shift.
   */
  readonly minGapMs: number;
}

const yearMs = 365.2425 * 86_400_000;
/** How far occurrence searches look ahead: 8 years always contains a 29 February. */
const occurrenceSearchMs = 8 * yearMs;
/** Schedules end with the year 9999; RFC 3339 has no later years. */
const instantLimitMs = Date.UTC(10_000, 0, 1);
/** Searches start no earlier than the year 1000: far enough back for any preview, and inside Date's range. */
const instantFloorMs = Date.UTC(1_000, 0, 1);
/** One Gregorian cycle: a day pattern that matches no day in it matches none ever. */
const gregorianCycleDays = 146_097;
const dstDefault: DstSpec = { gap: 'shift', repeat: 'first' };

const parsedCrons = new Map<string, CronExpression>();
const parsedCronsSizeMax = 10_000;

function expressionOf(cron: string): CronExpression {
  let expression = parsedCrons.get(cron);
  if (expression === undefined) {
    expression = parseCron(cron);
    if (parsedCrons.size >= parsedCronsSizeMax) parsedCrons.clear();
    parsedCrons.set(cron, expression);
  }
  return expression;
}

function validDst(dst: DstSpec | undefined): DstSpec {
  if (dst === undefined || dst === null) return dstDefault;
  if (!(dstGapRules as readonly unknown[]).includes(dst.gap)) {
    throw new TicklerError('invalid_schedule', `dst.gap must be one of ${dstGapRules.join(', ')}`, { field: 'dst.gap' });
  }
  if (!(dstRepeatRules as readonly unknown[]).includes(dst.repeat)) {
    throw new TicklerError('invalid_schedule', `dst.repeat must be one of ${dstRepeatRules.join(', ')}`, { field: 'dst.repeat' });
  }
  return { gap: dst.gap, repeat: dst.repeat };
}

const rfc3339Pattern =
  /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$/;

/** Strict RFC 3339 ("2026-12-01T09:00:00.000Z", any offset); null when it is not one. */
export function parseInstant(text: string): number | null {
  // The form the SDK and most clients send, read without a regular expression.
  const canonical = canonicalInstantMs(text);
  if (canonical !== null) return canonical;
  const match = rfc3339Pattern.exec(text);
  if (match === null) return null;
  const [year, month, day, hour, minute, second] = match.slice(1, 7).map(Number) as
    [number, number, number, number, number, number];
  const fractionMs = Number((match[7] ?? '').padEnd(3, '0').slice(0, 3));
  const offsetMinutes = match[8] !== undefined ? 0
    : (match[9] === '-' ? -1 : 1) * (Number(match[10]) * 60 + Number(match[11]));
  if (month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || second > 59) return null;
  if (Number(match[10] ?? 0) > 23 || Number(match[11] ?? 0) > 59) return null;
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  if (date.getUTCDate() !== day) return null;
  date.setUTCHours(hour, minute, second, fractionMs);
  return date.getTime() - offsetMinutes * 60_000;
}

function compileOnce(at: unknown, dst: DstSpec): CompiledSchedule {
  const atMs = typeof at === 'string' ? parseInstant(at) : null;
  if (atMs === null) {
    throw new TicklerError('invalid_schedule', 'schedule.at must be an RFC 3339 time such as 2026-12-01T09:00:00.000Z',
      { field: 'schedule.at' });
  }
  if (atMs >= instantLimitMs) {
    throw new TicklerError('invalid_schedule', 'schedule.at is beyond the year 9999', { field: 'schedule.at' });
  }
  return { kind: 'once', cron: null, tz: 'UTC', intervalLike: false, dst, atMs, minGapMs: Infinity };
}

function compileCron(cron: unknown, tz: unknown, dst: DstSpec, nowMs: number | undefined): CompiledSchedule {
  if (typeof cron !== 'string') {
    throw new TicklerError('invalid_schedule', 'schedule.cron must be a string', { field: 'schedule.cron' });
  }
  const timeZone = tz === undefined ? 'UTC' : tz;
  if (typeof timeZone !== 'string' || !isValidTimeZone(timeZone)) {
    throw new TicklerError('invalid_timezone', `unknown time zone "${String(timeZone).slice(0, 64)}"; use an IANA name such as Europe/Berlin`,
      { field: 'schedule.tz' });
  }
  const expression = expressionOf(cron);
  if (nextMatchingDay(expression, 0, gregorianCycleDays) === null) {
    throw new TicklerError('invalid_schedule', `"${cron}" never fires (no day matches)`, { field: 'schedule.cron' });
  }
  const schedule: CompiledSchedule = {
    kind: 'cron', cron, tz: timeZone, intervalLike: expression.intervalLike, dst, atMs: null,
    minGapMs: minTimeOfDayGapSeconds(expression) * 1_000,
  };
  if (nowMs !== undefined && Number.isFinite(nowMs)
    && occurrencesAfter(schedule, nowMs, 1, nowMs + scheduleLookaheadYears * yearMs).length === 0) {
    throw new TicklerError('invalid_schedule', `"${cron}" does not fire in the next ${scheduleLookaheadYears} years`,
      { field: 'schedule.cron' });
  }
  return schedule;
}

/**
 * Validates and compiles a schedule. Throws only TicklerError: 'invalid_schedule' (field
 * schedule.cron, schedule.at, dst.gap or dst.repeat) or 'invalid_timezone' (schedule.tz).
 * A cron expression that matches no day at all (`0 0 30 2 *`) is rejected; with `options.nowMs`
 * one with no occurrence in the next 5 years is rejected too.
 */
export function compileSchedule(spec: ScheduleSpec, dst: DstSpec, options?: { nowMs?: number }): CompiledSchedule {
  const checkedDst = validDst(dst);
  if (typeof spec !== 'object' || spec === null) {
    throw new TicklerError('invalid_schedule', 'schedule must be an object with cron or at', { field: 'schedule' });
  }
  if ('cron' in spec) {
    if (typeof spec.cron === 'string' && spec.cron.length > cronLengthMax) {
      throw new TicklerError('invalid_schedule', `cron is longer than ${cronLengthMax} characters`, { field: 'schedule.cron' });
    }
    return compileCron(spec.cron, spec.tz, checkedDst, options?.nowMs);
  }
  if ('at' in spec) return compileOnce(spec.at, checkedDst);
  throw new TicklerError('invalid_schedule', 'schedule needs cron or at', { field: 'schedule' });
}

function streamOf(schedule: CompiledSchedule): CronStreamSchedule {
  return { expression: expressionOf(schedule.cron ?? ''), timeZone: schedule.tz, dst: schedule.dst };
}

/** The end of a search that started at `afterMs`: the caller's bound, the look-ahead, or year 9999. */
function searchEndMs(afterMs: number, untilMs: number | undefined): number {
  return Math.min(untilMs ?? Infinity, afterMs + occurrenceSearchMs, instantLimitMs);
}

/** Occurrences strictly after afterMs, increasing, at most `limit`, none at/after untilMs if given. */
export function occurrencesAfter(s: CompiledSchedule, afterMs: number, limit: number, untilMs?: number): Occurrence[] {
  if (!Number.isFinite(afterMs) || !(limit >= 1) || afterMs >= instantLimitMs) return [];
  if (s.kind === 'once') {
    const atMs = s.atMs ?? NaN;
    return atMs > afterMs && (untilMs === undefined || atMs < untilMs) ? [{ scheduledAtMs: atMs, skippedDst: false }] : [];
  }
  const occurrences: Occurrence[] = [];
  const fromMs = Math.max(afterMs, instantFloorMs - 1);
  for (const occurrence of cronOccurrences(streamOf(s), fromMs, searchEndMs(fromMs, untilMs))) {
    occurrences.push(occurrence);
    if (occurrences.length >= limit) break;
  }
  return occurrences;
}

export function nextOccurrence(s: CompiledSchedule, afterMs: number): Occurrence | null {
  return occurrencesAfter(s, afterMs, 1)[0] ?? null;
}

/** How many occurrences lie strictly between afterMs and untilMs; counted, not enumerated. */
export function countOccurrences(s: CompiledSchedule, afterMs: number, untilMs: number): number {
  if (!Number.isFinite(afterMs) || !(untilMs > afterMs)) return 0;
  if (s.kind === 'once') return occurrencesAfter(s, afterMs, 1, untilMs).length;
  return countCronOccurrences(streamOf(s), Math.max(afterMs, instantFloorMs - 1), Math.min(untilMs, instantLimitMs));
}

/** The newest `countMax` occurrences strictly between afterMs and untilMs, increasing. */
export function newestOccurrences(s: CompiledSchedule, afterMs: number, untilMs: number, countMax: number): Occurrence[] {
  if (!Number.isFinite(afterMs) || !(untilMs > afterMs)) return [];
  if (s.kind === 'once') return occurrencesAfter(s, afterMs, 1, untilMs).slice(0, Math.max(0, countMax));
  return newestCronOccurrences(streamOf(s), Math.max(afterMs, instantFloorMs - 1), Math.min(untilMs, instantLimitMs), countMax);
}
