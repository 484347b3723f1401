/** Jobs, like `kubectl get cronjob` and more: filters, sorting within the page, pages. */
import { useEffect, useMemo, useState } from 'preact/hooks';
import { api, type Job, type Page, type Run, type SilentJob } from './api';
import { ago, local, scheduleInWords, utc } from './format';
import { Loading, Pager, Status, useLoad } from './components';

interface JobLine {
  job: Job;
  lastRun: Run | null;
  lastSuccess: Run | null;
  silent: boolean;
}

type SortKey = 'key' | 'pool' | 'state' | 'next' | 'last';

const pageSize = 25;

async function linesOf(jobs: Job[], silentIds: Set<string>): Promise<JobLine[]> {
  return Promise.all(jobs.map(async (job) => {
    const path = `/v1/jobs/${encodeURIComponent(job.job_id)}/runs`;
    const [last, success] = await Promise.all([
      api<Page<Run>>('GET', path, { query: { limit: 1 } }),
      api<Page<Run>>('GET', path, { query: { limit: 1, status: 'succeeded' } }),
    ]);
    return { job, lastRun: last.items[0] ?? null, lastSuccess: success.items[0] ?? null, silent: silentIds.has(job.job_id) };
  }));
}

function compare(a: JobLine, b: JobLine, key: SortKey): number {
  const text = (line: JobLine): string => {
    switch (key) {
      case 'key': return line.job.key ?? `~${line.job.job_id}`;
      case 'pool': return line.job.pool;
      case 'state': return line.job.state;
      case 'next': return line.job.next_fire_at ?? '~';
      case 'last': return line.lastRun?.scheduled_at ?? '';
    }
  };
  return text(a).localeCompare(text(b));
}

export function JobsPage({ nowMs }: { nowMs: number }) {
  const [keyPrefix, setKeyPrefix] = useState('');
  const [pool, setPool] = useState('');
  const [state, setState] = useState('');
  const [label, setLabel] = useState('');
  const [filters, setFilters] = useState({ keyPrefix: '', pool: '', state: '', label: '' });
  const [cursors, setCursors] = useState<string[]>([]);
  const [sort, setSort] = useState<{ key: SortKey; descending: boolean }>({ key: 'key', descending: false });
  const cursor = cursors.at(-1);
  const [page, error] = useLoad(async () => {
    const [jobs, silent] = await Promise.all([
      api<Page<Job>>('GET', '/v1/jobs', { query: {
        key_prefix: filters.keyPrefix, pool: filters.pool, state: filters.state, label: filters.label, limit: pageSize, cursor,
      } }),
      api<Page<SilentJob>>('GET', '/v1/jobs:silent', { query: { limit: 1000 } }),
    ]);
    const lines = await linesOf(jobs.items, new Set(silent.items.map((item) => item.job.job_id)));
    return { lines, next: jobs.next_cursor };
  }, [filters, cursor]);
  useEffect(() => setCursors([]), [filters]);
  const sorted = useMemo(() => {
    const lines = [...(page?.lines ?? [])].sort((a, b) => compare(a, b, sort.key));
    return sort.descending ? lines.reverse() : lines;
  }, [page, sort]);
  const header = (key: SortKey, title: string) => (
    <th><button class="link" onClick={() => setSort({ key, descending: sort.key === key ? !sort.descending : false })}>
      {title}{sort.key === key ? (sort.descending ? ' ▼' : ' ▲') : ''}
    </button></th>
  );
  return (
    <section>
      <h1>Jobs</h1>
      <form class="filters" onSubmit={(event) => {
        event.preventDefault();
        setFilters({ keyPrefix, pool, state, label });
      }}>
        <label>Key prefix <input name="key_prefix" value={keyPrefix} onInput={(e) => setKeyPrefix(e.currentTarget.value)} /></label>
        <label>Pool <input name="pool" value={pool} onInput={(e) => setPool(e.currentTarget.value)} /></label>
        <label>State <select name="state" value={state} onChange={(e) => setState(e.currentTarget.value)}>
          <option value="">any</option>
          {['active', 'paused', 'cancelled', 'done'].map((s) => <option key={s} value={s}>{s}</option>)}
        </select></label>
        <label>Label <input name="label" placeholder="name=value" value={label} onInput={(e) => setLabel(e.currentTarget.value)} /></label>
        <button class="primary" type="submit">Filter</button>
      </form>
      <Loading error={error}>
        {page !== null && (
          <>
            <p class="muted">Sorting orders the jobs of this page; pages follow the API's order, newest first.</p>
            <div class="scroll">
              <table class="jobs">
                <thead><tr>
                  {header('key', 'Key')}<th>Schedule</th>{header('next', 'Next fire')}{header('pool', 'Pool')}<th>Lane</th>
                  {header('state', 'State')}{header('last', 'Last run')}<th>Last success</th><th>Silent</th>
                </tr></thead>
                <tbody>
                  {sorted.map(({ job, lastRun, lastSuccess, silent }) => (
                    <tr key={job.job_id}>
                      <td><a href={`#/jobs/${encodeURIComponent(job.job_id)}`}>{job.key ?? job.job_id}</a>
                        {Object.keys(job.labels).length > 0 && <div class="labels">{Object.entries(job.labels).map(([k, v]) => `${k}=${v}`).join(' ')}</div>}
                      </td>
                      <td>{scheduleInWords(job.schedule)}</td>
                      <td>{job.next_fire_at === null ? <span class="muted">none</span> : (
                        <>{local(job.next_fire_at)} <span class="muted">local</span><div class="muted">{utc(job.next_fire_at)}</div></>
                      )}</td>
                      <td>{job.pool}</td>
                      <td>{job.lane}</td>
                      <td><Status status={job.state} /></td>
                      <td>{lastRun === null ? <span class="muted">never</span> : (
                        <a href={`#/runs/${encodeURIComponent(lastRun.run_id)}`}><Status status={lastRun.status} /> {ago(lastRun.scheduled_at, nowMs)}</a>
                      )}</td>
                      <td>{lastSuccess === null ? <span class="muted">never</span> : ago(lastSuccess.finished_at ?? lastSuccess.scheduled_at, nowMs)}</td>
                      <td>{silent ? <span class="badge st-dead">silent</span> : ''}</td>
                    </tr>
                  ))}
                  {sorted.length === 0 && <tr><td colSpan={9} class="muted">No job matches.</td></tr>}
                </tbody>
              </table>
            </div>
            <Pager hasPrevious={cursors.length > 0} next={page.next} onFirst={() => setCursors([])}
              onNext={(next) => setCursors([...cursors, next])} />
          </>
        )}
      </Loading>
    </section>
  );
}
