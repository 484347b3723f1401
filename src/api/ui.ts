/**
 * The run-history page: the jobs the dead man's switch flags, then recent runs and how they
 * ended, plain server-rendered HTML with every value escaped. Deliberately small; the JSON
 * API is the real interface.
 */
import type { RunRecord } from '../domain/types.js';
import type { SilentJob } from '../store/store.js';

const htmlEscapes: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', '\'': '&#39;' };

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (char) => htmlEscapes[char]!);
}

function cell(value: string | number | null): string {
  return `<td>${value === null ? '' : escapeHtml(String(value))}</td>`;
}

function isoOrEmpty(instantMs: number | null): string | null {
  return instantMs === null ? null : new Date(instantMs).toISOString();
}

/** The silent jobs' table, or a line saying there are none. */
function silentJobsSection(silent: readonly SilentJob[]): string {
  if (silent.length === 0) return '<p>No job is past its <code>max_silence_s</code>.</p>';
  const rows = silent.map(({ job, lastSuccessAtMs, silentSinceMs }) => `<tr>${[
    cell(job.jobId),
    cell(job.spec.key),
    cell(job.spec.pool),
    cell(job.spec.max_silence_s),
    cell(isoOrEmpty(lastSuccessAtMs) ?? 'never'),
    cell(new Date(silentSinceMs).toISOString()),
  ].join('')}</tr>`);
  return `<table class="silent"><thead><tr><th>job</th><th>key</th><th>pool</th><th>max_silence_s</th><th>last success</th><th>silent since</th></tr></thead>
<tbody>
${rows.join('\n')}
</tbody></table>`;
}

export function renderRunHistory(runs: readonly RunRecord[], silent: readonly SilentJob[], nowMs: number): string {
  const rows = runs.map((run) => `<tr class="status-${escapeHtml(run.status)}">${[
    cell(new Date(run.scheduledAtMs).toISOString()),
    cell(run.jobId),
    cell(run.pool),
    cell(run.status),
    cell(run.attempt),
    cell(isoOrEmpty(run.finishedAtMs)),
    cell(run.lastError === null ? null : run.lastError.slice(0, 200)),
    `<td><a href="/v1/runs/${encodeURIComponent(run.runId)}">${escapeHtml(run.runId)}</a></td>`,
  ].join('')}</tr>`);
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tickler: run history</title>
<style>
body{font:14px system-ui,sans-serif;margin:1.5rem}table{border-collapse:collapse}
td,th{padding:.25rem .6rem;border-bottom:1px solid #ddd;text-align:left}
.status-succeeded td:nth-child(4){color:#176f2c}.status-dead td:nth-child(4){color:#b00020}
[class*=status-skipped] td:nth-child(4){color:#8a6d00}.silent td{color:#b00020}
</style></head><body>
<h1>Silent jobs</h1>
${silentJobsSection(silent)}
<h1>Run history</h1>
<p>${runs.length} most recent runs, as of ${escapeHtml(new Date(nowMs).toISOString())}.</p>
<table><thead><tr><th>scheduled at</th><th>job</th><th>pool</th><th>status</th><th>attempt</th><th>finished at</th><th>last error</th><th>run</th></tr></thead>
<tbody>
${rows.join('\n')}
</tbody></table>
</body></html>
`;
}
