/**
 * Structured logs (pino, JSON lines on stderr so stdout stays free for CLI output).
 * `TICKLER_LOG_LEVEL` sets the level; tests default to `warn`.
 */
import { pino, type Logger } from 'pino';

export type { Logger };

export function createLogger(options: { level?: string; name?: string } = {}): Logger {
  return pino(
    { level: options.level ?? process.env['TICKLER_LOG_LEVEL'] ?? 'info', name: options.name ?? 'tickler' },
    pino.destination({ dest: 2, sync: false }),
  );
}

export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
