// The web UI in a real browser (Debian's chromium driven by playwright-core) against a real
// server: a simulated weekend (scenario.ts) with a nightly 02:00 Europe/Berlin job that dies on
// Saturday and skips Sunday's missing 02:00, beside a */2 job with hundreds of runs. A person
// signs in with a key, finds the nightly job, sees the skipped_dst and the dead run's error,
// replays it and pauses the job. Playwright's own waits throughout: no sleeps.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { browserMissing, launchBrowser } from './browser.js';
import { call, keys, nightlyError, startScenario, type Scenario } from './scenario.js';

const missing = browserMissing();

describe('the web UI after a simulated night', () => {
  let scenario: Scenario;
  before(async () => {
    scenario = await startScenario();
  });
  after(async () => {
    await scenario?.close();
  });

  it('puts the nightly job on the "last night" answer beside the */2 job, its skipped_dst expected, nothing missed', async () => {
    const night = await call(scenario.url, 'GET', '/v1/occurrences?since=2026-03-28T17:00:00.000Z&until=2026-03-29T07:00:00.000Z');
    assert.equal(night.status, 200);
    const byKey = new Map(night.json.items.map((row: { job: { key: string } | null; pool: string }) => [row.job?.key ?? `pool:${row.pool}`, row]));
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const nightly = byKey.get('nightly-report') as any;
    assert.deepEqual(nightly.occurrences.map((o: { scheduled_at: string; status: string; expected: boolean }) => [o.scheduled_at, o.status, o.expected]),
      [['2026-03-29T01:00:00.000Z', 'skipped_dst', true]]);
    assert.equal(nightly.missed, 0);
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const sync = byKey.get('sync-inventory') as any;
    assert.equal(sync.counts.succeeded, 14 * 30, 'every */2 occurrence of the 14 hours ran');
    assert.equal(sync.missed, 0);
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    assert.equal((byKey.get('pool:webhooks') as any).failed, 3, 'the one-shot jobs of a pool share a row');
    assert.equal(byKey.has('web-secret-job'), false, 'another team\'s job is not shown');
    const rows = [...byKey.keys()];
    assert.ok(rows.indexOf('pool:webhooks') < rows.indexOf('nightly-report') && rows.indexOf('nightly-report') < rows.indexOf('sync-inventory'),
      `failed first, then skipped, then the rest: ${rows.join(', ')}`);
  });

  it('signs in, finds the nightly job, sees skipped_dst and the dead run\'s error, replays it and pauses the job', { skip: missing ?? false }, async () => {
    const browser = await launchBrowser();
    try {
      const page = await browser.context.newPage();
      const pageErrors: string[] = [];
      page.on('pageerror', (error) => pageErrors.push(error.message));
      page.setDefaultTimeout(20_000);
      await page.goto(scenario.url);

      // Sign in: a wrong key is refused, the team's key is taken.
      await page.getByLabel('API key').fill('not-a-key');
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('alert').filter({ hasText: 'not known' }).waitFor();
      await page.getByLabel('API key').fill(keys.team);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByText('team ops').waitFor();

      // Last night: the nightly job is there, with its skipped occurrence and the reason.
      await page.getByRole('link', { name: 'Last night' }).click();
      const nightRow = page.locator('table.night tr').filter({ hasText: 'nightly-report' });
      await nightRow.getByText('skipped dst').waitFor();
      await nightRow.getByText('does not exist').waitFor();
      assert.equal(await page.locator('table.night tr').filter({ hasText: 'web-secret-job' }).count(), 0);

      // Jobs: filter by key prefix and open the nightly job.
      await page.getByRole('link', { name: 'Jobs', exact: true }).click();
      await page.getByLabel('Key prefix').fill('nightly');
      await page.getByRole('button', { name: 'Filter' }).click();
      await page.locator('table.jobs tbody tr').filter({ hasText: 'sync-inventory' }).waitFor({ state: 'detached' });
      await page.locator('table.jobs').getByRole('link', { name: 'nightly-report' }).click();
      await page.getByRole('heading', { name: /nightly-report/ }).waitFor();

      // Its occurrences: Sunday's 02:00 skipped for the DST gap, Saturday's run dead with its error.
      const occurrences = page.locator('table.occurrences');
      await occurrences.locator('tr').filter({ hasText: 'skipped dst' }).filter({ hasText: '2026-03-29 01:00:00 UTC' }).waitFor();
      const deadRow = occurrences.locator('tr').filter({ hasText: 'dead' });
      await deadRow.getByText(nightlyError).waitFor();

      // The dead run: its error and events; replay it, confirming first.
      await deadRow.getByRole('link').first().click();
      await page.getByRole('heading', { name: /Run/ }).getByText('dead').waitFor();
      await page.locator('pre.error-box').filter({ hasText: nightlyError }).waitFor();
      await page.getByRole('button', { name: 'Replay' }).click();
      const dialog = page.getByRole('dialog', { name: 'Replay' });
      await dialog.getByText('same run id').waitFor();
      await dialog.getByRole('button', { name: 'Confirm: Replay' }).click();
      await page.getByRole('heading', { name: /Run/ }).getByText('ready').waitFor();
      await page.locator('table.events').getByText('replayed').waitFor();

      // Back to the job: pause it, confirming first.
      await page.getByRole('link', { name: 'nightly-report' }).click();
      await page.getByRole('button', { name: 'Pause' }).click();
      await page.getByRole('dialog', { name: 'Pause' }).getByRole('button', { name: 'Confirm: Pause' }).click();
      await page.getByRole('heading', { name: /nightly-report/ }).getByText('paused').waitFor();
      assert.deepEqual(pageErrors, []);
    } finally {
      await browser.close();
    }
    const job = await call(scenario.url, 'GET', `/v1/jobs/${scenario.ids.nightly}`);
    assert.equal(job.json.state, 'paused');
    const dlq = await call(scenario.url, 'GET', '/v1/dlq?pool=reports');
    assert.deepEqual(dlq.json.items, [], 'the replayed run left the DLQ');
  });
});
