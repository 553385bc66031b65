import { useConflicts } from 'marksync/react';
import { formatKg, shortDevice } from './format.js';
import { ownerOf } from './Sharing.jsx';

const time = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit' });

/** A value of a field as a person reads it: "6 reps", "80 kg", "“squat”". */
function said(field, value) {
  if (value === null || value === undefined) return 'nothing';
  if (field === 'reps') return `${value} reps`;
  if (field === 'weightKg') return typeof value === 'number' ? `${formatKg(value)} kg` : JSON.stringify(value);
  return typeof value === 'string' ? `“${value}”` : JSON.stringify(value);
}

/** The device an opId was born on (`<deviceId>:<n>`, docs/protocol.md §1). */
const deviceOf = (opId) => opId.slice(0, opId.lastIndexOf(':'));

/** Whose device wrote `theirs`: "another of your devices (1a2b3c4d)", "ann’s device (1a2b3c4d)". */
function whose(theirs, user) {
  const dev = shortDevice(deviceOf(theirs.opId));
  return theirs.user && theirs.user !== user ? `${theirs.user}’s device ${dev}` : `your other device ${dev}`;
}

/**
 * Every edit of this device that a concurrent edit replaced (docs/protocol.md
 * §2a), in words, until the person chooses: **Keep mine** records their value
 * again as a new edit (which wins: it is made after seeing theirs), **OK**
 * accepts what stands. Nothing a person typed disappears without a word.
 */
export function Conflicts({ db, user }) {
  const list = useConflicts(db);
  if (!list.length) return null;
  const keep = async (c) => {
    await db.change(c.table, c.rowId, { [c.field]: c.mine.value }, { space: c.space });
    await db.dismissConflict(c.id);
  };
  return (
    <section className="card rejections conflicts" data-testid="conflicts" aria-labelledby="conflicts-title">
      <div className="head">
        <h2 id="conflicts-title">Replaced <span className="count">{list.length}</span></h2>
      </div>
      <p className="hint">Someone changed these at the same time as you, and their change came out on top.</p>
      <ul>
        {list.map((c) => {
          const row = db.row(c.table, c.rowId, { space: c.space });
          const which = row ? `${row.exercise ?? 'A set'}` : 'A set';
          const where = c.space ? ` in ${ownerOf(c.space)}’s diary` : '';
          return (
            <li key={c.id}>
              <p className="reason">
                {`${which}${where}: your ${said(c.field, c.mine.value)} ${c.field === 'reps' || c.field === 'weightKg' ? 'were' : 'was'} replaced by ${c.field === 'reps' && typeof c.theirs.value === 'number' ? c.theirs.value : said(c.field, c.theirs.value)} from ${whose(c.theirs, user)} (${time.format(c.theirs.at)})`}
              </p>
              <div className="foot">
                <button type="button" className="small" onClick={() => keep(c)}>Keep mine</button>
                <button type="button" className="ghost small" onClick={() => db.dismissConflict(c.id)}>OK</button>
              </div>
            </li>
          );
        })}
      </ul>
    </section>
  );
}
