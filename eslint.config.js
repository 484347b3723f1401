// Lint: the recommended rules of eslint and typescript-eslint, plus the habits of STYLE.md
// that a linter can see (no empty catch blocks, no floating promises).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

/**
 * The direction of dependencies inside src/ (docs/DESIGN.md, "Layout"): each folder may import
 * only the folders below it. `forbidden` lists, per folder, the folders (and top-level modules)
 * it must not reach; every relative import is checked, however many `../` it climbs.
 */
const layers = {
  // The domain imports nothing outside itself (its limits and errors are its own, re-exported).
  domain: ['store', 'service', 'scheduler', 'api', 'worker', 'direct-worker', 'cli', 'obs', 'migrate', 'server', 'clock', 'index', 'limits', 'errors'],
  obs: ['store', 'service', 'scheduler', 'api', 'worker', 'direct-worker', 'cli', 'migrate', 'server', 'index'],
  store: ['service', 'scheduler', 'api', 'worker', 'direct-worker', 'cli', 'migrate', 'server', 'index'],
  service: ['scheduler', 'api', 'worker', 'direct-worker', 'cli', 'migrate', 'server', 'index'],
  scheduler: ['api', 'worker', 'direct-worker', 'cli', 'migrate', 'server', 'index'],
  // The SDK runs in users' processes: none of the server's code.
  worker: ['store', 'service', 'scheduler', 'api', 'direct-worker', 'cli', 'migrate', 'server', 'index'],
  'direct-worker': ['scheduler', 'cli', 'migrate', 'server', 'index'],
  // One node's wiring (server.ts and its parts): everything but the command line and the package entry.
  server: ['cli', 'index'],
};

/**
 * One rule per depth below the folder: an import climbing out of src/<folder> from a file
 * `depth` folders deep needs more than `depth` `../` to reach src/ and name a layer there, so
 * `../errors.js` in src/domain/schedule/ (domain/errors.ts) is not src/errors.ts.
 */
function layerRules([folder, forbidden]) {
  const names = forbidden.join('|');
  return [0, 1, 2].map((depth) => ({
    files: [`src/${folder}/${'*/'.repeat(depth)}*.ts`],
    rules: {
      'no-restricted-imports': ['error', {
        patterns: [{
          regex: `^(\\.\\./){${depth + 1},}(${names})(/|\\.js$)`,
          message: `src/${folder} may not import this layer (docs/DESIGN.md, "Layout": the direction of dependencies)`,
        }],
      }],
    },
  }));
}

export default tseslint.config(
  { ignores: ['node_modules/**', 'artifacts/**', '.tickler/**', 'web/**/*.min.js', 'web/dist/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    // The plain-JavaScript entry points (the test runner's script, the `tickler` command) run on Node.
    files: ['scripts/**/*.mjs', 'bin/**/*.js'],
    languageOptions: { globals: { process: 'readonly', console: 'readonly' } },
  },
  {
    files: ['**/*.ts', '**/*.tsx'],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      'no-empty': ['error', { allowEmptyCatch: false }],
      '@typescript-eslint/no-floating-promises': ['error', {
        // node:test's test() and describe() return promises the runner itself awaits.
        allowForKnownSafeCalls: [{ from: 'package', package: 'node:test', name: ['test', 'it', 'describe', 'suite'] }],
      }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'error',
    },
  },
  ...Object.entries(layers).flatMap(layerRules),
  {
    // The SDK may name the server's wire shapes only through its own wire.ts; the API the SDK's.
    files: ['src/api/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', {
        patterns: [{
          regex: '^(\\.\\./)+(scheduler|direct-worker|cli|migrate|server|index)(/|\\.js$)|^(\\.\\./)+worker/(?!wire\\.js$)',
          message: 'src/api may not import this layer (docs/DESIGN.md, "Layout"); of the SDK only its wire types',
        }],
      }],
    },
  },
);
