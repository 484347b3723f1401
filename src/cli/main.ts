/**
 * The `tickler` command's entry (bin/tickler.js imports it): parses the arguments, runs the
 * subcommand, and sets the exit code. The parser is src/cli/program.ts.
 */
import { main } from './program.js';

await main();
