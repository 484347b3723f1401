// Compiles src/ to dist/ with tsc (tsconfig.build.json: JavaScript, declarations and source
// maps) and stamps the build. dist/ is what the package ships: its `exports` and `types`, and
// what the `tickler` bin runs with plain node. Started from it, `tickler serve` is ready in
// ~0.65 s instead of ~1.3 s through tsx (docs/benchmarks.md), and a restart's downtime is fire
// lag for everything due meanwhile. Run by `npm install` and `npm pack` (prepare) and by `npm
// run build` (--strict: a failed compile exits 1). Where TypeScript is not installed (an install
// without dev dependencies) it says so and exits 0: there is nothing it could build.
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
  console.warn('tickler: TypeScript is not installed; not building dist/');
  process.exit(0);
}
rmSync(dist, { recursive: true, force: true });
const result = spawnSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json')], { cwd: root, stdio: 'inherit' });
if (result.status !== 0) {
  rmSync(dist, { recursive: true, force: true });
  console.warn('tickler: tsc failed; not building dist/ (in a checkout with tsx, the bin runs the sources)');
  process.exit(process.argv.includes('--strict') ? 1 : 0);
}
writeFileSync(join(dist, '.built'), `${new Date().toISOString()}\n`);
