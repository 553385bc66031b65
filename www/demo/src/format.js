const kg = new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 });

export const formatKg = (v) => (typeof v === 'number' ? kg.format(v) : '—');
export const formatReps = (v) => (typeof v === 'number' ? String(v) : '—');

/** A short name for a device: the first 8 hex digits of its UUID. */
export const shortDevice = (id) => String(id).replaceAll('-', '').slice(0, 8);

/** A number typed by a person ("62,5" too), or null. */
export function parseNumber(text) {
  const t = String(text).trim().replace(',', '.');
  if (t === '') return null;
  const n = Number(t);
  return Number.isFinite(n) ? n : null;
}

/** rowIds are `<deviceId>-<n>` (docs/protocol.md §1): a device's rows in the order it made them. */
function rowOrder(id) {
  const i = id.lastIndexOf('-');
  const n = Number(id.slice(i + 1));
  return i > 0 && Number.isFinite(n) ? [id.slice(0, i), n] : [id, 0];
}

/**
 * The rows grouped by exercise (A→Z, case-insensitive); in a group, each
 * device's sets in the order that device added them.
 */
export function groupByExercise(rows) {
  const groups = new Map();
  for (const row of rows) {
    const name = typeof row.exercise === 'string' && row.exercise.trim() ? row.exercise.trim() : 'Unnamed';
    const key = name.toLocaleLowerCase();
    if (!groups.has(key)) groups.set(key, { key, name, rows: [] });
    groups.get(key).rows.push(row);
  }
  const list = [...groups.values()].sort((a, b) => a.key.localeCompare(b.key));
  for (const g of list) {
    g.rows.sort((a, b) => {
      const [da, na] = rowOrder(a._id);
      const [dbb, nb] = rowOrder(b._id);
      return da === dbb ? na - nb : da < dbb ? -1 : 1;
    });
  }
  return list;
}

/** The fields of an op, for people: "reps 500", "Squat · 80 kg × 5", "reps → 500" (with `to = '→ '`). */
export function describeFields(fields, to = '') {
  const { exercise, weightKg, reps, ...rest } = fields;
  const parts = [];
  if (exercise !== undefined && weightKg !== undefined && reps !== undefined && !to) {
    parts.push(`${exercise} · ${formatKg(weightKg)} kg × ${JSON.stringify(reps)}`);
  } else {
    if (exercise !== undefined) parts.push(`exercise ${to}${JSON.stringify(exercise)}`);
    if (weightKg !== undefined) parts.push(`weight ${to}${typeof weightKg === 'number' ? `${formatKg(weightKg)} kg` : JSON.stringify(weightKg)}`);
    if (reps !== undefined) parts.push(`reps ${to}${JSON.stringify(reps)}`);
  }
  for (const [k, v] of Object.entries(rest)) {
    if (k === '_deleted') parts.push(v ? 'delete' : 'restore');
    else parts.push(`${k} ${to}${JSON.stringify(v)}`);
  }
  return parts.join(', ');
}
