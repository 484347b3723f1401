/**
 * Kubernetes CronJob manifests (one or several YAML documents, or a `List`) turned into
 * tickler job specs: `schedule` and `timeZone` (default `--tz`, the controller manager's
 * zone, UTC unless set otherwise), `concurrencyPolicy` → `overlap` (Allow → allow, Forbid →
 * forbid, Replace → replace), `startingDeadlineSeconds` → `catch_up_window_s`, `suspend` →
 * `paused`. The first container's `command` and `args` become the command (shell-quoted),
 * its literal `env` values the environment, `workingDir` the working directory, and the Job's
 * `activeDeadlineSeconds` the timeout. The command runs on the worker's host, not in the
 * container's image: the image is kept in the job's `source` for review.
 */
import { parseAllDocuments } from 'yaml';
import { parseCron } from '../domain/schedule/cron-expression.js';
import { isValidTimeZone } from '../domain/schedule/time-zone.js';
import type { ExecPayload, ImportProblem, ImportResult, JobFileSpec } from './crontab.js';

export interface CronJobOptions {
  tz: string;
  pool: string;
  file: string;
}

type Json = Record<string, unknown>;

function objectAt(value: unknown, ...path: string[]): Json | undefined {
  let current: unknown = value;
  for (const step of path) {
    if (current === null || typeof current !== 'object' || Array.isArray(current)) return undefined;
    current = (current as Json)[step];
  }
  return current !== null && typeof current === 'object' && !Array.isArray(current) ? current as Json : undefined;
}

/** POSIX shell quoting: plain words stay, anything else in single quotes. */
export function shellQuote(word: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

const overlapOf: Record<string, JobFileSpec['overlap']> = { Allow: 'allow', Forbid: 'forbid', Replace: 'replace' };

export function importCronJobs(text: string, options: CronJobOptions): ImportResult {
  const jobs: JobFileSpec[] = [];
  const refused: ImportProblem[] = [];
  const notes: ImportProblem[] = [];
  const documents = parseAllDocuments(text);
  const list = Array.isArray(documents) ? documents : [documents];
  const manifests: { manifest: unknown; line: number }[] = [];
  for (const document of list) {
    if (document.errors.length > 0) {
      refused.push({ line: document.errors[0]!.linePos?.[0]?.line ?? 0, text: '', reason: `not YAML: ${document.errors[0]!.message}` });
      continue;
    }
    const line = document.contents === null ? 1 : (document.contents.range?.[0] ?? 0);
    const manifest: unknown = document.toJS();
    const items = objectAt(manifest)?.['kind'] === 'List' ? (objectAt(manifest)?.['items'] as unknown[] | undefined) ?? [] : [manifest];
    for (const item of items) if (item !== null && item !== undefined) manifests.push({ manifest: item, line: lineOf(text, line) });
  }
  for (const { manifest, line } of manifests) {
    const kind = objectAt(manifest)?.['kind'];
    const name = String(objectAt(manifest, 'metadata')?.['name'] ?? '');
    const namespace = String(objectAt(manifest, 'metadata')?.['namespace'] ?? 'default');
    const refuse = (reason: string): void => {
      refused.push({ line, text: `${String(kind)} ${namespace}/${name}`, reason });
    };
    if (kind !== 'CronJob') {
      refuse(`kind ${String(kind)}: only CronJob manifests are imported`);
      continue;
    }
    if (name === '') {
      refuse('a CronJob without metadata.name');
      continue;
    }
    const spec = objectAt(manifest, 'spec') ?? {};
    const schedule = spec['schedule'];
    if (typeof schedule !== 'string' || schedule.trim() === '') {
      refuse('no spec.schedule');
      continue;
    }
    if (/^\s*(CRON_)?TZ=/.test(schedule)) {
      refuse('a time zone inside spec.schedule is not supported by Kubernetes either: use spec.timeZone');
      continue;
    }
    try {
      parseCron(schedule.trim());
    } catch (error) {
      refuse(`${schedule}: ${(error as Error).message}`);
      continue;
    }
    const tz = typeof spec['timeZone'] === 'string' ? spec['timeZone'] : options.tz;
    if (!isValidTimeZone(tz)) {
      refuse(`timeZone ${tz} is not an IANA time zone`);
      continue;
    }
    const jobSpec = objectAt(spec, 'jobTemplate', 'spec') ?? {};
    const podSpec = objectAt(jobSpec, 'template', 'spec') ?? {};
    const containers = Array.isArray(podSpec['containers']) ? podSpec['containers'] as Json[] : [];
    const container = containers[0];
    if (container === undefined) {
      refuse('no container in spec.jobTemplate.spec.template.spec.containers');
      continue;
    }
    const words = [container['command'], container['args']].flatMap((part) => (Array.isArray(part) ? part.map(String) : []));
    if (words.length === 0) {
      refuse(`container ${String(container['name'])} has no command or args: its image's entrypoint cannot run outside the image`);
      continue;
    }
    if (containers.length > 1) {
      notes.push({ line, text: `CronJob ${namespace}/${name}`, reason: `only the first of ${containers.length} containers is imported` });
    }
    const exec: ExecPayload['exec'] = { command: words.map(shellQuote).join(' ') };
    const env: Record<string, string> = {};
    for (const variable of Array.isArray(container['env']) ? container['env'] as Json[] : []) {
      if (typeof variable['value'] === 'string') env[String(variable['name'])] = variable['value'];
      else {
        notes.push({ line, text: `CronJob ${namespace}/${name}`,
          reason: `env ${String(variable['name'])} comes from valueFrom (a secret or field): set it on the worker host` });
      }
    }
    if (Object.keys(env).length > 0) exec.env = env;
    if (typeof container['workingDir'] === 'string') exec.cwd = container['workingDir'];
    if (typeof jobSpec['activeDeadlineSeconds'] === 'number') exec.timeout_s = jobSpec['activeDeadlineSeconds'];
    const job: JobFileSpec = {
      key: `cronjob:${namespace}:${name}`,
      schedule: { cron: schedule.trim(), tz },
      pool: options.pool,
      payload: { exec, source: { kind: 'CronJob', namespace, name, image: String(container['image'] ?? ''), file: options.file } },
      overlap: overlapOf[String(spec['concurrencyPolicy'] ?? 'Allow')] ?? 'allow',
      labels: { source: 'cronjob', namespace },
    };
    if (typeof spec['startingDeadlineSeconds'] === 'number') job.catch_up_window_s = spec['startingDeadlineSeconds'];
    if (typeof spec['suspend'] === 'boolean') job.paused = spec['suspend'];
    jobs.push(job);
  }
  return { jobs, refused, notes };
}

/** The 1-based line of a character offset. */
function lineOf(text: string, offset: number): number {
  return text.slice(0, offset).split('\n').length;
}
