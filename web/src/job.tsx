/** One job: its occurrences over a range (a strip, a fire-lag chart, a table), its spec, and its controls. */
import { useMemo, useState } from 'preact/hooks';
import { api, forgetJobs, type Job, type OccurrenceWindow } from './api';
import { inZone, lag, local, scheduleInWords, utc } from './format';
import { Chart, ConfirmButton, Loading, Status, Strip, useLoad } from './components';
import { RangePicker } from './range-picker';
import { rangeOf, type Range } from './ranges';

interface PreviewItem {
  scheduled_at: string;
  local: string;
}

export function JobPage({ jobId, nowMs }: { jobId: string; nowMs: number }) {
  const [range, setRange] = useState<Range>(() => rangeOf('7d', nowMs));
  const [job, jobError, reloadJob] = useLoad(() => api<Job>('GET', `/v1/jobs/${encodeURIComponent(jobId)}`), [jobId]);
  const [occ, windowError, reloadWindow] = useLoad(() => api<OccurrenceWindow>('GET', '/v1/occurrences', {
    query: { job_id: jobId, since: new Date(range.sinceMs).toISOString(), until: new Date(range.untilMs).toISOString() },
  }), [jobId, range]);
  const [preview] = useLoad(async () => {
    if (job === null || !('cron' in job.schedule)) return [];
    const answer = await api<{ items: PreviewItem[] }>('GET', '/v1/schedules/preview', {
      query: { cron: job.schedule.cron, tz: job.schedule.tz, gap: job.dst.gap, repeat: job.dst.repeat, count: 5 },
    });
    return answer.items;
  }, [job]);
  const act = async (action: 'pause' | 'resume' | 'trigger' | 'cancel') => {
    const path = `/v1/jobs/${encodeURIComponent(jobId)}`;
    if (action === 'cancel') await api('DELETE', path);
    else await api('POST', `${path}/${action}`);
    forgetJobs();
    reloadJob();
    reloadWindow();
  };
  const row = occ?.items[0] ?? null;
  const occurrences = row?.occurrences ?? [];
  const lagData = useMemo(() => {
    const points = occurrences.filter((o) => o.fire_lag_s !== null).sort((a, b) => a.scheduled_at.localeCompare(b.scheduled_at));
    return [points.map((o) => Date.parse(o.scheduled_at) / 1000), points.map((o) => o.fire_lag_s)];
  }, [occ]);
  const tz = job !== null && 'cron' in job.schedule ? job.schedule.tz : 'UTC';
  return (
    <Loading error={jobError}>
      {job !== null && (
        <section>
          <h1>{job.key ?? job.job_id} <Status status={job.state} /></h1>
          <p class="lead">{scheduleInWords(job.schedule)} · pool <b>{job.pool}</b> · lane {job.lane}
            {job.dst.gap === 'skip' ? ' · skips a DST gap' : ''}</p>
          <div class="actions">
            <ConfirmButton label="Pause" question={`Pause ${job.key ?? job.job_id}? No occurrence fires until it is resumed.`}
              disabled={job.state !== 'active'} onConfirm={() => act('pause')} />
            <ConfirmButton label="Resume" question={`Resume ${job.key ?? job.job_id}? It fires from its next scheduled time.`}
              disabled={job.state !== 'paused'} onConfirm={() => act('resume')} />
            <ConfirmButton label="Trigger now" question={`Run ${job.key ?? job.job_id} once now, outside its schedule?`}
              disabled={job.state === 'cancelled'} onConfirm={() => act('trigger')} />
            <ConfirmButton label="Cancel job" danger question={`Cancel ${job.key ?? job.job_id}? All future occurrences are cancelled; this cannot be undone.`}
              disabled={job.state === 'cancelled'} onConfirm={() => act('cancel')} />
          </div>
          <div class="grid2">
            <div class="card">
              <h2>Next fires</h2>
              {job.next_fire_at === null ? <p class="muted">None.</p> : (
                <table class="compact"><thead><tr><th>{tz}</th><th>your time</th><th>UTC</th></tr></thead><tbody>
                  {(preview !== null && preview.length > 0 ? preview.map((p) => p.scheduled_at) : [job.next_fire_at]).map((at) => (
                    <tr key={at}><td>{inZone(at, tz)}</td><td>{local(at)}</td><td>{utc(at)}</td></tr>
                  ))}
                </tbody></table>
              )}
            </div>
            <div class="card">
              <h2>Spec</h2>
              <pre class="spec">{JSON.stringify(job, null, 2)}</pre>
            </div>
          </div>
          <h2>Occurrences</h2>
          <RangePicker range={range} nowMs={nowMs} onChange={setRange} />
          <Loading error={windowError}>
            {occ !== null && (
              <>
                <p class="counts">
                  {Object.entries(row?.counts ?? {}).map(([status, count]) => <span key={status}><Status status={status} /> {count}</span>)}
                  {row !== null && row.late > 0 && <span><span class="badge late">late</span> {row.late}</span>}
                  {occurrences.length === 0 && <span class="muted">Nothing was due in this range.</span>}
                </p>
                <Strip occurrences={occurrences} sinceMs={range.sinceMs} untilMs={range.untilMs} />
                {lagData[0]!.length > 1 && <><h3>Fire lag</h3><Chart data={lagData} series={[{ label: 'fire lag (s)', stroke: '#3867d6' }]} yLabel="seconds" height={120} /></>}
                <div class="scroll">
                  <table class="occurrences">
                    <thead><tr><th>Scheduled</th><th>Status</th><th>Attempt</th><th>Fire lag</th><th>Finished</th><th>Error or reason</th></tr></thead>
                    <tbody>
                      {occurrences.map((o) => (
                        <tr key={`${o.scheduled_at}${o.run_id ?? ''}`} class={`row-${o.status}`}>
                          <td>{o.run_id === null ? inZone(o.scheduled_at, tz) : <a href={`#/runs/${encodeURIComponent(o.run_id)}`}>{inZone(o.scheduled_at, tz)}</a>}
                            <div class="muted">{utc(o.scheduled_at)}</div></td>
                          <td><Status status={o.status} />{o.late && <span class="badge late">late</span>}{!o.expected && <span class="muted"> (outside the schedule)</span>}</td>
                          <td>{o.attempt === null ? '' : o.attempt > 1 ? `${o.attempt} (${o.attempt - 1} retr${o.attempt === 2 ? 'y' : 'ies'})` : o.attempt}</td>
                          <td>{lag(o.fire_lag_s)}</td>
                          <td>{utc(o.finished_at)}</td>
                          <td class="error-text">{o.last_error ?? (o.status === 'missed' ? 'no run was recorded for this occurrence' : '')}</td>
                        </tr>
                      ))}
                    </tbody>
                  </table>
                </div>
                {row?.truncated === true && <p class="muted">Only {occurrences.length} of {row.total} occurrences are listed (the problems first); narrow the range.</p>}
              </>
            )}
          </Loading>
        </section>
      )}
    </Loading>
  );
}
