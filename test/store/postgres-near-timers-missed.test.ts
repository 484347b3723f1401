// Near timers on PostgreSQL travel by NOTIFY, which is lost while the LISTEN connection is
// down. The store says so once it listens again (`onNearTimersMissed`), so that the loader
// rereads its whole window rather than trust its incremental refreshes (scheduler.ts).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { openTestStoreBehindProxy, postgresSkipReason } from './postgres-harness.js';

const skip = await postgresSkipReason();

void describe('PostgreSQL near-timer announcements', { skip: skip ?? false }, () => {
  void it('says they may have been lost once the LISTEN connection is back, and not before', async () => {
    const { handle, proxy } = await openTestStoreBehindProxy();
    try {
      const { store } = handle;
      await store.waitUntilListening();
      let missed = 0;
      let heardBack: () => void = () => undefined;
      const back = new Promise<void>((resolve) => {
        heardBack = resolve;
      });
      store.onNearTimersMissed(() => {
        missed++;
        heardBack();
      });
      await proxy.stop();
      assert.equal(missed, 0, 'nothing while the connection is down: what is missed is not over yet');
      await proxy.restart();
      await back;
      await store.waitUntilListening();
      assert.equal(missed, 1, 'once, when it listens again');
    } finally {
      await handle.cleanup();
      await proxy.stop();
    }
  });
});
