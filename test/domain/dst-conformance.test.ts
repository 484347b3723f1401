// The DST and calendar rules, one row per rule: docs/schedules.md's New York examples,
// a 30-minute shift (Lord Howe), Europe, the southern hemisphere, and the calendar corners
// (leap days, month ends, L, #, W, Vixie's day-field rule). A skipped (gap: skip) occurrence
// is written with a trailing "!".
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { compileSchedule, occurrencesAfter, localWallTime } from '../../src/domain/schedule.js';
import type { DstSpec } from '../../src/domain/types.js';

interface Row {
  name: string;
  cron: string;
  tz: string;
  dst?: Partial<DstSpec>;
  after: string;
  expected: string[];
}

const rows: Row[] = [
  // New York, spring forward 2026-03-08 02:00 EST -> 03:00 EDT.
  { name: 'NY gap shift (schedules.md)', cron: '30 2 * * *', tz: 'America/New_York', after: '2026-03-07T12:00:00Z',
    expected: ['2026-03-08T07:30:00.000Z', '2026-03-09T06:30:00.000Z'] },
  { name: 'NY gap skip', cron: '30 2 * * *', tz: 'America/New_York', dst: { gap: 'skip' }, after: '2026-03-07T12:00:00Z',
    expected: ['2026-03-08T07:30:00.000Z!', '2026-03-09T06:30:00.000Z'] },
  { name: 'NY gap start shifts to the transition', cron: '0 2 * * *', tz: 'America/New_York', after: '2026-03-07T12:00:00Z',
    expected: ['2026-03-08T07:00:00.000Z', '2026-03-09T06:00:00.000Z'] },
  { name: 'NY shifted time equal to a real one is one occurrence', cron: '30 2,3 * * *', tz: 'America/New_York',
    after: '2026-03-07T12:00:00Z', expected: ['2026-03-08T07:30:00.000Z', '2026-03-09T06:30:00.000Z', '2026-03-09T07:30:00.000Z'] },
  { name: 'NY skipped time equal to a real one fires', cron: '30 2,3 * * *', tz: 'America/New_York', dst: { gap: 'skip' },
    after: '2026-03-07T12:00:00Z', expected: ['2026-03-08T07:30:00.000Z', '2026-03-09T06:30:00.000Z'] },
  { name: 'NY interval-like across the gap', cron: '*/30 * * * *', tz: 'America/New_York', after: '2026-03-08T06:00:00Z',
    expected: ['2026-03-08T06:30:00.000Z', '2026-03-08T07:00:00.000Z', '2026-03-08T07:30:00.000Z'] },
  { name: 'NY hourly (interval-like) has no 02:00 on the gap day', cron: '@hourly', tz: 'America/New_York',
    after: '2026-03-08T05:30:00Z', expected: ['2026-03-08T06:00:00.000Z', '2026-03-08T07:00:00.000Z'] },
  // New York, fall back 2026-11-01 02:00 EDT -> 01:00 EST.
  { name: 'NY repeat first (schedules.md)', cron: '30 1 * * *', tz: 'America/New_York', after: '2026-10-31T12:00:00Z',
    expected: ['2026-11-01T05:30:00.000Z', '2026-11-02T06:30:00.000Z'] },
  { name: 'NY repeat last (schedules.md)', cron: '30 1 * * *', tz: 'America/New_York', dst: { repeat: 'last' },
    after: '2026-10-31T12:00:00Z', expected: ['2026-11-01T06:30:00.000Z', '2026-11-02T06:30:00.000Z'] },
  { name: 'NY repeat both (schedules.md)', cron: '30 1 * * *', tz: 'America/New_York', dst: { repeat: 'both' },
    after: '2026-10-31T12:00:00Z', expected: ['2026-11-01T05:30:00.000Z', '2026-11-01T06:30:00.000Z', '2026-11-02T06:30:00.000Z'] },
  { name: 'NY interval-like fires on both passes', cron: '*/30 * * * *', tz: 'America/New_York', after: '2026-11-01T04:45:00Z',
    expected: ['2026-11-01T05:00:00.000Z', '2026-11-01T05:30:00.000Z', '2026-11-01T06:00:00.000Z',
      '2026-11-01T06:30:00.000Z', '2026-11-01T07:00:00.000Z'] },
  { name: 'NY seconds field starting with * is interval-like', cron: '*/20 30 1 * * *', tz: 'America/New_York',
    after: '2026-11-01T05:00:00Z', expected: ['2026-11-01T05:30:00.000Z', '2026-11-01T05:30:20.000Z', '2026-11-01T05:30:40.000Z',
      '2026-11-01T06:30:00.000Z'] },
  { name: 'NY after the first pass, repeat first waits a day', cron: '30 1 * * *', tz: 'America/New_York',
    after: '2026-11-01T06:00:00Z', expected: ['2026-11-02T06:30:00.000Z'] },
  { name: 'NY from inside the gap window, the shifted time still comes', cron: '30 2 * * *', tz: 'America/New_York',
    after: '2026-03-08T07:10:00Z', expected: ['2026-03-08T07:30:00.000Z'] },
  // Lord Howe: a 30-minute shift. 2026-10-04 02:00 +10:30 -> 02:30 +11; 2026-04-05 02:00 +11 -> 01:30 +10:30.
  { name: 'Lord Howe gap shift by 30 min', cron: '15 2 * * *', tz: 'Australia/Lord_Howe', after: '2026-10-03T00:00:00Z',
    expected: ['2026-10-03T15:45:00.000Z', '2026-10-04T15:15:00.000Z'] },
  { name: 'Lord Howe gap skip', cron: '15 2 * * *', tz: 'Australia/Lord_Howe', dst: { gap: 'skip' }, after: '2026-10-03T00:00:00Z',
    expected: ['2026-10-03T15:45:00.000Z!', '2026-10-04T15:15:00.000Z'] },
  { name: 'Lord Howe outside the 30-min gap is untouched', cron: '45 2 * * *', tz: 'Australia/Lord_Howe',
    after: '2026-10-03T00:00:00Z', expected: ['2026-10-03T15:45:00.000Z', '2026-10-04T15:45:00.000Z'] },
  { name: 'Lord Howe repeat first', cron: '45 1 * * *', tz: 'Australia/Lord_Howe', after: '2026-04-04T00:00:00Z',
    expected: ['2026-04-04T14:45:00.000Z', '2026-04-05T15:15:00.000Z'] },
  { name: 'Lord Howe repeat last', cron: '45 1 * * *', tz: 'Australia/Lord_Howe', dst: { repeat: 'last' },
    after: '2026-04-04T00:00:00Z', expected: ['2026-04-04T15:15:00.000Z', '2026-04-05T15:15:00.000Z'] },
  { name: 'Lord Howe repeat both', cron: '45 1 * * *', tz: 'Australia/Lord_Howe', dst: { repeat: 'both' },
    after: '2026-04-04T00:00:00Z', expected: ['2026-04-04T14:45:00.000Z', '2026-04-04T15:15:00.000Z', '2026-04-05T15:15:00.000Z'] },
  // Europe/Berlin: 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET.
  { name: 'Berlin gap shift', cron: '30 2 * * *', tz: 'Europe/Berlin', after: '2026-03-28T12:00:00Z',
    expected: ['2026-03-29T01:30:00.000Z', '2026-03-30T00:30:00.000Z'] },
  { name: 'Berlin repeat first', cron: '30 2 * * *', tz: 'Europe/Berlin', after: '2026-10-24T12:00:00Z',
    expected: ['2026-10-25T00:30:00.000Z', '2026-10-26T01:30:00.000Z'] },
  { name: 'Berlin repeat last', cron: '30 2 * * *', tz: 'Europe/Berlin', dst: { repeat: 'last' }, after: '2026-10-24T12:00:00Z',
    expected: ['2026-10-25T01:30:00.000Z', '2026-10-26T01:30:00.000Z'] },
  { name: 'Berlin weekdays 9 and 17 (fixed-time list)', cron: '0 9,17 * * 1-5', tz: 'Europe/Berlin', after: '2026-03-27T12:00:00Z',
    expected: ['2026-03-27T16:00:00.000Z', '2026-03-30T07:00:00.000Z', '2026-03-30T15:00:00.000Z'] },
  // Sydney: 2026-10-04 02:00 AEST -> 03:00 AEDT; 2026-04-05 03:00 AEDT -> 02:00 AEST.
  { name: 'Sydney gap shift', cron: '30 2 * * *', tz: 'Australia/Sydney', after: '2026-10-03T00:00:00Z',
    expected: ['2026-10-03T16:30:00.000Z', '2026-10-04T15:30:00.000Z'] },
  { name: 'Sydney repeat first', cron: '30 2 * * *', tz: 'Australia/Sydney', after: '2026-04-04T00:00:00Z',
    expected: ['2026-04-04T15:30:00.000Z', '2026-04-05T16:30:00.000Z'] },
  { name: 'Sydney repeat both', cron: '30 2 * * *', tz: 'Australia/Sydney', dst: { repeat: 'both' }, after: '2026-04-04T00:00:00Z',
    expected: ['2026-04-04T15:30:00.000Z', '2026-04-04T16:30:00.000Z', '2026-04-05T16:30:00.000Z'] },
  // Santiago changes at midnight: 2026-09-06 00:00 -04 -> 01:00 -03; 2026-04-05 00:00 -03 -> 2026-04-04 23:00 -04.
  { name: 'Santiago midnight gap: @daily shifts to 01:00', cron: '@daily', tz: 'America/Santiago', after: '2026-09-05T12:00:00Z',
    expected: ['2026-09-06T04:00:00.000Z', '2026-09-07T03:00:00.000Z'] },
  { name: 'Santiago repeat both, the day before the transition date', cron: '30 23 * * *', tz: 'America/Santiago',
    dst: { repeat: 'both' }, after: '2026-04-04T12:00:00Z',
    expected: ['2026-04-05T02:30:00.000Z', '2026-04-05T03:30:00.000Z', '2026-04-06T03:30:00.000Z'] },
  { name: 'Santiago repeat last', cron: '30 23 * * *', tz: 'America/Santiago', dst: { repeat: 'last' },
    after: '2026-04-04T12:00:00Z', expected: ['2026-04-05T03:30:00.000Z', '2026-04-06T03:30:00.000Z'] },
  // Calendar corners.
  { name: 'leap day', cron: '0 0 29 2 *', tz: 'UTC', after: '2026-01-01T00:00:00Z',
    expected: ['2028-02-29T00:00:00.000Z', '2032-02-29T00:00:00.000Z'] },
  { name: 'leap day in Tokyo', cron: '0 0 29 2 *', tz: 'Asia/Tokyo', after: '2026-01-01T00:00:00Z',
    expected: ['2028-02-28T15:00:00.000Z'] },
  { name: 'month ends (L)', cron: '0 0 L * *', tz: 'UTC', after: '2027-12-15T00:00:00Z',
    expected: ['2027-12-31T00:00:00.000Z', '2028-01-31T00:00:00.000Z', '2028-02-29T00:00:00.000Z', '2028-03-31T00:00:00.000Z',
      '2028-04-30T00:00:00.000Z'] },
  { name: 'second Monday (#)', cron: '0 9 * * MON#2', tz: 'UTC', after: '2026-01-01T00:00:00Z',
    expected: ['2026-01-12T09:00:00.000Z', '2026-02-09T09:00:00.000Z', '2026-03-09T09:00:00.000Z'] },
  { name: 'fifth Friday only in months that have one', cron: '0 0 * * 5#5', tz: 'UTC', after: '2026-01-01T00:00:00Z',
    expected: ['2026-01-30T00:00:00.000Z', '2026-05-29T00:00:00.000Z', '2026-07-31T00:00:00.000Z'] },
  { name: 'last Friday (5L)', cron: '0 0 * * 5L', tz: 'UTC', after: '2026-01-01T00:00:00Z',
    expected: ['2026-01-30T00:00:00.000Z', '2026-02-27T00:00:00.000Z'] },
  { name: 'nearest weekday (15W): Sunday 15th -> Monday 16th', cron: '0 0 15W * *', tz: 'UTC', after: '2026-02-01T00:00:00Z',
    expected: ['2026-02-16T00:00:00.000Z', '2026-03-16T00:00:00.000Z', '2026-04-15T00:00:00.000Z'] },
  { name: 'nearest weekday (1W) stays in the month', cron: '0 0 1W * *', tz: 'UTC', after: '2026-07-15T00:00:00Z',
    expected: ['2026-08-03T00:00:00.000Z', '2026-09-01T00:00:00.000Z'] },
  { name: 'last weekday (LW)', cron: '0 0 LW * *', tz: 'UTC', after: '2026-01-01T00:00:00Z',
    expected: ['2026-01-30T00:00:00.000Z', '2026-02-27T00:00:00.000Z', '2026-03-31T00:00:00.000Z'] },
  { name: 'Vixie OR: the 1st or a Monday', cron: '0 0 1 * 1', tz: 'UTC', after: '2026-06-20T00:00:00Z',
    expected: ['2026-06-22T00:00:00.000Z', '2026-06-29T00:00:00.000Z', '2026-07-01T00:00:00.000Z', '2026-07-06T00:00:00.000Z'] },
  { name: 'Vixie AND when a day field starts with *: odd-day Mondays', cron: '0 0 */2 * 1', tz: 'UTC', after: '2026-06-01T00:00:00Z',
    expected: ['2026-06-15T00:00:00.000Z', '2026-06-29T00:00:00.000Z', '2026-07-13T00:00:00.000Z'] },
  { name: '7 is Sunday, names work', cron: '0 12 * JAN SUN,7', tz: 'UTC', after: '2026-01-01T00:00:00Z',
    expected: ['2026-01-04T12:00:00.000Z', '2026-01-11T12:00:00.000Z'] },
  { name: 'seconds first with 6 fields', cron: '15,45 0 0 1 1 *', tz: 'UTC', after: '2026-01-01T00:00:00Z',
    expected: ['2026-01-01T00:00:15.000Z', '2026-01-01T00:00:45.000Z', '2027-01-01T00:00:15.000Z'] },
  { name: '@yearly in Kolkata (+05:30, no DST)', cron: '@yearly', tz: 'Asia/Kolkata', after: '2026-01-01T00:00:00Z',
    expected: ['2026-12-31T18:30:00.000Z', '2027-12-31T18:30:00.000Z'] },
  { name: 'step from a start value (N/STEP)', cron: '10/20 * * * *', tz: 'UTC', after: '2026-01-01T00:00:00Z',
    expected: ['2026-01-01T00:10:00.000Z', '2026-01-01T00:30:00.000Z', '2026-01-01T00:50:00.000Z', '2026-01-01T01:10:00.000Z'] },
];

function render(cron: string, tz: string, dst: Partial<DstSpec> | undefined, afterIso: string, count: number): string[] {
  const schedule = compileSchedule({ cron, tz }, { gap: 'shift', repeat: 'first', ...dst });
  return occurrencesAfter(schedule, Date.parse(afterIso), count)
    .map((occurrence) => `${new Date(occurrence.scheduledAtMs).toISOString()}${occurrence.skippedDst ? '!' : ''}`);
}

for (const row of rows) {
  void test(`DST conformance: ${row.name} (${row.cron}, ${row.tz})`, () => {
    assert.deepEqual(render(row.cron, row.tz, row.dst, row.after, row.expected.length), row.expected);
  });
}

void test('interval-like vs fixed-time follows the Vixie split', () => {
  const intervalLike = (cron: string): boolean => compileSchedule({ cron, tz: 'UTC' }, { gap: 'shift', repeat: 'first' }).intervalLike;
  assert.equal(intervalLike('*/15 * * * *'), true);
  assert.equal(intervalLike('0 * * * *'), true);
  assert.equal(intervalLike('* 30 2 * * *'), true);
  assert.equal(intervalLike('30 2 * * *'), false);
  assert.equal(intervalLike('0 9,17 * * 1-5'), false);
  assert.equal(intervalLike('0-59/15 2 * * *'), false);
  assert.equal(intervalLike('@daily'), false);
  assert.equal(intervalLike('@hourly'), true);
});

void test('gap and repeat rules do not apply to interval-like schedules', () => {
  for (const dst of [{ gap: 'skip' as const }, { repeat: 'last' as const }, { repeat: 'first' as const }]) {
    assert.deepEqual(render('0 * * * *', 'America/New_York', dst, '2026-11-01T04:30:00Z', 3),
      ['2026-11-01T05:00:00.000Z', '2026-11-01T06:00:00.000Z', '2026-11-01T07:00:00.000Z']);
    assert.deepEqual(render('0 * * * *', 'America/New_York', dst, '2026-03-08T05:30:00Z', 2),
      ['2026-03-08T06:00:00.000Z', '2026-03-08T07:00:00.000Z']);
  }
});

void test('localWallTime shows the local time with its offset (preview)', () => {
  assert.equal(localWallTime(Date.parse('2026-03-08T07:30:00Z'), 'America/New_York'), '2026-03-08T03:30:00.000-04:00');
  assert.equal(localWallTime(Date.parse('2026-11-01T06:30:00Z'), 'America/New_York'), '2026-11-01T01:30:00.000-05:00');
  assert.equal(localWallTime(Date.parse('2026-10-03T15:45:00Z'), 'Australia/Lord_Howe'), '2026-10-04T02:45:00.000+11:00');
  assert.equal(localWallTime(Date.parse('2026-01-01T00:00:00Z'), 'UTC'), '2026-01-01T00:00:00.000+00:00');
  assert.equal(localWallTime(Date.parse('2026-01-01T00:00:00Z'), 'Asia/Kolkata'), '2026-01-01T05:30:00.000+05:30');
});
