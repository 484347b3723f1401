// compileSchedule's validation (every rejection is a TicklerError with its field) and the
// query functions' boundaries: strictly after, limits, until, counting without enumerating.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { parseCron } from '../../src/domain/schedule/cron-expression.js';
import { nextTimeOfDay } from '../../src/domain/schedule/wall-calendar.js';
import {
  compileSchedule, countOccurrences, isValidTimeZone, newestOccurrences, nextOccurrence, occurrencesAfter,
  type CompiledSchedule,
} from '../../src/domain/schedule.js';
import { TicklerError } from '../../src/errors.js';
import type { DstSpec, ScheduleSpec } from '../../src/domain/types.js';

const dst: DstSpec = { gap: 'shift', repeat: 'first' };
const cron = (expression: string, tz = 'UTC', rules: DstSpec = dst): CompiledSchedule =>
  compileSchedule({ cron: expression, tz }, rules);
const at = (iso: string): number => Date.parse(iso);
const iso = (ms: number): string => new Date(ms).toISOString();

function assertRejected(spec: ScheduleSpec, code: string, field: string, rules: DstSpec = dst): void {
  assert.throws(() => compileSchedule(spec, rules), (error: unknown) => {
    assert.ok(error instanceof TicklerError, `expected a TicklerError, got ${String(error)}`);
    assert.equal(error.code, code, error.message);
    assert.equal(error.field, field);
    return true;
  }, JSON.stringify(spec).slice(0, 80));
}

void test('invalid cron expressions answer invalid_schedule on schedule.cron', () => {
  const invalid = [
    '0 0 30 2 *', '0 0 31 4,6,9,11 *', '*/0 * * * *', '60 * * * *', '* 24 * * *', '0 0 0 * *', '0 0 * 13 *',
    '0 0 * * 8', '', '   ', '* * * *', '* * * * * * *', '1,,2 * * * *', '5-1 * * * *', '@every 5m', '@reboot',
    'L * * * *', '0 0 * * L', '0 0 * * 1#6', '0 0 * * 1#0', 'a b c d e', '0 0 32W * *', '*/60 * * * *', '0 0 ? ? ? ?',
    '0 0 * * MON-', '-1 * * * *', '1/ * * * *', '0 0 1-2-3 * *', '0 0 1W/2 * *', '99999 * * * *',
    'x'.repeat(1_025), `${Array.from({ length: 2_500 }, (_, index) => index % 60).join(',')} * * * *`,
  ];
  for (const expression of invalid) assertRejected({ cron: expression, tz: 'UTC' }, 'invalid_schedule', 'schedule.cron');
});

void test('valid cron expressions compile', () => {
  const valid = [
    '* * * * *', '* * * * * *', '0 0 29 2 *', '@yearly', '@ANNUALLY', '@monthly', '@weekly', '@daily', '@midnight', '@hourly',
    '0 9 * * mon-fri', '0 0 1,15,L * *', '0 0 LW * *', '0 0 ? * 1#1,5L', '0 0 * * 7', '0 0 1-31/2 * *', '0 */5 * * *',
    `${Array.from({ length: 60 }, (_, index) => index).join(',')} * * * *`, '  0   0  * * *  ',
  ];
  for (const expression of valid) assert.equal(cron(expression).kind, 'cron', expression);
});

void test('unknown time zones answer invalid_timezone on schedule.tz', () => {
  for (const tz of ['Mars/Olympus_Mons', '', '+05:00', '../../etc/passwd', 'America/New York', 'x'.repeat(200), 'UTC\u0000']) {
    assertRejected({ cron: '0 0 * * *', tz }, 'invalid_timezone', 'schedule.tz');
  }
  assert.equal(isValidTimeZone('Europe/Berlin'), true);
  assert.equal(isValidTimeZone('Australia/Lord_Howe'), true);
  assert.equal(isValidTimeZone('Nowhere/City'), false);
});

void test('one-shot at: RFC 3339, beyond 9999 and nonsense rejected on schedule.at', () => {
  assert.equal(compileSchedule({ at: '2026-12-01T09:00:00.000Z' }, dst).atMs, at('2026-12-01T09:00:00.000Z'));
  assert.equal(compileSchedule({ at: '2026-12-01T10:30:00+01:30' }, dst).atMs, at('2026-12-01T09:00:00.000Z'));
  assert.equal(compileSchedule({ at: '2001-01-01T00:00:00Z' }, dst).atMs, at('2001-01-01T00:00:00Z'), 'the past is fine');
  assert.equal(compileSchedule({ at: '9999-12-31T23:59:59.999Z' }, dst).atMs, Date.UTC(9999, 11, 31, 23, 59, 59, 999));
  for (const bad of ['10000-01-01T00:00:00Z', '+010000-01-01T00:00:00.000Z', '9999-12-31T23:00:00-05:00', 'NaN', '',
    '2026-02-30T00:00:00Z', '2026-13-01T00:00:00Z', '2026-12-01', '2026-12-01T25:00:00Z', '2026-12-01T09:00:00',
    '2026-12-01T09:00:00+24:00', 'tomorrow']) {
    assertRejected({ at: bad }, 'invalid_schedule', 'schedule.at');
  }
  assertRejected({ at: 12 } as unknown as ScheduleSpec, 'invalid_schedule', 'schedule.at');
  const once = compileSchedule({ at: '2026-12-01T09:00:00.000Z' }, dst);
  assert.equal(once.minGapMs, Infinity);
  assert.equal(once.tz, 'UTC');
});

void test('bad dst rules answer invalid_schedule on the dst field', () => {
  assertRejected({ cron: '0 0 * * *', tz: 'UTC' }, 'invalid_schedule', 'dst.gap', { gap: 'maybe', repeat: 'first' } as unknown as DstSpec);
  assertRejected({ cron: '0 0 * * *', tz: 'UTC' }, 'invalid_schedule', 'dst.repeat', { gap: 'skip', repeat: 'twice' } as unknown as DstSpec);
});

void test('with nowMs, a schedule without an occurrence in the next 5 years is rejected', () => {
  // A fifth Monday in February needs a leap year starting on a Monday: none from 2026 to 2031.
  const spec = { cron: '0 0 * 2 1#5', tz: 'UTC' };
  assert.equal(compileSchedule(spec, dst).kind, 'cron', 'it does match some day');
  assert.throws(() => compileSchedule(spec, dst, { nowMs: at('2026-01-01T00:00:00Z') }),
    (error: unknown) => error instanceof TicklerError && error.code === 'invalid_schedule');
  assert.equal(compileSchedule({ cron: '0 0 29 2 *', tz: 'UTC' }, dst, { nowMs: at('2026-01-01T00:00:00Z') }).kind, 'cron');
});

void test('minGapMs is the smallest gap between consecutive wall times', () => {
  assert.equal(cron('*/15 * * * *').minGapMs, 900_000);
  assert.equal(cron('0 9,17 * * *').minGapMs, 8 * 3_600_000);
  assert.equal(cron('0 0 * * *').minGapMs, 86_400_000);
  assert.equal(cron('* * * * * *').minGapMs, 1_000);
  assert.equal(cron('0 0,23 * * *').minGapMs, 3_600_000, 'across midnight');
});

void test('occurrencesAfter: strictly after, at most limit, none at or after until', () => {
  const hourly = cron('0 * * * *');
  const start = at('2026-01-01T00:00:00Z');
  assert.deepEqual(occurrencesAfter(hourly, start, 2).map((o) => iso(o.scheduledAtMs)),
    ['2026-01-01T01:00:00.000Z', '2026-01-01T02:00:00.000Z']);
  assert.deepEqual(occurrencesAfter(hourly, start - 1, 1).map((o) => iso(o.scheduledAtMs)), ['2026-01-01T00:00:00.000Z']);
  assert.equal(occurrencesAfter(hourly, start, 100, start + 3 * 3_600_000).length, 2, 'until is exclusive');
  assert.deepEqual(occurrencesAfter(hourly, start, 0), []);
  assert.deepEqual(occurrencesAfter(hourly, NaN, 5), []);
  assert.equal(nextOccurrence(hourly, start + 1)?.scheduledAtMs, start + 3_600_000);
  const once = compileSchedule({ at: '2026-01-01T00:00:00Z' }, dst);
  assert.equal(occurrencesAfter(once, start - 1, 5).length, 1);
  assert.equal(occurrencesAfter(once, start, 5).length, 0);
  assert.equal(nextOccurrence(cron('0 0 1 1 *'), at('9999-06-01T00:00:00Z')), null, 'schedules end with 9999');
  assert.equal(iso(nextOccurrence(cron('0 0 1 1 *'), at('1960-06-01T00:00:00Z'))!.scheduledAtMs), '1961-01-01T00:00:00.000Z',
    'days before 1970 are negative numbers, not "none"');
  assert.equal(iso(nextOccurrence(cron('0 12 * * *', 'Europe/London'), at('1950-06-01T00:00:00Z'))!.scheduledAtMs),
    '1950-06-01T11:00:00.000Z');
});

void test('countOccurrences equals enumeration, across DST transitions too', () => {
  const cases: [string, string, DstSpec][] = [
    ['*/7 * * * *', 'America/New_York', dst],
    ['30 1,2 * * *', 'America/New_York', { gap: 'shift', repeat: 'both' }],
    ['30 1,2 * * *', 'America/New_York', { gap: 'skip', repeat: 'last' }],
    ['*/13 1-3 * * *', 'Australia/Lord_Howe', dst],
    ['0 0 L * *', 'Europe/Berlin', dst],
  ];
  for (const [expression, tz, rules] of cases) {
    const schedule = cron(expression, tz, rules);
    for (const [fromIso, untilIso] of [['2026-03-01T00:00:00Z', '2026-03-20T00:00:00Z'],
      ['2026-10-01T03:17:00Z', '2026-11-10T00:00:00Z'], ['2026-03-08T06:59:59Z', '2026-03-08T07:31:00Z']]) {
      const fromMs = at(fromIso!);
      const untilMs = at(untilIso!);
      const enumerated = occurrencesAfter(schedule, fromMs, 1_000_000, untilMs).length;
      assert.equal(countOccurrences(schedule, fromMs, untilMs), enumerated, `${expression} ${tz} ${fromIso}`);
    }
  }
});

void test('newestOccurrences is the tail of the enumeration', () => {
  const schedule = cron('*/10 * * * *', 'America/New_York', { gap: 'shift', repeat: 'both' });
  const fromMs = at('2026-10-30T00:00:00Z');
  const untilMs = at('2026-11-02T00:00:00Z');
  const all = occurrencesAfter(schedule, fromMs, 1_000_000, untilMs);
  for (const countMax of [1, 7, 100, all.length, all.length + 5]) {
    assert.deepEqual(newestOccurrences(schedule, fromMs, untilMs, countMax), all.slice(-countMax), `countMax ${countMax}`);
  }
});

void test('a job every second over a month is counted, not walked', () => {
  const everySecond = cron('* * * * * *', 'Europe/Berlin');
  const fromMs = at('2026-03-01T00:00:00Z');
  const untilMs = at('2026-04-01T00:00:00Z');
  const startedMs = performance.now();
  assert.equal(countOccurrences(everySecond, fromMs - 1, untilMs), 31 * 86_400);
  const newest = newestOccurrences(everySecond, fromMs - 1, untilMs, 100);
  assert.equal(newest.length, 100);
  assert.equal(newest.at(-1)?.scheduledAtMs, untilMs - 1_000);
  assert.ok(performance.now() - startedMs < 2_000, 'bounded time');
});

void test('minGapMs equals the smallest gap found by walking every matching second of the day', () => {
  const field = (max: number) => fc.uniqueArray(fc.integer({ min: 0, max }), { minLength: 1, maxLength: 6 })
    .map((values) => values.sort((left, right) => left - right).join(','));
  fc.assert(fc.property(field(59), field(59), field(23), (seconds, minutes, hours) => {
    const expression = `${seconds} ${minutes} ${hours} * * *`;
    const parsed = parseCron(expression);
    let walkedGapS = 86_400;
    let first = -1;
    let previous = -1;
    for (let time = nextTimeOfDay(parsed, 0); time >= 0; time = time + 1 < 86_400 ? nextTimeOfDay(parsed, time + 1) : -1) {
      if (first < 0) first = time;
      else walkedGapS = Math.min(walkedGapS, time - previous);
      previous = time;
    }
    walkedGapS = Math.min(walkedGapS, first + 86_400 - previous);
    assert.equal(cron(expression).minGapMs, walkedGapS * 1_000, expression);
  }), { numRuns: 500 });
});
