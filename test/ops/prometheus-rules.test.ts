// The shipped Prometheus rules (ops/prometheus/tickler-rules.yml): promtool accepts them, every
// metric they read is one tickler exports, and every alert has its runbook in docs/operations.md.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { Metrics } from '../../src/obs/metrics.js';

const root = join(import.meta.dirname, '..', '..');
const rulesPath = join(root, 'ops', 'prometheus', 'tickler-rules.yml');
const rulesText = readFileSync(rulesPath, 'utf8');

test('promtool checks the rules file', (context) => {
  const found = spawnSync('promtool', ['--version'], { encoding: 'utf8' });
  if (found.error !== undefined) {
    const reason = 'promtool is not installed (Debian package prometheus); set TICKLER_REQUIRE_PROMTOOL=1 to make this a failure';
    if (process.env['TICKLER_REQUIRE_PROMTOOL'] === '1') assert.fail(reason);
    context.skip(reason);
    return;
  }
  const checked = spawnSync('promtool', ['check', 'rules', rulesPath], { encoding: 'utf8' });
  assert.equal(checked.status, 0, `${checked.stdout}${checked.stderr}`);
  assert.match(checked.stdout, /SUCCESS: \d+ rules found/);
});

test('every metric the rules read is one tickler exports', async () => {
  const exported = new Set((await new Metrics().registry.getMetricsAsJSON()).map((metric) => metric.name));
  const read = new Set([...rulesText.matchAll(/\b(tickler_[a-z_]+?)(?:_bucket|_sum|_count)?\b/g)].map((match) => match[1]!));
  assert.ok(read.size >= 6, `the rules read ${[...read].join(', ')}`);
  for (const name of read) assert.ok(exported.has(name), `${name} is read by a rule but not exported`);
});

test('every alert has a runbook section in docs/operations.md', () => {
  const operations = readFileSync(join(root, 'docs', 'operations.md'), 'utf8');
  const headings = new Set([...operations.matchAll(/^#{2,4} (Tickler[A-Za-z]+)$/gm)].map((match) => match[1]!));
  const alerts = [...rulesText.matchAll(/- alert: (\w+)/g)].map((match) => match[1]!);
  assert.ok(alerts.length >= 6);
  for (const alert of alerts) {
    assert.ok(headings.has(alert), `no runbook heading for ${alert}`);
    assert.match(rulesText, new RegExp(`runbook: docs/operations.md#${alert.toLowerCase()}\\b`), `${alert}'s runbook link`);
  }
});
