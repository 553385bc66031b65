import { useRejections } from './hooks.js';
import { describeFields, formatKg, formatReps } from './format.js';
import { ownerOf } from './Sharing.jsx';

/**
 * Every change the server refused, with its reason word for word, until
 * dismissed. A refused new set never existed on the server, so it is not in
 * the list of sets: this panel is where the person reads why.
 */
export function Rejections({ db }) {
  const list = useRejections(db);
  if (!list.length) return null;
  const dismissAll = () => Promise.all(list.map((r) => db.dismiss(r.op.opId)));
  return (
    <section className="card rejections" data-testid="rejections" aria-labelledby="rej-title">
      <div className="head">
        <h2 id="rej-title">Not saved <span className="count">{list.length}</span></h2>
        {list.length > 1 && <button type="button" className="ghost small" onClick={dismissAll}>Dismiss all</button>}
      </div>
      <p className="hint">The server refused these changes and kept its own version. A refused new set is not in your list.</p>
      <ul>
        {list.map((r) => {
          const row = db.row(r.op.table, r.op.rowId, { space: r.op.space });
          const what = row
            ? `Edit of ${row.exercise} · ${formatKg(row.weightKg)} kg × ${formatReps(row.reps)}: ${describeFields(r.op.fields, '→ ')}`
            : r.op.space
              ? `In ${ownerOf(r.op.space)}’s diary: ${describeFields(r.op.fields)}`
              : `New set: ${describeFields(r.op.fields)}`;
          return (
            <li key={r.op.opId}>
              <p className="reason">{r.reason}</p>
              <div className="foot">
                <p className="what">{what}</p>
                <button type="button" className="ghost small" onClick={() => db.dismiss(r.op.opId)}>Dismiss</button>
              </div>
            </li>
          );
        })}
      </ul>
    </section>
  );
}
