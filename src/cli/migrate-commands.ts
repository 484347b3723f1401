/**
 * The migration commands (docs/migration.md): `import crontab`, `import cronjob` (print a jobs
 * file for review), `apply` (apply-command.ts) and `verify` (the ledger against the schedules,
 * and against the old host's cron log).
 */
import { hostname } from 'node:os';
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import type { TicklerClient } from '../worker/client.js';
import type { Job, Run } from '../worker/wire.js';
import { TicklerError } from '../errors.js';
import { importCrontab, type ImportResult } from '../migrate/crontab.js';
import { importCronJobs } from '../migrate/cronjob.js';
import { renderJobsFile } from '../migrate/jobs-file.js';
import { compareCronLog, compareJob, parseCronLog, type Finding } from '../migrate/verify.js';
import { isValidTimeZone, offsetAtMs } from '../domain/schedule/time-zone.js';
import { readJobsFileText, runApply, type ApplyFlags } from './apply-command.js';
import { CliUsageError } from './serve-options.js';

const out = (line: string): void => {
  process.stdout.write(`${line}\n`);
};
const err = (line: string): void => {
  process.stderr.write(`${line}\n`);
};

function localZone(): string {
  return Intl.DateTimeFormat().resolvedOptions().timeZone;
}

function zoneFlag(tz: string | undefined, fallback: string): string {
  const zone = tz ?? fallback;
  if (!isValidTimeZone(zone)) throw new CliUsageError(`--tz ${JSON.stringify(zone)} is not an IANA time zone`);
  return zone;
}

/** The jobs file on stdout, each refusal and note on stderr; exit 0 even with refusals (they are for review). */
function printImport(title: string, result: ImportResult): void {
  process.stdout.write(renderJobsFile(title, result.jobs, result.refused, result.notes));
  for (const problem of result.refused) err(`tickler: line ${problem.line}: refused: ${problem.reason}`);
  for (const note of result.notes) err(`tickler: line ${note.line}: note: ${note.reason}`);
}

function instantOf(text: string, flag: string): number {
  const ms = Date.parse(text);
  if (!/^\d{4}-\d{2}-\d{2}T/.test(text) || !Number.isFinite(ms)) throw new CliUsageError(`${flag} must be an RFC 3339 time, got ${text}`);
  return ms;
}

/** A wall time in `tz` (as epoch ms of the same digits in UTC) to the instant it names. */
function wallToInstant(wallMs: number, tz: string): number {
  const guess = wallMs - offsetAtMs(tz, wallMs);
  return wallMs - offsetAtMs(tz, guess);
}

async function allPages<T>(fetch: (cursor: string | undefined) => Promise<{ items: T[]; next_cursor: string | null }>): Promise<T[]> {
  const items: T[] = [];
  let cursor: string | undefined;
  do {
    const page = await fetch(cursor);
    items.push(...page.items);
    cursor = page.next_cursor ?? undefined;
  } while (cursor !== undefined);
  return items;
}

export interface VerifyFlags {
  since: string;
  until: string;
  selector?: string;
  cronLog?: string;
  logTz?: string;
  team?: string;
}

export async function runVerify(client: TicklerClient, flags: VerifyFlags): Promise<Finding[]> {
  const sinceMs = instantOf(flags.since, '--since');
  const untilMs = instantOf(flags.until, '--until');
  if (untilMs <= sinceMs) throw new CliUsageError('--until must be after --since');
  const team = flags.team === undefined ? {} : { team: flags.team };
  const jobs = await allPages<Job>((cursor) => client.listJobs({ limit: 1_000, ...team,
    ...(flags.selector === undefined ? {} : { label: flags.selector }), ...(cursor === undefined ? {} : { cursor }) }));
  const recurring = jobs.filter((job) => 'cron' in job.schedule);
  const withRuns: { job: Job; runs: Run[] }[] = [];
  for (const job of recurring) {
    const runs = await allPages<Run>((cursor) => client.listJobRuns(job.job_id, {
      since: flags.since, until: flags.until, limit: 1_000, ...team, ...(cursor === undefined ? {} : { cursor }) }));
    withRuns.push({ job, runs });
  }
  const findings = withRuns.flatMap(({ job, runs }) => compareJob(job, runs, sinceMs, untilMs));
  if (flags.cronLog !== undefined) {
    const text = readFileSync(flags.cronLog, 'utf8');
    findings.push(...compareCronLog(parseCronLog(text, zoneFlag(flags.logTz, localZone()), sinceMs, wallToInstant), withRuns, sinceMs, untilMs));
  }
  return findings;
}

export function addMigrateCommands(program: Command, clientOf: () => TicklerClient): void {
  const importing = program.command('import').description('turn crontabs and CronJobs into a jobs file for review (stdout)');
  importing.command('crontab <file>').description('a user crontab (--user U) or a system crontab (--system); - reads stdin')
    .option('--user <user>', 'whose crontab it is (crontab -l): five time fields, then the command')
    .option('--system', '/etc/crontab or /etc/cron.d: a user field after the time fields')
    .option('--tz <zone>', 'the cron daemon\'s time zone (default: this machine\'s)')
    .option('--pool <pool>', 'worker pool of the jobs (default cron)')
    .option('--host <host>', 'the host the crontab comes from, for keys and labels (default: this machine\'s name)')
    .action((file: string, flags: { user?: string; system?: boolean; tz?: string; pool?: string; host?: string }) => {
      if ((flags.user === undefined) === (flags.system !== true)) {
        throw new CliUsageError('say whose crontab it is: --user U for a user\'s crontab (crontab -l), or --system for /etc/crontab and /etc/cron.d');
      }
      const host = flags.host ?? hostname();
      const result = withUsage(() => importCrontab(readJobsFileText(file), {
        host, user: flags.user ?? null, tz: zoneFlag(flags.tz, localZone()), pool: flags.pool ?? 'cron', file,
      }));
      printImport(`tickler import crontab ${file} (host ${host}${flags.user === undefined ? ', system crontab' : `, user ${flags.user}`})`, result);
    });
  importing.command('cronjob <file>').description('Kubernetes CronJob manifests (YAML, several documents or a List); - reads stdin')
    .option('--tz <zone>', 'time zone of CronJobs without spec.timeZone (default UTC, as kube-controller-manager)')
    .option('--pool <pool>', 'worker pool of the jobs (default cron)')
    .action((file: string, flags: { tz?: string; pool?: string }) => {
      const result = importCronJobs(readJobsFileText(file), { tz: zoneFlag(flags.tz, 'UTC'), pool: flags.pool ?? 'cron', file });
      printImport(`tickler import cronjob ${file}`, result);
    });

  program.command('apply').description('create and update jobs by key from a jobs file (YAML or JSON)')
    .requiredOption('-f, --file <file>', 'the jobs file; - reads stdin')
    .option('--prune', 'cancel the jobs --selector picks that the file does not name')
    .option('--selector <label=value>', 'the jobs the file owns (for --prune)')
    .option('--dry-run', 'change nothing; print the diff, next fires and DST warnings')
    .option('--team <team>', 'admin only')
    .action(async (flags: ApplyFlags) => {
      const report = await runApply(clientOf(), flags, out, err);
      if (report.failed.length > 0) process.exitCode = 1;
    });

  program.command('verify').description('the run ledger against what the schedules call for (and an old cron log)')
    .requiredOption('--since <time>', 'window start, RFC 3339').requiredOption('--until <time>', 'window end, RFC 3339')
    .option('--selector <label=value>', 'only these jobs')
    .option('--cron-log <file>', 'the old host\'s cron syslog (Debian CRON or RHEL CROND lines): what it ran that tickler did not')
    .option('--log-tz <zone>', 'time zone of the log\'s stamps (default: this machine\'s)')
    .option('--team <team>', 'admin only')
    .action(async (flags: VerifyFlags) => {
      const findings = await runVerify(clientOf(), flags);
      for (const finding of findings) out(`${finding.kind} ${finding.key} ${finding.at} ${finding.detail}`);
      const count = (kind: Finding['kind']): number => findings.filter((finding) => finding.kind === kind).length;
      out(`${count('missing')} missing, ${count('late')} late, ${count('extra')} extra, ${count('pending')} pending, ` +
        `${count('cron_only')} run by old cron only`);
      if (findings.some((finding) => finding.kind !== 'pending')) process.exitCode = 1;
    });
}

function withUsage<T>(compute: () => T): T {
  try {
    return compute();
  } catch (error) {
    if (error instanceof TicklerError) throw new CliUsageError(error.message);
    throw error;
  }
}
