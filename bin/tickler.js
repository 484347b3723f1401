#!/usr/bin/env node
// The `tickler` command. The sources are TypeScript run through tsx (a runtime dependency),
// so there is no build step between a checkout and a working command.
import { register } from 'tsx/esm/api';

register();
await import('../src/cli/main.ts');
