import { useMemo, useState } from 'react';
import { parseNumber } from './format.js';

/**
 * Logs a set. The rules (ranges, whole numbers, lengths) are the server's:
 * the form asks `db.check()`, which answers offline from the schema the
 * device fetched from the server, in the server's own words, as the person
 * types — and "Add set" is only offered for a set the server would take.
 * Before the device has ever reached the server it knows no schema: then a
 * refused set comes back in "Not saved", as before.
 */
export function AddSetForm({ db, rows, onAdded, onError }) {
  const [exercise, setExercise] = useState('');
  const [weight, setWeight] = useState('');
  const [reps, setReps] = useState('');
  const [problem, setProblem] = useState(null);
  const [busy, setBusy] = useState(false);

  const names = useMemo(
    () => [...new Set(rows.map((r) => r.exercise).filter((x) => typeof x === 'string'))].sort((a, b) => a.localeCompare(b)),
    [rows],
  );

  // What is typed so far, as fields; what the server would say of it.
  const typed = {};
  if (exercise.trim()) typed.exercise = exercise.trim();
  if (weight.trim() && parseNumber(weight) !== null) typed.weightKg = parseNumber(weight);
  if (reps.trim() && parseNumber(reps) !== null) typed.reps = parseNumber(reps);
  const verdict = db.check('sets', 'new-set', typed);
  // "Missing fields" is not news while the person is still typing.
  const refusal = verdict && verdict.code !== 'missing_fields' ? verdict : null;
  const complete = 'exercise' in typed && 'weightKg' in typed && 'reps' in typed;
  const unreadable = (weight.trim() && parseNumber(weight) === null && 'Type the weight in kg, e.g. 60 or 62.5.')
    || (reps.trim() && parseNumber(reps) === null && 'Type the number of reps, e.g. 5.') || null;

  async function submit(event) {
    event.preventDefault();
    const name = exercise.trim();
    const weightKg = parseNumber(weight);
    const count = parseNumber(reps);
    if (!name) return setProblem('Name the exercise, e.g. Squat.');
    if (weightKg === null) return setProblem('Type the weight in kg, e.g. 60 or 62.5.');
    if (count === null) return setProblem('Type the number of reps, e.g. 5.');
    if (refusal) return;
    setProblem(null);
    setBusy(true);
    try {
      const id = db.newRowId();
      await db.change('sets', id, { exercise: name, weightKg, reps: count });
      onAdded(id, { exercise: name, weightKg, reps: count });
      // Exercise, weight and reps stay: the next set is often the same.
    } catch (e) {
      if (e.code === 'invalid') setProblem(e.reason);
      else onError(e);
    } finally {
      setBusy(false);
    }
  }

  return (
    <form className="card add" onSubmit={submit} noValidate aria-labelledby="add-title">
      <h2 id="add-title">Log a set</h2>
      <label className="field">
        <span>Exercise</span>
        <input
          name="exercise" list="exercise-names" autoComplete="off" autoCapitalize="sentences" enterKeyHint="next"
          placeholder="e.g. Squat" maxLength={200} value={exercise} onChange={(e) => setExercise(e.target.value)}
        />
      </label>
      <div className="add-row">
        <label className="field">
          <span>Weight</span>
          <span className="unit">
            <input name="weightKg" inputMode="decimal" autoComplete="off" placeholder="60" value={weight} onChange={(e) => setWeight(e.target.value)} />
            <span aria-hidden="true">kg</span>
          </span>
        </label>
        <label className="field">
          <span>Reps</span>
          <input name="reps" inputMode="numeric" autoComplete="off" enterKeyHint="done" placeholder="5" value={reps} onChange={(e) => setReps(e.target.value)} />
        </label>
        <button className="primary" type="submit" disabled={busy || !!refusal || !complete}>Add set</button>
      </div>
      {refusal && <p className="form-problem" role="alert" data-field={refusal.field ?? ''}>{refusal.reason}</p>}
      {!refusal && (unreadable || problem) && <p className="form-problem" role="alert">{unreadable || problem}</p>}
      <datalist id="exercise-names">
        {names.map((n) => <option key={n} value={n} />)}
      </datalist>
    </form>
  );
}
