/** One run: its times, worker, attempts, error and events; replay from the DLQ. */
import { api, jobById, type Run } from './api';
import { utc } from './format';
import { ConfirmButton, Loading, Status, useLoad } from './components';

export function RunPage({ runId }: { runId: string }) {
  const [run, error, reload] = useLoad(() => api<Run>('GET', `/v1/runs/${encodeURIComponent(runId)}`), [runId]);
  const [job] = useLoad(async () => (run === null ? null : jobById(run.job_id)), [run?.job_id]);
  const times: [string, string | null][] = run === null ? [] : [
    ['scheduled', run.scheduled_at], ['fire at', run.fire_at], ['dispatched', run.dispatched_at], ['ready at', run.ready_at],
    ['started', run.started_at], ['lease expires', run.lease_expires_at], ['finished', run.finished_at],
  ];
  return (
    <Loading error={error}>
      {run !== null && (
        <section>
          <h1>Run <code>{run.run_id}</code> <Status status={run.status} /></h1>
          <p class="lead">of <a href={`#/jobs/${encodeURIComponent(run.job_id)}`}>{job?.key ?? run.job_id}</a> · pool <b>{run.pool}</b> · lane {run.lane}
            · attempt {run.attempt} · worker {run.worker_id ?? <span class="muted">none</span>}</p>
          {run.status === 'dead' && (
            <div class="actions">
              <ConfirmButton label="Replay" question={`Replay run ${run.run_id}? It goes back to ready under the same run id, with a fresh retry budget.`}
                onConfirm={async () => {
                  await api('POST', `/v1/runs/${encodeURIComponent(run.run_id)}/replay`);
                  reload();
                }} />
            </div>
          )}
          {run.last_error !== null && <><h2>Last error</h2><pre class="error-box">{run.last_error}</pre></>}
          <div class="grid2">
            <div class="card">
              <h2>Times</h2>
              <table class="compact"><tbody>
                {times.map(([name, at]) => <tr key={name}><th>{name}</th><td>{at === null ? <span class="muted">—</span> : utc(at)}</td></tr>)}
              </tbody></table>
            </div>
            <div class="card">
              <h2>Result</h2>
              <pre class="spec">{run.result === null ? 'none' : JSON.stringify(run.result, null, 2)}</pre>
            </div>
          </div>
          <h2>Events</h2>
          <div class="scroll">
            <table class="events">
              <thead><tr><th>#</th><th>At</th><th>Event</th><th>From → to</th><th>Detail</th></tr></thead>
              <tbody>
                {(run.events ?? []).map((event) => (
                  <tr key={event.sequence}>
                    <td>{event.sequence}</td><td>{utc(event.at)}</td><td>{event.type}</td>
                    <td>{event.from_status ?? '·'} → {event.to_status ?? '·'}</td>
                    <td class="detail">{event.detail === null ? '' : JSON.stringify(event.detail)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </section>
      )}
    </Loading>
  );
}
