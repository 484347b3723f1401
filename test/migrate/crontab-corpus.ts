// Crontab lines of the kinds found in the wild, each with the job it must become (or the
// reason it is refused). Context lines (environment, CRON_TZ) apply to the entries after them.

export interface Expected {
  cron: string;
  tz: string;
  command: string;
  stdin?: string;
  env?: Record<string, string>;
  cwd?: string;
  shell?: string;
  user?: string;
}

export type CorpusLine =
  | { context: string }
  | { line: string; expect: Expected }
  | { line: string; refused: RegExp };

const utc = 'UTC';
const berlin = 'Europe/Berlin';

/** A user crontab (`crontab -l` of user `deploy`), read with --tz UTC. */
export const userCrontab: CorpusLine[] = [
  { context: '# m h  dom mon dow   command' },
  { context: '' },
  { line: '*/5 * * * * /usr/local/bin/poll-queue', expect: { cron: '*/5 * * * *', tz: utc, command: '/usr/local/bin/poll-queue' } },
  { line: '0 * * * * /opt/app/bin/hourly.sh', expect: { cron: '0 * * * *', tz: utc, command: '/opt/app/bin/hourly.sh' } },
  { line: '15 2 * * * /usr/bin/backup --full', expect: { cron: '15 2 * * *', tz: utc, command: '/usr/bin/backup --full' } },
  { line: '0 9-17 * * 1-5 /opt/bin/office-hours', expect: { cron: '0 9-17 * * 1-5', tz: utc, command: '/opt/bin/office-hours' } },
  { line: '0 9 * * mon-fri /opt/bin/standup', expect: { cron: '0 9 * * mon-fri', tz: utc, command: '/opt/bin/standup' } },
  { line: '30 4 1,15 * * /opt/bin/twice-monthly', expect: { cron: '30 4 1,15 * *', tz: utc, command: '/opt/bin/twice-monthly' } },
  { line: '0 0 1 jan,jul * /opt/bin/half-year', expect: { cron: '0 0 1 jan,jul *', tz: utc, command: '/opt/bin/half-year' } },
  { line: '0 12 * * Sun /opt/bin/weekly-report', expect: { cron: '0 12 * * Sun', tz: utc, command: '/opt/bin/weekly-report' } },
  { line: '0 0 * * 7 /opt/bin/sunday-seven', expect: { cron: '0 0 * * 7', tz: utc, command: '/opt/bin/sunday-seven' } },
  { line: '5-55/10 * * * * /opt/bin/offset-steps', expect: { cron: '5-55/10 * * * *', tz: utc, command: '/opt/bin/offset-steps' } },
  { line: '0 */2 * * * /opt/bin/every-two-hours', expect: { cron: '0 */2 * * *', tz: utc, command: '/opt/bin/every-two-hours' } },
  { line: '0 0 */3 * * /opt/bin/every-third-day', expect: { cron: '0 0 */3 * *', tz: utc, command: '/opt/bin/every-third-day' } },
  { line: '0 6 1-7 * 1 /opt/bin/dom-or-dow', expect: { cron: '0 6 1-7 * 1', tz: utc, command: '/opt/bin/dom-or-dow' } },
  { line: '@daily /opt/bin/daily-macro', expect: { cron: '@daily', tz: utc, command: '/opt/bin/daily-macro' } },
  { line: '@hourly /opt/bin/hourly-macro', expect: { cron: '@hourly', tz: utc, command: '/opt/bin/hourly-macro' } },
  { line: '@weekly /opt/bin/weekly-macro', expect: { cron: '@weekly', tz: utc, command: '/opt/bin/weekly-macro' } },
  { line: '@monthly /opt/bin/monthly-macro', expect: { cron: '@monthly', tz: utc, command: '/opt/bin/monthly-macro' } },
  { line: '@yearly /opt/bin/yearly-macro', expect: { cron: '@yearly', tz: utc, command: '/opt/bin/yearly-macro' } },
  { line: '@annually /opt/bin/annually-macro', expect: { cron: '@annually', tz: utc, command: '/opt/bin/annually-macro' } },
  { line: '@midnight /opt/bin/midnight-macro', expect: { cron: '@midnight', tz: utc, command: '/opt/bin/midnight-macro' } },
  { line: '@reboot /opt/bin/start-daemon', refused: /@reboot: tickler has no boot event/ },
  { line: '@every 5m /opt/bin/not-cron', refused: /@every: not a schedule cron knows/ },
  { line: '0 3 * * * mysqldump -A | gzip > /backup/db-$(date +\\%F).sql.gz',
    expect: { cron: '0 3 * * *', tz: utc, command: 'mysqldump -A | gzip > /backup/db-$(date +%F).sql.gz' } },
  { line: '0 8 * * * mail -s "morning" ops@example.com%Good morning,%the report is ready.%',
    expect: { cron: '0 8 * * *', tz: utc, command: 'mail -s "morning" ops@example.com', stdin: 'Good morning,\nthe report is ready.\n' } },
  { line: '1 1 * * * /usr/bin/printf "100\\% done"%', expect: { cron: '1 1 * * *', tz: utc, command: '/usr/bin/printf "100% done"', stdin: '' } },
  { line: '2 2 * * * cat%line with \\% in it', expect: { cron: '2 2 * * *', tz: utc, command: 'cat', stdin: 'line with % in it' } },
  { line: '61 * * * * /opt/bin/bad-minute', refused: /minute/ },
  { line: '0 25 * * * /opt/bin/bad-hour', refused: /hour/ },
  { line: '* * * * /opt/bin/four-fields', refused: /./ },
  { line: '0 0 * * *', refused: /no command/ },
  { line: '-*/10 * * * * /opt/bin/quiet', expect: { cron: '*/10 * * * *', tz: utc, command: '/opt/bin/quiet' } },
  { context: 'PATH=/usr/local/bin:/usr/bin:/bin' },
  { context: 'MAILTO=ops@example.com' },
  { context: 'SHELL=/bin/bash' },
  { context: 'HOME=/srv/app' },
  { context: 'APP_ENV = "production"' },
  { line: '*/15 * * * * run-parts /srv/app/cron.d',
    expect: { cron: '*/15 * * * *', tz: utc, command: 'run-parts /srv/app/cron.d', shell: '/bin/bash', cwd: '/srv/app',
      env: { PATH: '/usr/local/bin:/usr/bin:/bin', MAILTO: 'ops@example.com', APP_ENV: 'production', HOME: '/srv/app' } } },
  { context: 'CRON_TZ=Europe/Berlin' },
  { line: '30 2 * * * /opt/bin/berlin-night',
    expect: { cron: '30 2 * * *', tz: berlin, command: '/opt/bin/berlin-night', shell: '/bin/bash', cwd: '/srv/app',
      env: { PATH: '/usr/local/bin:/usr/bin:/bin', MAILTO: 'ops@example.com', APP_ENV: 'production', HOME: '/srv/app' } } },
  { context: 'TZ=America/New_York' },
  { line: '0 7 * * 1-5 /opt/bin/tz-is-environment',
    expect: { cron: '0 7 * * 1-5', tz: berlin, command: '/opt/bin/tz-is-environment', shell: '/bin/bash', cwd: '/srv/app',
      env: { PATH: '/usr/local/bin:/usr/bin:/bin', MAILTO: 'ops@example.com', APP_ENV: 'production', HOME: '/srv/app', TZ: 'America/New_York' } } },
  { context: 'CRON_TZ=Mars/Olympus' },
  { context: 'CRON_TZ=UTC' },
  { context: 'SHELL=/bin/sh' },
  { context: 'MAILTO=""' },
  { context: 'APP_ENV=' },
  { context: 'TZ=UTC' },
  { line: '0 4 * * * /opt/bin/after-reset',
    expect: { cron: '0 4 * * *', tz: utc, command: '/opt/bin/after-reset', cwd: '/srv/app',
      env: { PATH: '/usr/local/bin:/usr/bin:/bin', MAILTO: '', APP_ENV: '', HOME: '/srv/app', TZ: 'UTC' } } },
  { line: '0 4 * * * /opt/bin/after-reset', expect: { cron: '0 4 * * *', tz: utc, command: '/opt/bin/after-reset', cwd: '/srv/app',
    env: { PATH: '/usr/local/bin:/usr/bin:/bin', MAILTO: '', APP_ENV: '', HOME: '/srv/app', TZ: 'UTC' } } },
  { line: '\t0\t5\t*\t*\t*\t/opt/bin/tabs   keep  inner   spaces', expect: { cron: '0 5 * * *', tz: utc, command: '/opt/bin/tabs   keep  inner   spaces',
    cwd: '/srv/app', env: { PATH: '/usr/local/bin:/usr/bin:/bin', MAILTO: '', APP_ENV: '', HOME: '/srv/app', TZ: 'UTC' } } },
  { line: '0 0 L * * /opt/bin/not-vixie-but-read', expect: { cron: '0 0 L * *', tz: utc, command: '/opt/bin/not-vixie-but-read',
    cwd: '/srv/app', env: { PATH: '/usr/local/bin:/usr/bin:/bin', MAILTO: '', APP_ENV: '', HOME: '/srv/app', TZ: 'UTC' } } },
];

const systemPath = '/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin';

/** A system-crontab entry read after the SHELL and PATH lines at its top. */
function system(line: string, cron: string, user: string, command: string): CorpusLine {
  return { line, expect: { cron, tz: berlin, user, command, env: { PATH: systemPath } } };
}

/** A system crontab (/etc/crontab style, user field after the time fields), read with --tz Europe/Berlin. */
export const systemCrontab: CorpusLine[] = [
  { context: 'SHELL=/bin/sh' },
  { context: `PATH=${systemPath}` },
  system('17 *\t* * *\troot    cd / && run-parts --report /etc/cron.hourly', '17 * * * *', 'root', 'cd / && run-parts --report /etc/cron.hourly'),
  system('25 6\t* * *\troot\ttest -x /usr/sbin/anacron || ( cd / && run-parts --report /etc/cron.daily )', '25 6 * * *', 'root', 'test -x /usr/sbin/anacron || ( cd / && run-parts --report /etc/cron.daily )'),
  system('47 6\t* * 7\troot\ttest -x /usr/sbin/anacron || ( cd / && run-parts --report /etc/cron.weekly )', '47 6 * * 7', 'root', 'test -x /usr/sbin/anacron || ( cd / && run-parts --report /etc/cron.weekly )'),
  system('52 6\t1 * *\troot\ttest -x /usr/sbin/anacron || ( cd / && run-parts --report /etc/cron.monthly )', '52 6 1 * *', 'root', 'test -x /usr/sbin/anacron || ( cd / && run-parts --report /etc/cron.monthly )'),
  system('*/10 * * * * www-data php /var/www/artisan schedule:run', '*/10 * * * *', 'www-data', 'php /var/www/artisan schedule:run'),
  system('30 2 * * * postgres pg_dumpall > /var/backups/all.sql', '30 2 * * *', 'postgres', 'pg_dumpall > /var/backups/all.sql'),
  system('@daily root /usr/sbin/logrotate /etc/logrotate.conf', '@daily', 'root', '/usr/sbin/logrotate /etc/logrotate.conf'),
  { line: '@reboot root /usr/local/bin/warm-cache', refused: /@reboot/ },
  { line: '0 5 * * *', refused: /no user and command|no command/ },
  { line: '0 5 * * * root', refused: /no command/ },
];

export function crontabText(lines: readonly CorpusLine[]): string {
  return `${lines.map((entry) => ('context' in entry ? entry.context : entry.line)).join('\n')}\n`;
}

export function entryCount(lines: readonly CorpusLine[]): number {
  return lines.filter((entry) => !('context' in entry)).length;
}
