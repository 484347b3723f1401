/**
 * Debian's chromium driven by playwright-core, for the UI's browser test and the README's
 * screenshots. Never a browser download: `/usr/bin/chromium` (apt-get install chromium), run
 * headless with the background networking that would reach outside this machine turned off,
 * and a fresh profile each launch.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';

export const chromiumPath = '/usr/bin/chromium';

/** Why the browser test cannot run here, or null when it can; TICKLER_REQUIRE_BROWSER=1 makes a missing browser a failure. */
export function browserMissing(): string | null {
  if (existsSync(chromiumPath)) return null;
  const reason = `${chromiumPath} is missing (apt-get install -y chromium)`;
  if (process.env['TICKLER_REQUIRE_BROWSER'] === '1') throw new Error(`TICKLER_REQUIRE_BROWSER=1 but ${reason}`);
  return reason;
}

/** A browser context on a new, empty profile, 1,400 px wide, in Berlin's time zone (the scenario's). */
export async function launchBrowser(): Promise<{ context: BrowserContext; close(): Promise<void> }> {
  const profile = mkdtempSync(join(tmpdir(), 'tickler-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
    viewport: { width: 1400, height: 900 },
    timezoneId: 'Europe/Berlin',
    locale: 'en-GB',
  });
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
