/**
 * The tickler web UI: sign in with an API key (kept for this tab), then hash routes:
 * #/ overview, #/night, #/jobs, #/jobs/{id}, #/runs/{id}, #/dlq. The API is its only data source.
 */
import { render } from 'preact';
import { useEffect, useMemo, useState } from 'preact/hooks';
import './styles.css';
import { ApiError, api, forgetJobs, session, type Who } from './api';
import { OverviewPage } from './overview';
import { JobsPage } from './jobs';
import { JobPage } from './job';
import { RunPage } from './run';
import { NightPage } from './night';
import { DlqPage } from './dlq';

type WhoNow = Who & { now: string };

function useHash(): string {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const changed = () => setHash(location.hash);
    addEventListener('hashchange', changed);
    return () => removeEventListener('hashchange', changed);
  }, []);
  return hash;
}

function SignIn({ onSignedIn, problem }: { onSignedIn: (who: WhoNow) => void; problem: string | null }) {
  const [key, setKey] = useState('');
  const [error, setError] = useState<string | null>(problem);
  const submit = async (event: Event) => {
    event.preventDefault();
    session.setKey(key.trim());
    session.setTeam(null);
    try {
      onSignedIn(await api<WhoNow>('GET', '/v1/whoami'));
    } catch (caught) {
      session.setKey(null);
      setError(caught instanceof ApiError && caught.status === 401 ? 'That key is not known to this server.' : String(caught));
    }
  };
  return (
    <main class="signin">
      <form onSubmit={(event) => void submit(event)}>
        <h1>tickler</h1>
        <p>Sign in with an API key. It is kept for this browser tab only and sent as the bearer of every request.</p>
        <label>API key <input type="password" name="key" autoComplete="off" value={key} onInput={(e) => setKey(e.currentTarget.value)} /></label>
        {error !== null && <p class="error" role="alert">{error}</p>}
        <button class="primary" type="submit" disabled={key.trim() === ''}>Sign in</button>
      </form>
    </main>
  );
}

function TeamPicker({ onChange }: { onChange: () => void }) {
  const [teams, setTeams] = useState<string[]>([]);
  useEffect(() => {
    api<{ items: string[] }>('GET', '/v1/teams').then((answer) => setTeams(answer.items), () => setTeams([]));
  }, []);
  return (
    <label class="team">Team <select value={session.team() ?? ''} onChange={(event) => {
      session.setTeam(event.currentTarget.value === '' ? null : event.currentTarget.value);
      forgetJobs();
      onChange();
    }}>
      <option value="">all teams</option>
      {teams.map((team) => <option key={team} value={team}>{team}</option>)}
    </select></label>
  );
}

function Page({ hash, nowMs }: { hash: string; nowMs: number }) {
  const path = hash.replace(/^#/, '') || '/';
  const [, section, id] = path.split('/').map((part) => decodeURIComponent(part));
  switch (section) {
    case undefined:
    case '':
      return <OverviewPage nowMs={nowMs} />;
    case 'night':
      return <NightPage nowMs={nowMs} />;
    case 'jobs':
      return id === undefined || id === '' ? <JobsPage nowMs={nowMs} /> : <JobPage key={id} jobId={id} nowMs={nowMs} />;
    case 'runs':
      return <RunPage key={id} runId={id ?? ''} />;
    case 'dlq':
      return <DlqPage />;
    default:
      return <p>No such page. <a href="#/">Overview</a></p>;
  }
}

function App() {
  const hash = useHash();
  const [who, setWho] = useState<WhoNow | null>(null);
  const [checked, setChecked] = useState(false);
  const [problem, setProblem] = useState<string | null>(null);
  const [offsetMs, setOffsetMs] = useState(0);
  const [generation, setGeneration] = useState(0);
  const signedIn = (answer: WhoNow) => {
    // The server's clock (virtual under --virtual-clock) says what "now" and "last night" are.
    setOffsetMs(Date.parse(answer.now) - Date.now());
    setWho(answer);
  };
  useEffect(() => {
    // With a key from earlier in this tab, or on an open server, no sign-in is needed.
    api<WhoNow>('GET', '/v1/whoami').then(signedIn, (caught: unknown) => {
      if (session.key() !== null) setProblem('The key of this tab is no longer accepted.');
      session.setKey(null);
      if (!(caught instanceof ApiError && caught.status === 401)) setProblem(String(caught));
    }).finally(() => setChecked(true));
  }, []);
  // "Now" is fixed per page shown, so a page does not reload itself on every render.
  const nowMs = useMemo(() => Date.now() + offsetMs, [hash, generation, offsetMs]);
  if (!checked) return <p class="muted">Loading…</p>;
  if (who === null) return <SignIn onSignedIn={signedIn} problem={problem} />;
  const nav = [['#/', 'Overview'], ['#/night', 'Last night'], ['#/jobs', 'Jobs'], ['#/dlq', 'Dead letters']] as const;
  const current = (href: string) => (href === '#/' ? hash === '' || hash === '#/' : hash.startsWith(href));
  return (
    <>
      <header>
        <a class="brand" href="#/">tickler</a>
        <nav>{nav.map(([href, label]) => <a key={href} href={href} class={current(href) ? 'current' : ''}>{label}</a>)}</nav>
        <span class="who">{who.open ? 'open server (no keys)' : who.admin ? 'admin' : `team ${who.team}`}</span>
        <button class="link" onClick={() => setGeneration((n) => n + 1)}>Refresh</button>
        {who.admin && <TeamPicker onChange={() => setGeneration((n) => n + 1)} />}
        {!who.open && <button class="link" onClick={() => {
          session.setKey(null);
          session.setTeam(null);
          forgetJobs();
          setWho(null);
        }}>Sign out</button>}
      </header>
      <main key={`${generation}`}>
        <Page hash={hash} nowMs={nowMs} />
      </main>
    </>
  );
}

render(<App />, document.getElementById('app')!);
