/** The overview: fire lag, the herd calendar ahead, backlog per pool, failing runs, silent jobs, stale tokens. */
import { useMemo } from 'preact/hooks';
import { api, jobById, type Overview } from './api';
import { ago, lag, utc } from './format';
import { Chart, Loading, Status, useLoad } from './components';

export function OverviewPage({ nowMs }: { nowMs: number }) {
  const [overview, error] = useLoad(() => api<Overview>('GET', '/v1/overview'), [nowMs]);
  const [keys] = useLoad(async () => {
    const ids = [...new Set((overview?.failing.latest ?? []).map((run) => run.job_id))];
    const entries = await Promise.all(ids.map(async (id) => [id, (await jobById(id))?.key ?? id] as const));
    return new Map(entries);
  }, [overview]);
  const lagData = useMemo(() => {
    const minutes = overview?.fire_lag.per_minute ?? [];
    return [minutes.map((m) => Date.parse(m.minute) / 1000), minutes.map((m) => m.p50_s), minutes.map((m) => m.p99_s)];
  }, [overview]);
  const dueData = useMemo(() => {
    const minutes = overview?.due_ahead.per_minute ?? [];
    return [minutes.map((m) => Date.parse(m.minute) / 1000), minutes.map((m) => m.count)];
  }, [overview]);
  const lagSeries = useMemo(() => [{ label: 'p50', stroke: '#3867d6' }, { label: 'p99', stroke: '#eb3b5a' }], []);
  const dueSeries = useMemo(() => [{ label: 'due', stroke: '#20bf6b', fill: '#20bf6b88' }], []);
  const backlogMax = Math.max(1, ...(overview?.backlog.items ?? []).map((pool) => pool.ready + pool.running + pool.retry_wait));
  return (
    <Loading error={error}>
      {overview !== null && (
        <section>
          <h1>Overview</h1>
          <div class="tiles">
            <div class="tile"><div class="label">Fire lag p50, last hour</div><div class="value">{overview.fire_lag.p50_s === null ? '—' : lag(overview.fire_lag.p50_s)}</div></div>
            <div class="tile"><div class="label">Fire lag p99, last hour</div><div class="value">{overview.fire_lag.p99_s === null ? '—' : lag(overview.fire_lag.p99_s)}</div>
              <div class="muted">{overview.fire_lag.count} occurrences{overview.fire_lag.capped ? ' (the latest read)' : ''}</div></div>
            <div class={`tile${overview.failing.dead_last_day > 0 ? ' bad' : ''}`}><div class="label">Dead, last 24 h</div><div class="value">{overview.failing.dead_last_day}{overview.failing.capped ? '+' : ''}</div>
              <div class="muted">{overview.failing.retry_wait} waiting to retry</div></div>
            <div class={`tile${overview.silent.length > 0 ? ' bad' : ''}`}><div class="label">Silent jobs</div><div class="value">{overview.silent.length}</div></div>
            <div class={`tile${overview.stale_tokens.heartbeat + overview.stale_tokens.complete + overview.stale_tokens.dispatch > 0 ? ' warn' : ''}`}>
              <div class="label">Stale-token rejections</div>
              <div class="value">{overview.stale_tokens.heartbeat + overview.stale_tokens.complete + overview.stale_tokens.dispatch}</div>
              <div class="muted">{overview.stale_tokens.heartbeat} heartbeat · {overview.stale_tokens.complete} complete · {overview.stale_tokens.dispatch} dispatch (this node, since start)</div></div>
          </div>
          <div class="grid2">
            <div class="card"><h2>Fire lag per minute, last hour</h2>
              {lagData[0]!.length > 0 ? <Chart data={lagData} series={lagSeries} yLabel="seconds" /> : <p class="muted">Nothing fired in the last hour.</p>}</div>
            <div class="card"><h2>Due per minute, next hour</h2>
              <Chart data={dueData} series={dueSeries} bars yLabel="occurrences" />
              {overview.due_ahead.capped && <p class="muted">From the first jobs read only.</p>}</div>
          </div>
          <div class="grid2">
            <div class="card"><h2>Backlog per pool</h2>
              {overview.backlog.items.length === 0 ? <p class="muted">No run is waiting.</p> : (
                <table class="compact backlog"><thead><tr><th>Pool</th><th>Ready</th><th>Running</th><th>Retry wait</th><th /></tr></thead><tbody>
                  {overview.backlog.items.map((pool) => (
                    <tr key={pool.pool}><td>{pool.pool}</td><td>{pool.ready}</td><td>{pool.running}</td><td>{pool.retry_wait}</td>
                      <td class="bar"><span class="ready" style={{ width: `${(pool.ready / backlogMax) * 100}%` }} />
                        <span class="running" style={{ width: `${(pool.running / backlogMax) * 100}%` }} />
                        <span class="retry" style={{ width: `${(pool.retry_wait / backlogMax) * 100}%` }} /></td></tr>
                  ))}
                </tbody></table>
              )}</div>
            <div class="card"><h2>Failing runs</h2>
              {overview.failing.latest.length === 0 ? <p class="muted">No run died in the last 24 hours.</p> : (
                <table class="compact"><tbody>
                  {overview.failing.latest.map((run) => (
                    <tr key={run.run_id}><td><Status status={run.status} /></td>
                      <td><a href={`#/runs/${encodeURIComponent(run.run_id)}`}>{keys?.get(run.job_id) ?? run.job_id}</a><div class="muted">{utc(run.scheduled_at)}</div></td>
                      <td class="error-text">{run.last_error}</td></tr>
                  ))}
                </tbody></table>
              )}</div>
          </div>
          <div class="card"><h2>Silent jobs</h2>
            {overview.silent.length === 0 ? <p class="muted">No job is past its max_silence_s.</p> : (
              <table class="compact"><thead><tr><th>Job</th><th>Pool</th><th>Last success</th><th>Silent since</th></tr></thead><tbody>
                {overview.silent.map((item) => (
                  <tr key={item.job.job_id}><td><a href={`#/jobs/${encodeURIComponent(item.job.job_id)}`}>{item.job.key ?? item.job.job_id}</a></td>
                    <td>{item.job.pool}</td><td>{item.last_success_at === null ? 'never' : ago(item.last_success_at, nowMs)}</td>
                    <td>{ago(item.silent_since, nowMs)}</td></tr>
                ))}
              </tbody></table>
            )}</div>
        </section>
      )}
    </Loading>
  );
}
