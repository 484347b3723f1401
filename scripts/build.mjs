// Compiles src/ to dist/ with tsc (tsconfig.build.json) and stamps the build, so the `tickler`
// bin can start from plain JavaScript: through tsx's loader `tickler serve` was ready in ~1.3 s,
// compiled in ~0.65 s (docs/benchmarks.md, "Figures behind the defaults"), and a restart's downtime is
// fire lag for everything due meanwhile. Run by `npm install` (prepare) and `npm run build`.
// Where TypeScript is not installed (production installs without dev dependencies) it says
// so and exits 0: bin/tickler.js then runs the sources through tsx, as it does whenever a
// source file is newer than the stamp.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

const root = resolve(import.meta.dirname, '..');
const dist = join(root, 'dist');
let tsc;
try {
  tsc = createRequire(join(root, 'package.json')).resolve('typescript/bin/tsc');
} catch {
  console.warn('tickler: TypeScript is not installed; not building dist/ (the bin runs the sources through tsx)');
  process.exit(0);
}
rmSync(dist, { recursive: true, force: true });
const result = spawnSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json')], { cwd: root, stdio: 'inherit' });
if (result.status !== 0) {
  rmSync(dist, { recursive: true, force: true });
  console.warn('tickler: tsc failed; not building dist/ (the bin runs the sources through tsx)');
  process.exit(process.argv.includes('--strict') ? 1 : 0);
}
writeFileSync(join(dist, '.built'), `${new Date().toISOString()}\n`);
