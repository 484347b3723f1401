/** Small shared pieces: status badges, the confirmation dialog, a uPlot chart, the occurrence strip. */
import type { ComponentChildren } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import type { Occurrence } from './api';
import { lag, utc } from './format';

export function Status({ status }: { status: string }) {
  return <span class={`badge st-${status}`}>{status.replace(/_/g, ' ')}</span>;
}

export function Loading({ error, children }: { error: string | null; children?: ComponentChildren }) {
  if (error !== null) return <p class="error" role="alert">{error}</p>;
  return <>{children ?? <p class="muted">Loading…</p>}</>;
}

/** A button that asks before it acts; the question names what will happen. */
export function ConfirmButton({ label, question, onConfirm, danger, disabled }: {
  label: string; question: string; onConfirm: () => Promise<unknown>; danger?: boolean; disabled?: boolean;
}) {
  const [open, setOpen] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const run = async () => {
    setBusy(true);
    setError(null);
    try {
      await onConfirm();
      setOpen(false);
    } catch (caught) {
      setError(caught instanceof Error ? caught.message : String(caught));
    } finally {
      setBusy(false);
    }
  };
  return (
    <>
      <button class={danger === true ? 'danger' : ''} disabled={disabled} onClick={() => setOpen(true)}>{label}</button>
      {open && (
        <div class="modal-back" onClick={() => !busy && setOpen(false)}>
          <div class="modal" role="dialog" aria-label={label} onClick={(event) => event.stopPropagation()}>
            <p>{question}</p>
            {error !== null && <p class="error" role="alert">{error}</p>}
            <div class="actions">
              <button onClick={() => setOpen(false)} disabled={busy}>Keep as is</button>
              <button class={danger === true ? 'danger' : 'primary'} onClick={() => void run()} disabled={busy}>Confirm: {label}</button>
            </div>
          </div>
        </div>
      )}
    </>
  );
}

/** A uPlot chart sized to its box; series values in `data` (x first, in seconds). */
export function Chart({ data, series, bars, height = 150, yLabel }: {
  data: (number | null)[][]; series: { label: string; stroke: string; fill?: string }[]; bars?: boolean; height?: number;
  yLabel?: string;
}) {
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const element = box.current;
    if (element === null) return undefined;
    const options: uPlot.Options = {
      width: Math.max(200, element.clientWidth),
      height,
      legend: { show: series.length > 1 },
      cursor: { drag: { x: false, y: false } },
      axes: [{}, { label: yLabel, size: 60 }],
      series: [{}, ...series.map((s) => ({
        label: s.label, stroke: s.stroke, fill: s.fill, width: bars === true ? 0 : 2, points: { show: false },
        ...(bars === true ? { paths: uPlot.paths.bars!({ size: [0.8, 40] }) } : {}),
      }))],
    };
    const plot = new uPlot(options, data as uPlot.AlignedData, element);
    const resize = new ResizeObserver(() => plot.setSize({ width: Math.max(200, element.clientWidth), height }));
    resize.observe(element);
    return () => {
      resize.disconnect();
      plot.destroy();
    };
  }, [data, series, bars, height, yLabel]);
  return <div class="chart" ref={box} />;
}

/** Occurrences as marks on a time line, coloured by what became of them; each links to its run. */
export function Strip({ occurrences, sinceMs, untilMs }: { occurrences: Occurrence[]; sinceMs: number; untilMs: number }) {
  const span = Math.max(1, untilMs - sinceMs);
  return (
    <div class="strip" aria-label="timeline">
      {occurrences.map((occurrence) => {
        const at = Date.parse(occurrence.scheduled_at);
        const left = Math.min(100, Math.max(0, ((at - sinceMs) / span) * 100));
        const title = `${utc(occurrence.scheduled_at)}: ${occurrence.status}${occurrence.late ? ' (late)' : ''}`
          + `${occurrence.fire_lag_s === null ? '' : `, fire lag ${lag(occurrence.fire_lag_s)}`}`
          + `${occurrence.last_error === null ? '' : ` — ${occurrence.last_error}`}`;
        const mark = <span class={`mark st-${occurrence.status}${occurrence.late ? ' late' : ''}`} style={{ left: `${left}%` }} title={title} />;
        return occurrence.run_id === null ? <span key={occurrence.scheduled_at}>{mark}</span>
          : <a key={occurrence.run_id} href={`#/runs/${encodeURIComponent(occurrence.run_id)}`}>{mark}</a>;
      })}
    </div>
  );
}

export function Pager({ hasPrevious, next, onFirst, onNext }: {
  hasPrevious: boolean; next: string | null; onFirst: () => void; onNext: (cursor: string) => void;
}) {
  return (
    <div class="pager">
      <button disabled={!hasPrevious} onClick={onFirst}>First page</button>
      <button disabled={next === null} onClick={() => next !== null && onNext(next)}>Next page</button>
    </div>
  );
}

/** Loads when `deps` change; answers [value, error, reload]. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): [T | null, string | null, () => void] {
  const [value, setValue] = useState<T | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let current = true;
    setError(null);
    load().then((loaded) => current && setValue(loaded), (caught: unknown) => {
      if (current) setError(caught instanceof Error ? caught.message : String(caught));
    });
    return () => {
      current = false;
    };
  }, [...deps, tick]);
  return [value, error, () => setTick((n) => n + 1)];
}
