#!/usr/bin/env node
// The `tickler` command. It runs the build in dist/ (made by `npm install` or `npm run build`,
// scripts/build.mjs) when that build is newer than every file under src/, and otherwise the
// TypeScript sources through tsx (a runtime dependency), so a checkout works without a build
// and an edited source is never shadowed by a stale build. TICKLER_FROM_SOURCE=1 forces the
// sources. Started from dist/, `tickler serve` is ready in about half the time.
import { buildIsFresh } from './build-fresh.js';

if (buildIsFresh()) {
  await import('../dist/cli/main.js');
} else {
  const { register } = await import('tsx/esm/api');
  register();
  await import('../src/cli/main.ts');
}
