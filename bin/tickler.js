#!/usr/bin/env node
// The `tickler` command. An installed package runs its build in dist/ with plain node. In a
// checkout it runs dist/ (made by `npm install` or `npm run build`, scripts/build.mjs) when
// that build is newer than every file under src/, and otherwise, where tsx (a development
// dependency) is installed, the TypeScript sources through it, so that an edited source is
// never shadowed by a stale build. TICKLER_FROM_SOURCE=1 asks for the sources. Started from
// dist/, `tickler serve` is ready in about half the time.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { buildIsFresh, hasSources, root } from './build-fresh.js';

const built = existsSync(join(root, 'dist', 'cli', 'main.js'));

/** tsx's loader, or null where development dependencies are not installed. */
async function tsxApi() {
  try {
    return await import('tsx/esm/api');
  } catch (error) {
    if (error?.code === 'ERR_MODULE_NOT_FOUND') return null;
    throw error;
  }
}

const tsx = hasSources() && !buildIsFresh() ? await tsxApi() : null;
if (tsx !== null) {
  tsx.register();
  await import('../src/cli/main.ts');
} else if (built) {
  if (hasSources() && !buildIsFresh()) {
    process.stderr.write('tickler: dist/ is older than src/ and tsx is not installed; running dist/ (npm run build refreshes it)\n');
  }
  await import('../dist/cli/main.js');
} else {
  process.stderr.write('tickler: there is no build in dist/ and tsx is not installed: run `npm run build` (needs the dev dependencies)\n');
  process.exitCode = 1;
}
