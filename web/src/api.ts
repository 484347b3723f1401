/**
 * The UI's one data source: the HTTP API, called with the key typed at sign-in (kept in
 * sessionStorage, so for this tab only) as the bearer. An admin's chosen team goes along as
 * `?team=` on every call that takes it.
 */
export interface Job {
  job_id: string;
  team: string;
  key: string | null;
  schedule: { cron: string; tz: string } | { at: string };
  pool: string;
  lane: string;
  state: string;
  tolerance_s: number;
  retry: { max_attempts: number; base_s: number; max_s: number };
  dst: { gap: string; repeat: string };
  max_silence_s: number | null;
  labels: Record<string, string>;
  next_fire_at: string | null;
  next_scheduled_at: string | null;
  created_at: string;
  updated_at: string;
  [field: string]: unknown;
}

export interface Run {
  run_id: string;
  job_id: string;
  team: string;
  pool: string;
  lane: string;
  scheduled_at: string;
  fire_at: string;
  dispatched_at: string | null;
  attempt: number;
  status: string;
  started_at: string | null;
  finished_at: string | null;
  last_error: string | null;
  result: unknown;
  ready_at: string | null;
  lease_expires_at: string | null;
  worker_id: string | null;
  events?: RunEvent[];
}

export interface RunEvent {
  sequence: number;
  at: string;
  type: string;
  from_status: string | null;
  to_status: string | null;
  detail: Record<string, unknown> | null;
}

export interface Page<T> {
  items: T[];
  next_cursor: string | null;
}

export interface Occurrence {
  scheduled_at: string;
  status: string;
  expected: boolean;
  late: boolean;
  run_id: string | null;
  fire_at: string | null;
  dispatched_at: string | null;
  fire_lag_s: number | null;
  attempt: number | null;
  finished_at: string | null;
  last_error: string | null;
}

export interface OccurrenceRow {
  job: Job | null;
  pool: string;
  total: number;
  missed: number;
  failed: number;
  late: number;
  counts: Record<string, number>;
  truncated: boolean;
  occurrences: Occurrence[];
}

export interface OccurrenceWindow {
  since: string;
  until: string;
  now: string;
  truncated: boolean;
  items: OccurrenceRow[];
}

export interface SilentJob {
  job: Job;
  last_success_at: string | null;
  silent_since: string;
}

export interface Overview {
  now: string;
  fire_lag: { count: number; p50_s: number | null; p99_s: number | null; capped: boolean;
    per_minute: { minute: string; count: number; p50_s: number; p99_s: number }[] };
  due_ahead: { capped: boolean; per_minute: { minute: string; count: number }[] };
  backlog: { capped: boolean; items: { pool: string; ready: number; running: number; retry_wait: number }[] };
  failing: { dead_last_day: number; retry_wait: number; capped: boolean; latest: Run[] };
  silent: SilentJob[];
  stale_tokens: { heartbeat: number; complete: number; dispatch: number };
}

export interface Who {
  team: string;
  admin: boolean;
  open: boolean;
}

export class ApiError extends Error {
  constructor(readonly status: number, readonly code: string, message: string, readonly retryAfterS: number | null = null) {
    super(message);
  }
}

const keyItem = 'tickler.key';
const teamItem = 'tickler.team';

export const session = {
  key: (): string | null => sessionStorage.getItem(keyItem),
  setKey(key: string | null): void {
    if (key === null) sessionStorage.removeItem(keyItem);
    else sessionStorage.setItem(keyItem, key);
  },
  team: (): string | null => sessionStorage.getItem(teamItem),
  setTeam(team: string | null): void {
    if (team === null) sessionStorage.removeItem(teamItem);
    else sessionStorage.setItem(teamItem, team);
  },
};

type Query = Record<string, string | number | undefined | null>;

/** Routes that take no `?team=`. */
const teamless = new Set(['/v1/whoami', '/v1/teams', '/v1/schedules/preview']);

export async function api<T>(method: string, path: string, options: { query?: Query; body?: unknown } = {}): Promise<T> {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(options.query ?? {})) {
    if (value !== undefined && value !== null && value !== '') params.set(name, String(value));
  }
  const team = session.team();
  if (team !== null && !teamless.has(path) && !params.has('team')) params.set('team', team);
  const headers: Record<string, string> = {};
  const key = session.key();
  if (key !== null) headers['authorization'] = `Bearer ${key}`;
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  const search = params.toString();
  const response = await fetch(`${path}${search === '' ? '' : `?${search}`}`, {
    method, headers, ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
  });
  const text = await response.text();
  const json: unknown = text === '' ? null : JSON.parse(text);
  if (!response.ok) {
    const error = (json as { error?: { code?: string; message?: string } } | null)?.error;
    const retryAfter = response.headers.get('retry-after');
    throw new ApiError(response.status, error?.code ?? 'error', error?.message ?? response.statusText,
      retryAfter === null ? null : Number(retryAfter));
  }
  return json as T;
}

/** Jobs by id, remembered for the tab: runs name their job by id, people by key. */
const jobs = new Map<string, Promise<Job | null>>();

export function jobById(jobId: string): Promise<Job | null> {
  let job = jobs.get(jobId);
  if (job === undefined) {
    job = api<Job>('GET', `/v1/jobs/${encodeURIComponent(jobId)}`).catch(() => null);
    jobs.set(jobId, job);
  }
  return job;
}

export function forgetJobs(): void {
  jobs.clear();
}
