import { useState } from 'preact/hooks';
import { fromInput, presets, rangeOf, toInput, type PresetId, type Range } from './ranges';

export function RangePicker({ range, nowMs, onChange }: { range: Range; nowMs: number; onChange: (range: Range) => void }) {
  const [since, setSince] = useState(toInput(range.sinceMs));
  const [until, setUntil] = useState(toInput(range.untilMs));
  const choose = (preset: PresetId) => {
    const next = rangeOf(preset, nowMs);
    setSince(toInput(next.sinceMs));
    setUntil(toInput(next.untilMs));
    onChange(next);
  };
  return (
    <form class="filters" onSubmit={(event) => {
      event.preventDefault();
      const sinceMs = fromInput(since);
      const untilMs = fromInput(until);
      if (sinceMs !== null && untilMs !== null && untilMs > sinceMs) onChange({ sinceMs, untilMs });
    }}>
      <label>Range <select onChange={(event) => choose(event.currentTarget.value as PresetId)}>
        <option value="">choose…</option>
        {presets.map((preset) => <option key={preset.id} value={preset.id}>{preset.label}</option>)}
      </select></label>
      <label>From <input type="datetime-local" value={since} onInput={(e) => setSince(e.currentTarget.value)} /></label>
      <label>To <input type="datetime-local" value={until} onInput={(e) => setUntil(e.currentTarget.value)} /></label>
      <button type="submit">Show</button>
    </form>
  );
}
