// bullmq-aof's Redis (bench/peers/durable-redis.ts) is what its name says: a real redis-server
// of its own that fsyncs every write before answering, and gone, directory and all, once stopped.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import { Redis } from 'ioredis';
import { durableRedisHost, durableRedisUnavailableReason, startDurableRedis } from '../../bench/peers/durable-redis.js';
import { redisPingFailure } from '../../bench/peers/services.js';

test('the durable Redis appends and fsyncs every write, and stopping it removes the process and its files', async (t) => {
  const unavailable = durableRedisUnavailableReason();
  if (unavailable !== undefined) {
    t.skip(unavailable);
    return;
  }
  const durable = await startDurableRedis();
  const client = new Redis({ host: durableRedisHost, port: durable.port, lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await client.connect();
    assert.deepEqual(await client.config('GET', 'appendonly'), ['appendonly', 'yes']);
    assert.deepEqual(await client.config('GET', 'appendfsync'), ['appendfsync', 'always']);
    assert.deepEqual(await client.config('GET', 'save'), ['save', '']);
    await client.set('written', 'before the answer');
    const dir = (await client.config('GET', 'dir') as string[])[1]!;
    const aofDir = `${dir}/appendonlydir`;
    // Redis 7 keeps a manifest naming the incremental file that holds the writes.
    const manifest = readFileSync(`${aofDir}/appendonly.aof.manifest`, 'utf8');
    const incremental = /file (\S+\.incr\.aof) /.exec(manifest)?.[1];
    assert.ok(incremental !== undefined, manifest);
    assert.match(readFileSync(`${aofDir}/${incremental}`, 'utf8'), /before the answer/);
    client.disconnect();
    await durable.stop();
    assert.equal(existsSync(dir), false, 'the data directory is removed');
    assert.match(await redisPingFailure(durableRedisHost, durable.port) ?? '', /not reachable/);
  } finally {
    client.disconnect();
    await durable.stop();
  }
});
