// Property tests over many zones and years: occurrences strictly increase, none at
// or before `after`, no duplicate instants; the expected count per local day for fixed-time
// daily schedules under each DST rule; counting equals enumerating; and an oracle that
// knows nothing of our transition finder: it walks real time minute by minute through Intl
// and applies the DST rules of docs/schedules.md to what it sees.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  compileSchedule, countOccurrences, newestOccurrences, occurrencesAfter, type CompiledSchedule, type Occurrence,
} from '../../src/domain/schedule.js';
import type { DstSpec } from '../../src/domain/types.js';
import { nextTransition } from '../../src/domain/schedule/time-zone.js';

const minuteMs = 60_000;
const hourMs = 3_600_000;
const dayMs = 86_400_000;

/** Zones with 1 h, 30 min (Lord_Howe), 2 h (Troll), negative (Dublin) and midnight (Havana, Santiago) shifts. */
const zones = [
  'UTC', 'America/New_York', 'America/Los_Angeles', 'America/St_Johns', 'America/Havana', 'America/Santiago',
  'America/Sao_Paulo', 'America/Nuuk', 'Europe/London', 'Europe/Berlin', 'Europe/Dublin', 'Europe/Moscow',
  'Africa/Casablanca', 'Asia/Tehran', 'Asia/Jerusalem', 'Asia/Kolkata', 'Asia/Tokyo', 'Australia/Sydney',
  'Australia/Adelaide', 'Australia/Lord_Howe', 'Pacific/Chatham', 'Pacific/Auckland', 'Antarctica/Troll',
];

const dstArbitrary: fc.Arbitrary<DstSpec> = fc.record({
  gap: fc.constantFrom('shift' as const, 'skip' as const),
  repeat: fc.constantFrom('first' as const, 'last' as const, 'both' as const),
});

/** An instant in 1995..2037, biased towards the months where most zones change offset. */
const instantArbitrary: fc.Arbitrary<number> = fc.tuple(
  fc.integer({ min: 1995, max: 2037 }),
  fc.constantFrom(0, 2, 3, 3, 4, 8, 9, 9, 10, 10),
  fc.integer({ min: 0, max: 30 * dayMs }),
).map(([year, monthIndex, offsetMs]) => Date.UTC(year, monthIndex, 1) + offsetMs);

function listOf(values: number[]): string {
  return [...new Set(values)].sort((left, right) => left - right).join(',');
}

const minuteField = fc.oneof(
  fc.integer({ min: 0, max: 59 }).map(String),
  fc.constantFrom('*', '*/5', '*/15', '*/7', '0-59/20'),
  fc.array(fc.integer({ min: 0, max: 59 }), { minLength: 1, maxLength: 4 }).map(listOf),
);
const hourField = fc.oneof(
  fc.integer({ min: 0, max: 23 }).map(String),
  fc.constantFrom('*', '*/2', '*/5', '1-3'),
  fc.array(fc.integer({ min: 0, max: 23 }), { minLength: 1, maxLength: 4 }).map(listOf),
);
const dayOfWeekField = fc.oneof(fc.constant('*'), fc.constant('*'), fc.constantFrom('1-5', '0,6', '2'));
/** Five-field crons whose day-of-month and month are `*`, so the oracle needs only the weekday. */
const cronArbitrary = fc.tuple(minuteField, hourField, dayOfWeekField)
  .map(([minute, hour, dayOfWeek]) => `${minute} ${hour} * * ${dayOfWeek}`);

function valuesOf(field: string, max: number): Set<number> {
  const values = new Set<number>();
  for (const item of field.split(',')) {
    const [range, stepText] = item.split('/');
    const step = stepText === undefined ? 1 : Number(stepText);
    const [first, last] = range === '*' ? [0, max] : range!.includes('-')
      ? range!.split('-').map(Number) as [number, number] : [Number(range), Number(range)];
    for (let value = first; value <= last; value += step) values.add(value);
  }
  return values;
}

interface WallMinute { key: string; dayKey: string; hour: number; minute: number; weekday: number; offsetMs: number }

const formatters = new Map<string, Intl.DateTimeFormat>();
const weekdays = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];

/** The oracle's only source of truth: Intl's wall time of an instant. */
function wallMinuteOf(timeZone: string, instantMs: number): WallMinute {
  let formatter = formatters.get(timeZone);
  if (formatter === undefined) {
    formatter = new Intl.DateTimeFormat('en-US', { timeZone, hourCycle: 'h23', weekday: 'short', year: 'numeric',
      month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit' });
    formatters.set(timeZone, formatter);
  }
  const parts = Object.fromEntries(formatter.formatToParts(instantMs).map((part) => [part.type, part.value]));
  const wallMs = Date.UTC(Number(parts.year), Number(parts.month) - 1, Number(parts.day), Number(parts.hour), Number(parts.minute));
  const dayKey = `${parts.year}-${parts.month}-${parts.day}`;
  return { key: `${dayKey}T${parts.hour}:${parts.minute}`, dayKey, hour: Number(parts.hour), minute: Number(parts.minute),
    weekday: weekdays.indexOf(parts.weekday!), offsetMs: wallMs - instantMs };
}

/** Occurrences in [startMs, endMs) by walking every minute (5-field crons fire on whole minutes). */
function oracleOccurrences(cron: string, timeZone: string, dst: DstSpec, startMs: number, endMs: number): Occurrence[] {
  const [minuteText, hourText, , , dayOfWeekText] = cron.split(' ') as [string, string, string, string, string];
  const minutes = valuesOf(minuteText, 59);
  const hours = valuesOf(hourText, 23);
  const weekdaySet = valuesOf(dayOfWeekText, 6);
  const intervalLike = minuteText.startsWith('*') || hourText.startsWith('*');
  const matches = (wall: WallMinute): boolean => minutes.has(wall.minute) && hours.has(wall.hour) && weekdaySet.has(wall.weekday);
  const byWall = new Map<string, number[]>();
  const results: Occurrence[] = [];
  let previous = wallMinuteOf(timeZone, startMs - minuteMs);
  for (let instantMs = startMs; instantMs < endMs; instantMs += minuteMs) {
    const wall = wallMinuteOf(timeZone, instantMs);
    if (matches(wall)) byWall.set(wall.key, [...(byWall.get(wall.key) ?? []), instantMs]);
    if (!intervalLike && wall.offsetMs > previous.offsetMs) {
      // A gap: wall minutes from before + 1 min up to this one's were skipped; read them with the old offset.
      for (let skippedMs = instantMs; skippedMs < instantMs + (wall.offsetMs - previous.offsetMs); skippedMs += minuteMs) {
        const skippedWall = wallMinuteOf('UTC', skippedMs + previous.offsetMs);
        const weekday = new Date(skippedMs + previous.offsetMs).getUTCDay();
        if (matches({ ...skippedWall, weekday })) results.push({ scheduledAtMs: skippedMs, skippedDst: dst.gap === 'skip' });
      }
    }
    previous = wall;
  }
  for (const instants of byWall.values()) {
    const kept = intervalLike || instants.length === 1 || dst.repeat === 'both' ? instants
      : dst.repeat === 'first' ? instants.slice(0, 1) : instants.slice(-1);
    for (const scheduledAtMs of kept) results.push({ scheduledAtMs, skippedDst: false });
  }
  results.sort((left, right) => left.scheduledAtMs - right.scheduledAtMs || Number(left.skippedDst) - Number(right.skippedDst));
  return results.filter((occurrence, index) => index === 0 || results[index - 1]!.scheduledAtMs !== occurrence.scheduledAtMs);
}

function compile(cron: string, timeZone: string, dst: DstSpec): CompiledSchedule {
  return compileSchedule({ cron, tz: timeZone }, dst);
}

void test('occurrences strictly increase, come after `after`, fall on whole seconds, never repeat', () => {
  fc.assert(fc.property(cronArbitrary, fc.constantFrom(...zones), dstArbitrary, instantArbitrary, (cron, timeZone, dst, afterMs) => {
    const occurrences = occurrencesAfter(compile(cron, timeZone, dst), afterMs, 200);
    assert.ok(occurrences.length > 0);
    let previousMs = afterMs;
    for (const occurrence of occurrences) {
      assert.ok(occurrence.scheduledAtMs > previousMs, `${cron} ${timeZone} at ${new Date(occurrence.scheduledAtMs).toISOString()}`);
      assert.equal(occurrence.scheduledAtMs % 1_000, 0);
      previousMs = occurrence.scheduledAtMs;
    }
  }), { numRuns: 300 });
});

void test('occurrences equal an oracle that walks real time minute by minute through Intl', () => {
  fc.assert(fc.property(cronArbitrary, fc.constantFrom(...zones), dstArbitrary, instantArbitrary, fc.boolean(),
    (cron, timeZone, dst, randomMs, nearTransition) => {
    // Half the runs look at the next transition (found by the code under test, judged by the oracle).
    const transition = nearTransition ? nextTransition(timeZone, randomMs, randomMs + 400 * dayMs) : null;
    const startMs = transition === null ? randomMs : transition.atMs - dayMs + (randomMs % (6 * hourMs)) - 3 * hourMs;
    const windowStartMs = Math.floor(startMs / minuteMs) * minuteMs;
    const windowEndMs = windowStartMs + 2 * dayMs;
    const expected = oracleOccurrences(cron, timeZone, dst, windowStartMs, windowEndMs);
    const actual = occurrencesAfter(compile(cron, timeZone, dst), windowStartMs - 1, 10_000, windowEndMs);
    // The oracle sees only its window: a repeat or gap straddling an edge looks different to it.
    const inside = (occurrence: Occurrence): boolean =>
      occurrence.scheduledAtMs >= windowStartMs + 3 * hourMs && occurrence.scheduledAtMs < windowEndMs - 3 * hourMs;
    const show = (list: Occurrence[]): string[] => list.filter(inside)
      .map((occurrence) => `${new Date(occurrence.scheduledAtMs).toISOString()}${occurrence.skippedDst ? '!' : ''}`);
    assert.deepEqual(show(actual), show(expected), `${cron} in ${timeZone} ${JSON.stringify(dst)}`);
  }), { numRuns: 120 });
});

void test('fixed-time daily schedules: one occurrence per local day, two on a repeat day only with repeat both', () => {
  fc.assert(fc.property(
    fc.integer({ min: 0, max: 23 }), fc.integer({ min: 0, max: 59 }), fc.constantFrom(...zones), dstArbitrary,
    fc.integer({ min: 1996, max: 2036 }),
    (hour, minute, timeZone, dst, year) => {
      const cron = `${minute} ${hour} * * *`;
      const startMs = Date.UTC(year, 0, 2);
      const endMs = Date.UTC(year, 11, 30);
      const perDay = new Map<string, number>();
      let repeatedDays = 0;
      for (const occurrence of occurrencesAfter(compile(cron, timeZone, dst), startMs, 1_000, endMs)) {
        const wall = wallMinuteOf(timeZone, occurrence.scheduledAtMs);
        // A wall time inside a gap is read with the offset before it, so it shows later by the
        // gap's length, past midnight when the gap ends the day (America/Nuuk, 2024-03-30:
        // 23:00 is 00:00 the next day): it counts for the day the cron named.
        const shiftMs = ((wall.hour * 60 + wall.minute - (hour * 60 + minute) + 1_440) % 1_440) * minuteMs;
        const { dayKey } = wallMinuteOf('UTC', occurrence.scheduledAtMs + wall.offsetMs - shiftMs);
        perDay.set(dayKey, (perDay.get(dayKey) ?? 0) + 1);
      }
      for (let dayStartMs = startMs + dayMs; dayStartMs < endMs - dayMs; dayStartMs += dayMs) {
        const dayKey = wallMinuteOf('UTC', dayStartMs).dayKey;
        const count = perDay.get(dayKey) ?? 0;
        // The wall time occurs twice on this day when two instants a shift apart both show it;
        // only a day whose offset changes can have that.
        const wallMs = dayStartMs + hour * hourMs + minute * minuteMs;
        if (wallMinuteOf(timeZone, dayStartMs - 15 * hourMs).offsetMs === wallMinuteOf(timeZone, dayStartMs + 39 * hourMs).offsetMs) {
          assert.equal(count, 1, `${cron} ${timeZone} on ${dayKey}`);
          continue;
        }
        const instants = [-14, -13, -12, -11, -10, -9, -8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
          .flatMap((hours) => [hours * hourMs, hours * hourMs + 30 * minuteMs, hours * hourMs + 45 * minuteMs])
          .map((offsetMs) => wallMs - offsetMs)
          .filter((instantMs) => wallMinuteOf(timeZone, instantMs).key === wallMinuteOf('UTC', wallMs).key);
        const expected = instants.length >= 2 && dst.repeat === 'both' ? 2 : 1;
        if (instants.length >= 2) repeatedDays++;
        assert.equal(count, expected, `${cron} ${timeZone} ${JSON.stringify(dst)} on ${dayKey}`);
      }
      assert.ok(repeatedDays <= 3);
    },
  ), { numRuns: 60 });
});

void test('counting equals enumerating, and the newest are the tail', () => {
  fc.assert(fc.property(cronArbitrary, fc.constantFrom(...zones), dstArbitrary, instantArbitrary,
    fc.integer({ min: 1, max: 20 * dayMs }), fc.integer({ min: 1, max: 150 }),
    (cron, timeZone, dst, afterMs, spanMs, countMax) => {
      const schedule = compile(cron, timeZone, dst);
      const all = occurrencesAfter(schedule, afterMs, 1_000_000, afterMs + spanMs);
      assert.equal(countOccurrences(schedule, afterMs, afterMs + spanMs), all.length, `${cron} ${timeZone}`);
      assert.deepEqual(newestOccurrences(schedule, afterMs, afterMs + spanMs, countMax), all.slice(-countMax));
    }), { numRuns: 80 });
});
