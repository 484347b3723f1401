/**
 * Plain-text tables for people at a terminal: a header row in capitals, columns padded to
 * their widest cell, two spaces between them, the last column unpadded. Scripts ask for
 * `--json` instead, which prints the API's answer unchanged.
 */
import type { Job, ListPage, Run, SilentJob } from '../worker/wire.js';
import { cliTableCellCharsCountMax } from '../limits.js';

export interface Column<T> {
  header: string;
  cell: (row: T) => string;
  /** Printed whole, not cut at `cliTableCellCharsCountMax` (a note meant to be read in full). */
  whole?: boolean;
}

function fit(text: string, whole: boolean): string {
  const oneLine = text.replace(/\s+/g, ' ').trim();
  return whole || oneLine.length <= cliTableCellCharsCountMax ? oneLine : `${oneLine.slice(0, cliTableCellCharsCountMax - 1)}…`;
}

export function formatTable<T>(columns: readonly Column<T>[], rows: readonly T[]): string {
  const cells = [columns.map((column) => column.header), ...rows.map((row) => columns.map((column) => fit(column.cell(row), column.whole === true)))];
  const widths = columns.map((_, index) => Math.max(...cells.map((line) => line[index]!.length)));
  return cells
    .map((line) => line.map((cell, index) => (index === line.length - 1 ? cell : cell.padEnd(widths[index]!))).join('  ').trimEnd())
    .join('\n');
}

/** A page as a table, "(none)" when empty, and the flag that fetches the next page when there is one. */
export function formatPage<T>(columns: readonly Column<T>[], page: ListPage<T>): string {
  const table = page.items.length === 0 ? '(none)' : formatTable(columns, page.items);
  return page.next_cursor === null ? table : `${table}\nmore: --cursor ${page.next_cursor}`;
}

const dash = '-';

/** `2026-11-30T02:00:00.000Z` as `2026-11-30 02:00:00Z`: UTC, to the second. */
export function shortTime(iso: string | null | undefined): string {
  if (iso === null || iso === undefined) return dash;
  const match = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(?:\.\d+)?Z$/.exec(iso);
  return match === null ? iso : `${match[1]} ${match[2]}Z`;
}

export function scheduleText(schedule: Job['schedule']): string {
  if ('cron' in schedule) return schedule.tz === 'UTC' ? schedule.cron : `${schedule.cron} (${schedule.tz})`;
  return `at ${shortTime(schedule.at)}`;
}

export const jobColumns: readonly Column<Job>[] = [
  { header: 'JOB_ID', cell: (job) => job.job_id },
  { header: 'STATE', cell: (job) => job.state },
  { header: 'POOL', cell: (job) => job.pool },
  { header: 'SCHEDULE', cell: (job) => scheduleText(job.schedule) },
  { header: 'NEXT_FIRE', cell: (job) => shortTime(job.next_fire_at) },
  { header: 'KEY', cell: (job) => job.key ?? dash },
];

export const runColumns: readonly Column<Run>[] = [
  { header: 'RUN_ID', cell: (run) => run.run_id },
  { header: 'JOB_ID', cell: (run) => run.job_id },
  { header: 'STATUS', cell: (run) => run.status },
  { header: 'ATTEMPT', cell: (run) => String(run.attempt) },
  { header: 'SCHEDULED', cell: (run) => shortTime(run.scheduled_at) },
  { header: 'FINISHED', cell: (run) => shortTime(run.finished_at) },
  { header: 'ERROR', cell: (run) => run.last_error ?? '' },
];

export const deadRunColumns: readonly Column<Run>[] = [
  { header: 'RUN_ID', cell: (run) => run.run_id },
  { header: 'JOB_ID', cell: (run) => run.job_id },
  { header: 'POOL', cell: (run) => run.pool },
  { header: 'ATTEMPTS', cell: (run) => String(run.attempt) },
  { header: 'DIED', cell: (run) => shortTime(run.finished_at) },
  { header: 'LAST_ERROR', cell: (run) => run.last_error ?? '' },
];

export const silentJobColumns: readonly Column<SilentJob>[] = [
  { header: 'JOB_ID', cell: (item) => item.job.job_id },
  { header: 'POOL', cell: (item) => item.job.pool },
  { header: 'SCHEDULE', cell: (item) => scheduleText(item.job.schedule) },
  { header: 'MAX_SILENCE_S', cell: (item) => String(item.job.max_silence_s ?? dash) },
  { header: 'LAST_SUCCESS', cell: (item) => (item.last_success_at === null ? 'never' : shortTime(item.last_success_at)) },
  { header: 'SILENT_SINCE', cell: (item) => shortTime(item.silent_since) },
];
