// Builds the web UI (Preact + uPlot) into web/dist, served by `tickler serve` at `/` and
// `/ui/assets/` (src/api/web-ui.ts). `npm run build:web`; the output is committed.
import { defineConfig } from 'vite';

export default defineConfig({
  root: import.meta.dirname,
  base: '/ui/',
  logLevel: 'warn',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    assetsDir: 'assets',
    // One script and one stylesheet: the UI is small, and the shell's policy allows only them.
    modulePreload: false,
    reportCompressedSize: false,
  },
});
