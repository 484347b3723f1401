/**
 * A test harness that runs several processes names its run in `TICKLER_TEST_RUN`; every
 * answer then carries it (`tickler-test-run`, which chaos/run-tag.ts reads), so a client that
 * reached another run's node (its port taken over between a kill and a restart, say) can
 * tell. A test hook, like the chaos pause hook (cluster-node.ts).
 */
import type { buildApp } from '../api/app.js';

const testRunHeader = 'tickler-test-run';

export function tagAnswersWithTestRun(app: ReturnType<typeof buildApp>): void {
  const tag = process.env['TICKLER_TEST_RUN'];
  if (tag === undefined || tag === '') return;
  app.addHook('onRequest', async (_request, reply) => {
    reply.header(testRunHeader, tag);
  });
}
