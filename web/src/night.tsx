/** Last night: every occurrence due in a window, per job, and what became of it; missed, failed and late first. */
import { useState } from 'preact/hooks';
import { api, type OccurrenceWindow } from './api';
import { scheduleInWords, utc } from './format';
import { Loading, Status, Strip, useLoad } from './components';
import { RangePicker } from './range-picker';
import { rangeOf, type Range } from './ranges';

export function NightPage({ nowMs }: { nowMs: number }) {
  const [range, setRange] = useState<Range>(() => rangeOf('night', nowMs));
  const [keyPrefix, setKeyPrefix] = useState('');
  const [occ, error] = useLoad(() => api<OccurrenceWindow>('GET', '/v1/occurrences', {
    query: { since: new Date(range.sinceMs).toISOString(), until: new Date(range.untilMs).toISOString(), key_prefix: keyPrefix },
  }), [range, keyPrefix]);
  return (
    <section>
      <h1>Last night</h1>
      <p class="lead">Every occurrence due from {utc(new Date(range.sinceMs).toISOString())} to {utc(new Date(range.untilMs).toISOString())}, per job:
        what the schedule expected and what the ledger recorded.</p>
      <RangePicker range={range} nowMs={nowMs} onChange={setRange} />
      <form class="filters" onSubmit={(event) => event.preventDefault()}>
        <label>Key prefix <input value={keyPrefix} onChange={(e) => setKeyPrefix(e.currentTarget.value)} /></label>
      </form>
      <Loading error={error}>
        {occ !== null && (
          <>
            {occ.truncated && <p class="warn">The window holds more than one answer reads; narrow it for the whole picture.</p>}
            <div class="scroll">
              <table class="night">
                <thead><tr><th>Job</th><th>Due</th><th>What became of it</th><th class="wide">Timeline</th></tr></thead>
                <tbody>
                  {occ.items.map((row) => {
                    const name = row.job === null ? `one-shot jobs in ${row.pool}` : (row.job.key ?? row.job.job_id);
                    const problems = row.missed + row.failed + row.late;
                    return (
                      <tr key={row.job?.job_id ?? `pool:${row.pool}`} class={problems > 0 ? 'problem' : ''}>
                        <td>{row.job === null ? name : <a href={`#/jobs/${encodeURIComponent(row.job.job_id)}`}>{name}</a>}
                          <div class="muted">{row.job === null ? `pool ${row.pool}` : `${scheduleInWords(row.job.schedule)} · ${row.job.state}`}</div></td>
                        <td>{row.total}</td>
                        <td class="counts">
                          {row.missed > 0 && <span><Status status="missed" /> {row.missed}</span>}
                          {row.late > 0 && <span><span class="badge late">late</span> {row.late}</span>}
                          {Object.entries(row.counts).filter(([status]) => status !== 'missed').map(([status, count]) => (
                            <span key={status}><Status status={status} /> {count}</span>
                          ))}
                          {row.occurrences.filter((o) => o.last_error !== null && o.status !== 'succeeded').slice(0, 3).map((o) => (
                            <div key={o.run_id ?? o.scheduled_at} class="error-text">
                              {o.run_id === null ? null : <a href={`#/runs/${encodeURIComponent(o.run_id)}`}>{utc(o.scheduled_at)}</a>}: {o.last_error}
                            </div>
                          ))}
                        </td>
                        <td class="wide"><Strip occurrences={row.occurrences} sinceMs={range.sinceMs} untilMs={range.untilMs} /></td>
                      </tr>
                    );
                  })}
                  {occ.items.length === 0 && <tr><td colSpan={4} class="muted">Nothing was due in this window.</td></tr>}
                </tbody>
              </table>
            </div>
          </>
        )}
      </Loading>
    </section>
  );
}
