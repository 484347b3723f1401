// Lint: the recommended rules of eslint and typescript-eslint, plus the habits of STYLE.md
// that a linter can see (no empty catch blocks, no floating promises).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

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
);
