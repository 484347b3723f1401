/**
 * Time zones without a clock: the UTC offset of an IANA zone at an instant, and the zone's
 * transitions (DST changes, zone redefinitions), read from the runtime's ICU data through
 * Intl. Schedules need transitions, not just offsets, because the DST rules (docs/schedules.md) are
 * stated in terms of "the offset in force before the transition".
 *
 * Intl answers only "what is the wall time at this instant", so transitions are found by
 * sampling the offset once a day and bisecting each change to the second. A year of one zone
 * costs ~400 Intl calls (~0.6 ms, measured on the 2-core CI machine) and is cached. Two
 * transitions inside one day that cancel out are not seen; no zone in tzdata has one after
 * 1970 that matters to a schedule.
 */

const dayMs = 86_400_000;
const secondMs = 1_000;

/** A change of a zone's UTC offset: from `atMs` on, `offsetAfterMs` is in force. */
export interface ZoneTransition {
  readonly atMs: number;
  readonly offsetBeforeMs: number;
  readonly offsetAfterMs: number;
}

/** Offsets are wall minus UTC: New York in winter is −5 h = −18 000 000 ms. */
interface ZoneYear {
  readonly startMs: number;
  readonly startOffsetMs: number;
  /** Transitions with startMs < atMs <= start of the next year, in order. */
  readonly transitions: readonly ZoneTransition[];
}

/** Zones spelled as UTC have no transitions and need no Intl call. */
const utcNames = new Set(['UTC', 'Etc/UTC', 'GMT', 'Etc/GMT', 'Etc/Universal', 'Etc/Zulu', 'Universal', 'Zulu']);
const timeZoneLengthMax = 128;
/** Bounds memory when callers probe many zones or far-away years; refilled on demand. */
const zoneYearCacheSizeMax = 20_000;
/** Intl accepts any capitalisation ("america/new_york"), so names are not a closed set: bound them. */
const formatterCacheSizeMax = 2_000;

const formatters = new Map<string, Intl.DateTimeFormat>();
const zoneYears = new Map<string, ZoneYear>();

function formatterOf(timeZone: string): Intl.DateTimeFormat {
  let formatter = formatters.get(timeZone);
  if (formatter === undefined) {
    formatter = new Intl.DateTimeFormat('en-US', {
      timeZone, hourCycle: 'h23', era: 'short',
      year: 'numeric', month: 'numeric', day: 'numeric', hour: 'numeric', minute: 'numeric', second: 'numeric',
    });
    if (formatters.size >= formatterCacheSizeMax) formatters.clear();
    formatters.set(timeZone, formatter);
  }
  return formatter;
}

/**
 * True for a name Intl knows (IANA names, case-insensitively, and their aliases).
 * Offsets such as "+05:00" are not zones here, whatever the runtime thinks of them.
 */
export function isValidTimeZone(timeZone: string): boolean {
  if (typeof timeZone !== 'string' || timeZone.length === 0 || timeZone.length > timeZoneLengthMax) return false;
  if (!/^[A-Za-z][A-Za-z0-9_+\-/]*$/.test(timeZone)) return false;
  if (formatters.has(timeZone)) return true;
  try {
    formatterOf(timeZone);
    return true;
  } catch (error) {
    if (error instanceof RangeError) return false;
    throw error;
  }
}

/** en-US with h23 and an era formats as "11/14/2023 AD, 17:13:20"; format() is 4x faster than formatToParts(). */
const formattedPattern = /^(\d+)\/(\d+)\/(\d+) (AD|BC), (\d+):(\d+):(\d+)$/;

function wallFieldsOf(formatter: Intl.DateTimeFormat, instantMs: number): number[] {
  const match = formattedPattern.exec(formatter.format(instantMs));
  if (match !== null) {
    const [month, day, year, era, hour, minute, second] = match.slice(1);
    return [era === 'BC' ? 1 - Number(year) : Number(year), Number(month), Number(day), Number(hour), Number(minute), Number(second)];
  }
  // Another ICU may format differently; the parts are slower but unambiguous.
  const parts = Object.fromEntries(formatter.formatToParts(instantMs).map((part) => [part.type, part.value]));
  const year = Number(parts.year);
  return [String(parts.era).startsWith('B') ? 1 - year : year, Number(parts.month), Number(parts.day),
    Number(parts.hour), Number(parts.minute), Number(parts.second)];
}

/** The offset in force at `instantMs`, asked of Intl directly (whole seconds). */
function intlOffsetMs(timeZone: string, instantMs: number): number {
  const flooredMs = Math.floor(instantMs / secondMs) * secondMs;
  const [year = 0, month = 1, day = 1, hour = 0, minute = 0, second = 0] = wallFieldsOf(formatterOf(timeZone), flooredMs);
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  date.setUTCHours(hour, minute, second, 0);
  return date.getTime() - flooredMs;
}

function utcYearStartMs(year: number): number {
  const date = new Date(0);
  date.setUTCFullYear(year, 0, 1);
  return date.getTime();
}

/** The first whole second in (lowMs, highMs] whose offset differs from `lowOffsetMs`. */
function bisectChange(timeZone: string, lowMs: number, highMs: number, lowOffsetMs: number): number {
  let low = lowMs;
  let high = highMs;
  while (high - low > secondMs) {
    const middle = low + Math.floor((high - low) / 2 / secondMs) * secondMs;
    if (intlOffsetMs(timeZone, middle) === lowOffsetMs) low = middle;
    else high = middle;
  }
  return high;
}

function computeZoneYear(timeZone: string, year: number): ZoneYear {
  const startMs = utcYearStartMs(year);
  const endMs = utcYearStartMs(year + 1);
  const startOffsetMs = intlOffsetMs(timeZone, startMs);
  const transitions: ZoneTransition[] = [];
  let sampleMs = startMs;
  let sampleOffsetMs = startOffsetMs;
  while (sampleMs < endMs) {
    const nextSampleMs = Math.min(sampleMs + dayMs, endMs);
    const nextOffsetMs = intlOffsetMs(timeZone, nextSampleMs);
    // A day may hold more than one change; find each change after the previous one.
    let fromMs = sampleMs;
    let fromOffsetMs = sampleOffsetMs;
    while (fromOffsetMs !== nextOffsetMs) {
      const atMs = bisectChange(timeZone, fromMs, nextSampleMs, fromOffsetMs);
      const offsetAfterMs = intlOffsetMs(timeZone, atMs);
      transitions.push({ atMs, offsetBeforeMs: fromOffsetMs, offsetAfterMs });
      fromMs = atMs;
      fromOffsetMs = offsetAfterMs;
    }
    sampleMs = nextSampleMs;
    sampleOffsetMs = nextOffsetMs;
  }
  return { startMs, startOffsetMs, transitions };
}

function zoneYearOf(timeZone: string, year: number): ZoneYear {
  const cacheKey = `${timeZone}|${year}`;
  let zoneYear = zoneYears.get(cacheKey);
  if (zoneYear === undefined) {
    if (zoneYears.size >= zoneYearCacheSizeMax) zoneYears.clear();
    zoneYear = computeZoneYear(timeZone, year);
    zoneYears.set(cacheKey, zoneYear);
  }
  return zoneYear;
}

function isUtc(timeZone: string): boolean {
  return utcNames.has(timeZone);
}

/** Wall time minus UTC at `instantMs`, in milliseconds (a multiple of 1 000). */
export function offsetAtMs(timeZone: string, instantMs: number): number {
  if (isUtc(timeZone)) return 0;
  const zoneYear = zoneYearOf(timeZone, new Date(instantMs).getUTCFullYear());
  let offsetMs = zoneYear.startOffsetMs;
  for (const transition of zoneYear.transitions) {
    if (transition.atMs > instantMs) break;
    offsetMs = transition.offsetAfterMs;
  }
  return offsetMs;
}

/** The last transition at or before `instantMs`, looking back no further than `lookBackMs`. */
export function previousTransition(timeZone: string, instantMs: number, lookBackMs: number): ZoneTransition | null {
  if (isUtc(timeZone)) return null;
  const firstYear = new Date(instantMs - lookBackMs).getUTCFullYear() - 1;
  let found: ZoneTransition | null = null;
  for (let year = firstYear; year <= new Date(instantMs).getUTCFullYear(); year++) {
    for (const transition of zoneYearOf(timeZone, year).transitions) {
      if (transition.atMs > instantMs) return found;
      if (transition.atMs >= instantMs - lookBackMs) found = transition;
    }
  }
  return found;
}

/** The first transition strictly after `instantMs` and before `untilMs`, or null. */
export function nextTransition(timeZone: string, instantMs: number, untilMs: number): ZoneTransition | null {
  if (isUtc(timeZone)) return null;
  // Year Y's list holds transitions up to and including the first instant of Y + 1.
  const firstYear = new Date(instantMs).getUTCFullYear() - 1;
  for (let year = firstYear; utcYearStartMs(year) < untilMs; year++) {
    for (const transition of zoneYearOf(timeZone, year).transitions) {
      if (transition.atMs >= untilMs) return null;
      if (transition.atMs > instantMs) return transition;
    }
  }
  return null;
}

function twoDigits(value: number): string {
  return String(value).padStart(2, '0');
}

/** An offset as RFC 3339 writes it ("-04:00"); seconds only when the zone has them (LMT). */
export function formatOffset(offsetMs: number): string {
  const sign = offsetMs < 0 ? '-' : '+';
  const totalSeconds = Math.abs(offsetMs) / secondMs;
  const hours = Math.floor(totalSeconds / 3600);
  const minutes = Math.floor((totalSeconds % 3600) / 60);
  const seconds = totalSeconds % 60;
  return `${sign}${twoDigits(hours)}:${twoDigits(minutes)}${seconds === 0 ? '' : `:${twoDigits(seconds)}`}`;
}

/** "2026-03-08T03:30:00.000-04:00": the local wall time of an instant, with its offset. */
export function localWallTime(instantMs: number, timeZone: string): string {
  const offsetMs = offsetAtMs(timeZone, instantMs);
  const wallIso = new Date(instantMs + offsetMs).toISOString();
  return `${wallIso.slice(0, -1)}${formatOffset(offsetMs)}`;
}
