/**
 * The run-history page: recent runs and how they ended, plain server-rendered HTML with
 * every value escaped. Deliberately small; the JSON API is the real interface.
 */
import type { RunRecord } from '../domain/types.js';

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

export function renderRunHistory(runs: readonly RunRecord[], nowMs: number): string {
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
[class*=status-skipped] td:nth-child(4){color:#8a6d00}
</style></head><body>
<h1>Run history</h1>
<p>${runs.length} most recent runs, as of ${escapeHtml(new Date(nowMs).toISOString())}.</p>
<table><thead><tr><th>scheduled at</th><th>job</th><th>pool</th><th>status</th><th>attempt</th><th>finished at</th><th>last error</th><th>run</th></tr></thead>
<tbody>
${rows.join('\n')}
</tbody></table>
</body></html>
`;
}
