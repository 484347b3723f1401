/**
 * The DLQ: dead runs, filtered by pool (the API's) and by job key or error text (this page's),
 * replayed one at a time or as a selection. A selection goes in batches to `POST /v1/runs:replay`,
 * which the server rate-limits per team; on a 429 the page waits as long as `Retry-After` says.
 */
import { useMemo, useState } from 'preact/hooks';
import { ApiError, api, jobById, type Job, type Page, type Run } from './api';
import { utc } from './format';
import { ConfirmButton, Loading, Pager, useLoad } from './components';

const pageSize = 50;
const batchSize = 50;

interface ReplayItem {
  status: number;
  error?: { message: string };
}

async function replayAll(runIds: string[], progress: (done: number, note: string) => void): Promise<number> {
  let done = 0;
  let failed = 0;
  while (done < runIds.length) {
    const batch = runIds.slice(done, done + batchSize);
    try {
      const answer = await api<{ results: ReplayItem[] }>('POST', '/v1/runs:replay', { body: { run_ids: batch } });
      failed += answer.results.filter((item) => item.status !== 200).length;
      done += batch.length;
      progress(done, '');
    } catch (error) {
      if (!(error instanceof ApiError) || error.status !== 429) throw error;
      const waitS = error.retryAfterS ?? 1;
      progress(done, `rate-limited: waiting ${waitS}s`);
      await new Promise((resolve) => setTimeout(resolve, waitS * 1000));
    }
  }
  return failed;
}

export function DlqPage() {
  const [pool, setPool] = useState('');
  const [applied, setApplied] = useState('');
  const [keyPrefix, setKeyPrefix] = useState('');
  const [errorText, setErrorText] = useState('');
  const [cursors, setCursors] = useState<string[]>([]);
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const [note, setNote] = useState<string | null>(null);
  const cursor = cursors.at(-1);
  const [page, error, reload] = useLoad(async () => {
    const runs = await api<Page<Run>>('GET', '/v1/dlq', { query: { pool: applied, limit: pageSize, cursor } });
    const jobs = new Map<string, Job | null>();
    await Promise.all([...new Set(runs.items.map((run) => run.job_id))].map(async (id) => jobs.set(id, await jobById(id))));
    return { runs: runs.items, jobs, next: runs.next_cursor };
  }, [applied, cursor]);
  const shown = useMemo(() => (page?.runs ?? []).filter((run) => {
    const key = page?.jobs.get(run.job_id)?.key ?? '';
    return key.startsWith(keyPrefix) && (errorText === '' || (run.last_error ?? '').toLowerCase().includes(errorText.toLowerCase()));
  }), [page, keyPrefix, errorText]);
  const toggle = (runId: string) => {
    const next = new Set(selected);
    if (next.has(runId)) next.delete(runId);
    else next.add(runId);
    setSelected(next);
  };
  const replaySelection = async () => {
    const ids = shown.map((run) => run.run_id).filter((id) => selected.has(id));
    const failed = await replayAll(ids, (done, extra) => setNote(`Replayed ${done} of ${ids.length}${extra === '' ? '' : `; ${extra}`}`));
    setNote(`Replayed ${ids.length - failed} of ${ids.length}${failed > 0 ? `; ${failed} were no longer dead` : ''}.`);
    setSelected(new Set());
    reload();
  };
  const allShown = shown.length > 0 && shown.every((run) => selected.has(run.run_id));
  return (
    <section>
      <h1>Dead letters</h1>
      <form class="filters" onSubmit={(event) => {
        event.preventDefault();
        setCursors([]);
        setApplied(pool);
      }}>
        <label>Pool <input value={pool} onInput={(e) => setPool(e.currentTarget.value)} /></label>
        <label>Job key prefix <input value={keyPrefix} onInput={(e) => setKeyPrefix(e.currentTarget.value)} /></label>
        <label>Error contains <input value={errorText} onInput={(e) => setErrorText(e.currentTarget.value)} /></label>
        <button type="submit">Filter</button>
      </form>
      <div class="actions">
        <ConfirmButton label={`Replay selected (${shown.filter((run) => selected.has(run.run_id)).length})`}
          disabled={!shown.some((run) => selected.has(run.run_id))}
          question={`Replay the ${shown.filter((run) => selected.has(run.run_id)).length} selected runs? Each goes back to ready under its run id; replays are rate-limited.`}
          onConfirm={replaySelection} />
        {note !== null && <span class="note" role="status">{note}</span>}
      </div>
      <Loading error={error}>
        {page !== null && (
          <>
            <div class="scroll">
              <table class="dlq">
                <thead><tr>
                  <th><input type="checkbox" aria-label="select all" checked={allShown}
                    onChange={() => setSelected(allShown ? new Set() : new Set(shown.map((run) => run.run_id)))} /></th>
                  <th>Job</th><th>Scheduled</th><th>Pool</th><th>Attempts</th><th>Died</th><th>Error</th><th />
                </tr></thead>
                <tbody>
                  {shown.map((run) => (
                    <tr key={run.run_id}>
                      <td><input type="checkbox" aria-label={`select ${run.run_id}`} checked={selected.has(run.run_id)} onChange={() => toggle(run.run_id)} /></td>
                      <td><a href={`#/jobs/${encodeURIComponent(run.job_id)}`}>{page.jobs.get(run.job_id)?.key ?? run.job_id}</a></td>
                      <td><a href={`#/runs/${encodeURIComponent(run.run_id)}`}>{utc(run.scheduled_at)}</a></td>
                      <td>{run.pool}</td>
                      <td>{run.attempt}</td>
                      <td>{utc(run.finished_at)}</td>
                      <td class="error-text">{run.last_error}</td>
                      <td><ConfirmButton label="Replay" question={`Replay run ${run.run_id}? It goes back to ready under the same run id.`}
                        onConfirm={async () => {
                          await api('POST', `/v1/runs/${encodeURIComponent(run.run_id)}/replay`);
                          reload();
                        }} /></td>
                    </tr>
                  ))}
                  {shown.length === 0 && <tr><td colSpan={8} class="muted">No dead run matches.</td></tr>}
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
