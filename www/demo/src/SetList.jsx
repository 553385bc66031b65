import { useMemo, useState } from 'react';
import { useRowStatus } from 'marksync/react';
import { formatKg, formatReps, groupByExercise, parseNumber } from './format.js';
import { CheckIcon, PencilIcon, TrashIcon } from './icons.jsx';

/**
 * Sets grouped by exercise (A→Z); in a group, in the order they were added on
 * each device. With `title`, a diary someone shared (`role`: what the person
 * may do there; a viewer gets no edit buttons, and the device would refuse
 * the edit anyway, in the server's words).
 */
export function SetList({ db, rows, highlight, onDelete, onError, title, role }) {
  const groups = useMemo(() => groupByExercise(rows), [rows]);
  const id = title ? `sets-${title.replace(/[^A-Za-z0-9]/g, '-')}` : 'sets-title';
  const readOnly = role === 'viewer';
  return (
    <section className={`sets${title ? ' shared' : ''}`} aria-labelledby={id} data-testid={title ? 'shared-diary' : 'own-diary'}>
      <h2 id={id}>
        {title ?? 'Sets'} <span className="count">{rows.length}</span>
        {role && <span className={`role ${role}`}>{readOnly ? 'view only' : 'you can edit'}</span>}
      </h2>
      {title && rows.length === 0 ? (
        <p className="empty">Nothing here yet.</p>
      ) : rows.length === 0 ? (
        <p className="empty">
          No sets yet. Log one above: it is saved on this phone at once, and reaches the server when there is a network.
        </p>
      ) : (
        groups.map((g) => (
          <div className="group" key={g.key} data-exercise={g.name}>
            <h3>
              {g.name} <span>{g.rows.length === 1 ? '1 set' : `${g.rows.length} sets`}</span>
            </h3>
            <ul>
              {g.rows.map((row) => (
                <SetRow
                  key={`${row._space ?? ''}/${row._id}`}
                  db={db}
                  row={row}
                  fresh={row._id === highlight}
                  readOnly={readOnly}
                  onDelete={onDelete}
                  onError={onError}
                />
              ))}
            </ul>
          </div>
        ))
      )}
    </section>
  );
}

function SetRow({ db, row, fresh, readOnly, onDelete, onError }) {
  const status = useRowStatus(db, 'sets', row._id, { space: row._space });
  const [editing, setEditing] = useState(false);
  if (editing) return <EditSet db={db} row={row} onDone={() => setEditing(false)} onError={onError} />;
  return (
    <li className={`set${fresh ? ' fresh' : ''}`} data-testid="set-row" data-row-id={row._id} data-phase={status.phase}>
      <div className="set-main">
        <p className="figures">
          <span className="num">{formatKg(row.weightKg)}</span>
          <span className="u">kg</span>
          <span className="x" aria-label="times">×</span>
          <span className="num">{formatReps(row.reps)}</span>
          <span className="u">reps</span>
        </p>
        <StatusBadge status={status} />
      </div>
      {!readOnly && (
        <div className="actions">
          <button type="button" className="icon" aria-label="Edit set" title="Edit" onClick={() => setEditing(true)}>
            <PencilIcon />
          </button>
          <button type="button" className="icon" aria-label="Delete set" title="Delete" onClick={() => onDelete(row)}>
            <TrashIcon />
          </button>
        </div>
      )}
      {status.phase === 'rejected' && <Refusal db={db} row={row} status={status} />}
      {status.phase === 'recovery-required' && <NeedsAttention db={db} status={status} onError={onError} />}
    </li>
  );
}

/** A row's status in words a person understands (the same in every tab and after a reload). */
export function statusWords(status) {
  switch (status.phase) {
    case 'synced':
      return 'saved on the server';
    case 'pending':
      return 'saved on this phone — waiting to send';
    case 'awaiting-ack':
      return status.attempts > 1 ? `sending, attempt ${status.attempts}` : 'sending';
    case 'unknown-outcome':
      return `not confirmed yet — retrying, attempt ${status.attempts + 1}`;
    case 'rejected':
      return 'refused by the server';
    case 'recovery-required':
      return status.code === 'schema_too_new' ? 'waiting for the server to be updated' : 'needs attention';
    default:
      return status.phase;
  }
}

function StatusBadge({ status }) {
  return (
    <span className={`badge ${status.phase}`} data-testid="row-status">
      {status.phase === 'synced' ? <CheckIcon /> : <span className="dot" aria-hidden="true" />}
      {statusWords(status)}
    </span>
  );
}

/** Sync waits for a person (or for the server): say why, and offer what helps. */
function NeedsAttention({ db, status, onError }) {
  const [busy, setBusy] = useState(false);
  const act = (f) => async () => {
    setBusy(true);
    try {
      await f();
    } catch (e) {
      onError?.(e);
    } finally {
      setBusy(false);
    }
  };
  const exhausted = status.code === 'retries_exhausted';
  return (
    <div className="refusal" role="status" data-testid="needs-attention">
      <p>
        <span className="label">{exhausted ? 'Needs attention:' : 'Sync is waiting:'}</span> <span className="reason">{status.reason}</span>
      </p>
      {exhausted && (
        <p className="refusal-actions">
          <button type="button" className="ghost" disabled={busy} onClick={act(() => db.retry())}>
            Retry
          </button>
          <button type="button" className="ghost" disabled={busy} onClick={act(() => db.reconcile())}>
            Check with server
          </button>
        </p>
      )}
    </div>
  );
}

/** The server's reason, word for word, and a way to say "seen". */
function Refusal({ db, row, status }) {
  async function dismiss() {
    const mine = db.rejections().filter((r) => r.op.table === 'sets' && r.op.rowId === row._id && (r.op.space ?? undefined) === row._space);
    const shown = mine.filter((r) => r.reason === status.reason).at(-1) ?? mine.at(-1);
    if (shown) await db.dismiss(shown.op.opId);
  }
  return (
    <div className="refusal" role="status">
      <p>
        <span className="label">Not saved. The server said:</span> <span className="reason">{status.reason}</span>
      </p>
      <p className="kept">Showing what the server kept.</p>
      <button type="button" className="ghost small" onClick={dismiss}>Dismiss</button>
    </div>
  );
}

/** Inline edit: only the fields that changed are sent. */
function EditSet({ db, row, onDone, onError }) {
  const [exercise, setExercise] = useState(String(row.exercise ?? ''));
  const [weight, setWeight] = useState(row.weightKg == null ? '' : String(row.weightKg));
  const [reps, setReps] = useState(row.reps == null ? '' : String(row.reps));
  const [problem, setProblem] = useState(null);

  // Only the fields that changed; what the server would say of the row after them.
  const changedFields = () => {
    const changed = {};
    const name = exercise.trim();
    const weightKg = parseNumber(weight);
    const count = parseNumber(reps);
    if (name && name !== row.exercise) changed.exercise = name;
    if (weightKg !== null && weightKg !== row.weightKg) changed.weightKg = weightKg;
    if (count !== null && count !== row.reps) changed.reps = count;
    return changed;
  };
  const where = { space: row._space };
  const refusal = db.check('sets', row._id, changedFields(), where);

  async function save(event) {
    event.preventDefault();
    const name = exercise.trim();
    const weightKg = parseNumber(weight);
    const count = parseNumber(reps);
    if (!name) return setProblem('Name the exercise.');
    if (weightKg === null) return setProblem('Type the weight in kg.');
    if (count === null) return setProblem('Type the number of reps.');
    if (refusal) return;
    const changed = changedFields();
    try {
      if (Object.keys(changed).length) await db.change('sets', row._id, changed, where);
      onDone();
    } catch (e) {
      if (e.code === 'invalid') setProblem(e.reason);
      else onError(e);
    }
  }

  return (
    <li className="set editing" data-testid="set-row" data-row-id={row._id}>
      <form className="edit" onSubmit={save} onKeyDown={(e) => e.key === 'Escape' && onDone()} noValidate>
        <label className="field">
          <span>Exercise</span>
          <input name="exercise" autoComplete="off" value={exercise} onChange={(e) => setExercise(e.target.value)} />
        </label>
        <div className="pair">
          <label className="field">
            <span>Weight</span>
            <span className="unit">
              <input name="weightKg" inputMode="decimal" autoComplete="off" value={weight} onChange={(e) => setWeight(e.target.value)} />
              <span aria-hidden="true">kg</span>
            </span>
          </label>
          <label className="field">
            <span>Reps</span>
            <input name="reps" inputMode="numeric" autoComplete="off" autoFocus value={reps} onChange={(e) => setReps(e.target.value)} />
          </label>
        </div>
        {refusal && <p className="form-problem" role="alert" data-field={refusal.field ?? ''}>{refusal.reason}</p>}
        {!refusal && problem && <p className="form-problem" role="alert">{problem}</p>}
        <div className="edit-actions">
          <button type="button" className="ghost" onClick={onDone}>Cancel</button>
          <button type="submit" className="primary" disabled={!!refusal}>Save</button>
        </div>
      </form>
    </li>
  );
}
