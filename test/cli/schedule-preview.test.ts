// `tickler schedules preview`: the domain's occurrences with local and UTC times, and a note
// wherever a DST transition's rules act (America/New_York: clocks spring forward at 02:00 on
// 2027-03-14, fall back at 02:00 on 2026-11-01). Also run as a process, with no server.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { tickler } from './tickler-process.js';
import { previewRows, readableLocal, type SchedulePreviewRequest } from '../../src/cli/schedule-preview.js';

const newYork = 'America/New_York';

function preview(cron: string, from: string, count: number, dst: SchedulePreviewRequest['dst'] = { gap: 'shift', repeat: 'first' }) {
  return previewRows({ cron, tz: newYork, fromMs: Date.parse(from), count, dst });
}

test('a wall time in the spring-forward gap is noted where it moves, and nowhere else', () => {
  const rows = preview('30 2 * * *', '2027-03-13T00:00:00Z', 3);
  assert.deepEqual(rows.map((row) => [row.scheduled_at, row.local]), [
    ['2027-03-13T07:30:00.000Z', '2027-03-13T02:30:00.000-05:00'],
    ['2027-03-14T07:30:00.000Z', '2027-03-14T03:30:00.000-04:00'],
    ['2027-03-15T06:30:00.000Z', '2027-03-15T02:30:00.000-04:00'],
  ]);
  assert.deepEqual(rows.map((row) => row.note), [
    null,
    '02:30 does not exist on 2027-03-14 (clocks go from 02:00 to 03:00, -05:00 to -04:00): runs at 03:30 instead (dst.gap shift)',
    null,
  ]);
});

test('gap: skip lists the skipped occurrence, marked and noted', () => {
  const [, skipped] = preview('30 2 * * *', '2027-03-13T00:00:00Z', 3, { gap: 'skip', repeat: 'first' });
  assert.equal(skipped?.skipped, true);
  assert.match(skipped?.note ?? '', /02:30 does not exist on 2027-03-14 .*: skipped \(dst.gap skip\)/);
});

test('a wall time just after the gap, which exists, has no note', () => {
  const rows = preview('15 3 * * *', '2027-03-13T00:00:00Z', 3);
  assert.deepEqual(rows.map((row) => row.note), [null, null, null]);
  assert.equal(rows[1]?.local, '2027-03-14T03:15:00.000-04:00');
});

test('a repeated wall time says which pass each occurrence is', () => {
  const rows = preview('30 1 * * *', '2026-10-31T12:00:00Z', 3, { gap: 'shift', repeat: 'both' });
  assert.deepEqual(rows.map((row) => row.local), [
    '2026-11-01T01:30:00.000-04:00', '2026-11-01T01:30:00.000-05:00', '2026-11-02T01:30:00.000-05:00',
  ]);
  assert.match(rows[0]?.note ?? '', /^01:30 happens twice on 2026-11-01 \(clocks go from 02:00 to 01:00, -04:00 to -05:00\): this is the first time \(dst.repeat both\)$/);
  assert.match(rows[1]?.note ?? '', /this is the second time \(dst.repeat both\)$/);
  assert.equal(rows[2]?.note, null);
});

test('an interval-like schedule notes the gap once', () => {
  const rows = preview('*/30 * * * *', '2027-03-14T06:00:00Z', 4);
  assert.deepEqual(rows.map((row) => row.local.slice(11, 16)), ['01:30', '03:00', '03:30', '04:00']);
  assert.deepEqual(rows.map((row) => row.note === null), [true, false, true, true]);
  assert.match(rows[1]?.note ?? '', /clocks go from 02:00 to 03:00.*do not exist and have no runs/);
});

test('local times read with their weekday', () => {
  assert.equal(readableLocal('2027-03-14T03:30:00.000-04:00'), 'Sun 2027-03-14 03:30:00 -04:00');
});

test('tickler schedules preview prints a table offline, --json the rows, and a bad expression exits 2', async () => {
  // No server anywhere: TICKLER_URL points at a port nothing listens on.
  const offline = { TICKLER_URL: 'http://127.0.0.1:9' };
  const table = await tickler(['schedules', 'preview', '30 2 * * *', '--tz', newYork, '--count', '2', '--from', '2027-03-13T00:00:00Z'],
    offline);
  assert.equal(table.code, 0, table.stderr);
  assert.deepEqual(table.stdout.split('\n'), [
    '30 2 * * * in America/New_York (dst.gap shift, dst.repeat first), the next 2 after 2027-03-13 00:00:00Z, before jitter:',
    '',
    'LOCAL (America/New_York)        UTC                   NOTE',
    'Sat 2027-03-13 02:30:00 -05:00  2027-03-13 07:30:00Z',
    'Sun 2027-03-14 03:30:00 -04:00  2027-03-14 07:30:00Z  02:30 does not exist on 2027-03-14 (clocks go from 02:00 to 03:00, -05:00 to -04:00): runs at 03:30 instead (dst.gap shift)',
    '',
  ]);
  const json = await tickler(['schedules', 'preview', '0 9 * * 1', '--tz', 'Europe/Paris', '--count', '1', '--from', '2027-01-01T00:00:00Z',
    '--json']);
  assert.deepEqual(JSON.parse(json.stdout), {
    items: [{ scheduled_at: '2027-01-04T08:00:00.000Z', local: '2027-01-04T09:00:00.000+01:00', skipped: false, note: null }],
  });
  const bad = await tickler(['schedules', 'preview', '0 0 30 2 *']);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /invalid_schedule/);
  const zone = await tickler(['schedules', 'preview', '0 9 * * *', '--tz', 'Mars/Olympus']);
  assert.equal(zone.code, 2);
  assert.match(zone.stderr, /invalid_timezone/);
  const gap = await tickler(['schedules', 'preview', '0 9 * * *', '--gap', 'jump']);
  assert.equal(gap.code, 2);
  assert.match(gap.stderr, /Allowed choices are shift, skip/);
});
