// The README's screenshots of the web UI (docs/img/ui-*.png): the browser test's simulated
// weekend (test/ui/scenario.ts), shown in Debian's chromium at 1,400 px wide.
// Usage: npx tsx scripts/screenshots.ts
import { join, resolve } from 'node:path';
import { launchBrowser } from '../test/ui/browser.js';
import { keys, startScenario } from '../test/ui/scenario.js';

const out = resolve(import.meta.dirname, '..', 'docs', 'img');
const scenario = await startScenario();
const browser = await launchBrowser();
try {
  const page = await browser.context.newPage();
  await page.goto(scenario.url);
  await page.getByLabel('API key').fill(keys.team);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByText('team ops').waitFor();
  const dead = await fetch(`${scenario.url}/v1/dlq?pool=reports`, { headers: { authorization: `Bearer ${keys.team}` } })
    .then((answer) => answer.json() as Promise<{ items: { run_id: string }[] }>);
  const shots: [string, string, () => Promise<void>][] = [
    ['overview', '#/', () => page.locator('.tiles').waitFor()],
    ['night', '#/night', () => page.locator('table.night').getByText('nightly-report').waitFor()],
    ['jobs', '#/jobs', () => page.locator('table.jobs').getByText('sync-inventory').waitFor()],
    ['job', `#/jobs/${scenario.ids.nightly}`, () => page.locator('table.occurrences').getByText('dead').waitFor()],
    ['run', `#/runs/${dead.items[0]!.run_id}`, () => page.locator('table.events').waitFor()],
    ['dlq', '#/dlq', () => page.locator('table.dlq').getByText('webhook-acme').waitFor()],
  ];
  for (const [name, hash, ready] of shots) {
    await page.goto(`${scenario.url}/${hash}`);
    await ready();
    // uPlot draws on the next frame after its box is measured.
    // (The functions run in the page, which has the DOM this file's types do not.)
    await page.evaluate('new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))');
    const width = await page.evaluate<number>('document.documentElement.scrollWidth');
    if (width > 1400) throw new Error(`${name}: the page is ${width} px wide, wider than the 1,400 px window`);
    await page.screenshot({ path: join(out, `ui-${name}.png`), fullPage: true });
    console.log(`docs/img/ui-${name}.png`);
  }
} finally {
  await browser.close();
  await scenario.close();
}
