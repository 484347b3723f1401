/**
 * A jobs file (`tickler apply -f FILE`): YAML or JSON, either a list of job specs or
 * `{"jobs": [...]}`. Each spec is docs/API.md's create body with `key` required, and may say
 * `paused: true|false`. The server checks each spec (`PUT /v1/jobs/by-key/{key}`); this only
 * checks the shape that makes it a list of keyed specs.
 */
import { parse, stringify } from 'yaml';
import type { ImportProblem, JobFileSpec } from './crontab.js';

export class JobsFileError extends Error {}

export interface KeyedSpec {
  key: string;
  [field: string]: unknown;
}

export function parseJobsFile(text: string, name: string): KeyedSpec[] {
  let document: unknown;
  try {
    document = parse(text);
  } catch (error) {
    throw new JobsFileError(`${name} is neither YAML nor JSON: ${(error as Error).message}`);
  }
  const list = document !== null && typeof document === 'object' && !Array.isArray(document) && 'jobs' in document
    ? (document as { jobs: unknown }).jobs
    : document ?? [];
  if (!Array.isArray(list)) throw new JobsFileError(`${name} must be a list of job specs, or {"jobs": [...]}`);
  const seen = new Set<string>();
  return list.map((item: unknown, index) => {
    if (item === null || typeof item !== 'object' || Array.isArray(item)) {
      throw new JobsFileError(`${name}: job ${index + 1} is not an object`);
    }
    const key = (item as { key?: unknown }).key;
    if (typeof key !== 'string' || key === '') throw new JobsFileError(`${name}: job ${index + 1} has no "key" (a jobs file names every job by key)`);
    if (seen.has(key)) throw new JobsFileError(`${name}: key ${JSON.stringify(key)} appears twice`);
    seen.add(key);
    return item as KeyedSpec;
  });
}

/** An import's jobs as a YAML jobs file, its refusals and notes as comments at the top. */
export function renderJobsFile(title: string, jobs: readonly JobFileSpec[], refused: readonly ImportProblem[],
  notes: readonly ImportProblem[]): string {
  const comment = (text: string): string => `# ${text.replace(/\r?\n/g, ' ')}\n`;
  let header = comment(title);
  header += comment(`${jobs.length} job(s); review, then: tickler apply -f FILE`);
  for (const problem of refused) header += comment(`REFUSED line ${problem.line}: ${problem.text.trim()} -- ${problem.reason}`);
  for (const note of notes) header += comment(`NOTE line ${note.line}: ${note.reason}`);
  return `${header}${stringify({ jobs }, { lineWidth: 0 })}`;
}
