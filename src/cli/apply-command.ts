/**
 * `tickler apply -f FILE` (or `-f -` for stdin): makes the server's jobs what a jobs file
 * says (src/migrate/jobs-file.ts), one `PUT /v1/jobs/by-key/{key}` per job, so applying the
 * same file twice changes nothing. `--prune --selector label=value` cancels the selected jobs
 * whose key the file does not name. `--dry-run` writes nothing and prints what would change:
 * each field changed, each changed cron job's next fires in local and UTC time, and a warning
 * for fixed times a DST change skips or repeats. One line per job on stdout; a job the server
 * refuses is reported on stderr and the others still apply (exit 1 at the end).
 */
import { readFileSync } from 'node:fs';
import { stringify as stableStringify } from 'safe-stable-stringify';
import type { TicklerClient } from '../worker/client.js';
import type { Job, JobCreateRequest } from '../worker/wire.js';
import { TicklerApiError } from '../worker/errors.js';
import { parseJobsFile, JobsFileError, type KeyedSpec } from '../migrate/jobs-file.js';
import { dstWarnings } from '../migrate/dst-warnings.js';
import { CliUsageError } from './serve-options.js';
import { cliApplyPreviewCount, cliApplyUpsertConcurrencyCount } from '../limits.js';

export interface ApplyFlags {
  file: string;
  prune?: boolean;
  selector?: string;
  dryRun?: boolean;
  team?: string;
}

export interface ApplyReport {
  created: string[];
  changed: string[];
  unchanged: string[];
  cancelled: string[];
  failed: { key: string; message: string }[];
}

/** The fields of a job that its spec sets (docs/API.md's create body), for the diff. */
const specFields = ['schedule', 'pool', 'payload', 'lane', 'tolerance_s', 'retry', 'overlap', 'catch_up', 'catch_up_window_s',
  'dst', 'idempotency', 'lease_s', 'max_silence_s', 'resources', 'labels', 'state'] as const;

export function readJobsFileText(file: string): string {
  try {
    return readFileSync(file === '-' ? 0 : file, 'utf8');
  } catch (error) {
    throw new CliUsageError(`cannot read ${file}: ${(error as Error).message}`);
  }
}

export async function runApply(client: TicklerClient, flags: ApplyFlags, out: (line: string) => void,
  err: (line: string) => void): Promise<ApplyReport> {
  if (flags.prune === true && flags.selector === undefined) {
    throw new CliUsageError('--prune cancels jobs the file does not name: give --selector label=value to say which jobs the file owns');
  }
  if (flags.selector !== undefined && !/^[^=]+=.*$/.test(flags.selector)) throw new CliUsageError('--selector is label=value');
  let specs: KeyedSpec[];
  try {
    specs = parseJobsFile(readJobsFileText(flags.file), flags.file === '-' ? 'stdin' : flags.file);
  } catch (error) {
    if (error instanceof JobsFileError) throw new CliUsageError(error.message);
    throw error;
  }
  const report: ApplyReport = { created: [], changed: [], unchanged: [], cancelled: [], failed: [] };
  const dryRun = flags.dryRun === true;
  const upsert = { dryRun, ...(flags.team === undefined ? {} : { team: flags.team }) };
  let next = 0;
  const lines: string[][] = specs.map(() => []);
  const worker = async (): Promise<void> => {
    while (next < specs.length) {
      const index = next++;
      const spec = specs[index]!;
      try {
        const before = dryRun ? await existingJob(client, spec.key, flags.team) : undefined;
        const answer = await client.upsertJob(spec.key, spec as unknown as JobCreateRequest, upsert);
        const verb = answer.created ? 'created' : answer.changed ? 'changed' : 'unchanged';
        report[verb].push(spec.key);
        lines[index]!.push(`${dryRun && verb !== 'unchanged' ? `would be ${verb}` : verb} ${spec.key}`);
        if (dryRun && answer.changed) lines[index]!.push(...await dryRunDetail(client, before, answer.job));
      } catch (error) {
        if (!(error instanceof TicklerApiError)) throw error;
        const field = error.field === undefined ? '' : ` (field ${error.field})`;
        report.failed.push({ key: spec.key, message: `${error.status} ${error.code}: ${error.message}${field}` });
        lines[index]!.push(`failed ${spec.key}`);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(cliApplyUpsertConcurrencyCount, specs.length) }, worker));
  for (const group of lines) for (const line of group) out(line);
  for (const failure of report.failed) err(`tickler: ${failure.key}: ${failure.message}`);
  if (flags.prune === true) await prune(client, flags, new Set(specs.map((spec) => spec.key)), report, out);
  out(`${dryRun ? 'dry run: ' : ''}${report.created.length} created, ${report.changed.length} changed, ` +
    `${report.unchanged.length} unchanged, ${report.cancelled.length} cancelled, ${report.failed.length} failed`);
  return report;
}

async function existingJob(client: TicklerClient, key: string, team: string | undefined): Promise<Job | undefined> {
  const page = await client.listJobs({ key, ...(team === undefined ? {} : { team }) });
  return page.items[0];
}

/** Changed fields (old → new), then a cron job's next fires and its DST warnings. */
async function dryRunDetail(client: TicklerClient, before: Job | undefined, after: Job): Promise<string[]> {
  const lines: string[] = [];
  if (before !== undefined) {
    for (const field of specFields) {
      const old = stableStringify(before[field]);
      const now = stableStringify(after[field]);
      if (old !== now) lines.push(`    ${field}: ${old} -> ${now}`);
    }
  }
  const schedule = after.schedule;
  if (after.state === 'active' && 'cron' in schedule && typeof schedule.cron === 'string') {
    const tz = schedule.tz ?? 'UTC';
    const preview = await client.previewSchedule({ cron: schedule.cron, tz, count: cliApplyPreviewCount, gap: after.dst.gap, repeat: after.dst.repeat });
    for (const item of preview.items) lines.push(`    next: ${item.local} (${tz}) = ${item.scheduled_at}`);
    for (const warning of dstWarnings(schedule.cron, tz, Date.now())) {
      lines.push(`    WARNING: ${warning.times.join(', ')} ${tz} falls into the DST ${warning.kind} at ${warning.at}: ` +
        (warning.kind === 'gap' ? `runs as dst.gap "${after.dst.gap}" says` : `runs as dst.repeat "${after.dst.repeat}" says`));
    }
  }
  return lines;
}

/** Cancels (or with --dry-run names) the selected jobs the file does not name. */
async function prune(client: TicklerClient, flags: ApplyFlags, keep: ReadonlySet<string>, report: ApplyReport,
  out: (line: string) => void): Promise<void> {
  const doomed: Job[] = [];
  let cursor: string | undefined;
  do {
    const page = await client.listJobs({ label: flags.selector, limit: 1_000,
      ...(cursor === undefined ? {} : { cursor }), ...(flags.team === undefined ? {} : { team: flags.team }) });
    for (const job of page.items) {
      if (job.state !== 'cancelled' && job.state !== 'done' && (job.key === null || !keep.has(job.key))) doomed.push(job);
    }
    cursor = page.next_cursor ?? undefined;
  } while (cursor !== undefined);
  for (let start = 0; start < doomed.length; start += 1_000) {
    const slice = doomed.slice(start, start + 1_000);
    if (flags.dryRun !== true) await client.cancelJobsBriefly(slice.map((job) => job.job_id));
    for (const job of slice) {
      report.cancelled.push(job.key ?? job.job_id);
      out(`${flags.dryRun === true ? 'would be cancelled' : 'cancelled'} ${job.key ?? job.job_id}`);
    }
  }
}
