import { useCallback, useEffect, useState } from 'react';

const ROLES = [
  ['viewer', 'can view'],
  ['editor', 'can edit'],
];

/** A space's owner, for people: `~sam` is Sam's diary. */
export function ownerOf(space) {
  return space?.startsWith('~') ? space.slice(1) : space;
}

/**
 * Sharing the diary: the diary is the person's own space (`~<user>`); they
 * give another user a role in it, change it, or take it back. Membership is
 * the server's, so this needs the network; the server's refusal (not an
 * owner, no such user name shape…) shows word for word.
 */
export function Sharing({ db, personal, onError, say }) {
  const [members, setMembers] = useState(null);
  const [who, setWho] = useState('');
  const [role, setRole] = useState('viewer');
  const [busy, setBusy] = useState(false);

  const load = useCallback(async () => {
    if (!personal) return;
    try {
      const list = await db.members(personal);
      setMembers(list.members.filter((m) => m.role !== 'owner' || m.user !== ownerOf(personal)));
    } catch {
      setMembers(null); // offline: the list shows once the server answers
    }
  }, [db, personal]);
  useEffect(() => { load(); }, [load]);

  const change = async (user, r) => {
    setBusy(true);
    try {
      await db.setMember(personal, user, r);
      say(r ? `${user} ${r === 'viewer' ? 'can view' : 'can edit'} your diary` : `${user} no longer sees your diary`);
      await load();
    } catch (e) {
      onError(e);
    } finally {
      setBusy(false);
    }
  };

  async function share(event) {
    event.preventDefault();
    const name = who.trim();
    if (!name) return;
    await change(name, role);
    setWho('');
  }

  if (!personal) {
    return null; // the first sync names the diary
  }
  return (
    <section className="card sharing" data-testid="sharing" aria-labelledby="share-title">
      <h2 id="share-title">Share your diary</h2>
      <form className="share" onSubmit={share}>
        <input name="user" aria-label="User name" placeholder="User name" autoComplete="off" value={who} onChange={(e) => setWho(e.target.value)} />
        <select name="role" aria-label="Role" value={role} onChange={(e) => setRole(e.target.value)}>
          {ROLES.map(([r, words]) => <option key={r} value={r}>{words}</option>)}
        </select>
        <button type="submit" className="primary" disabled={busy || !who.trim()}>Share</button>
      </form>
      {members && members.length > 0 && (
        <ul className="members">
          {members.map((m) => (
            <li key={m.user} data-testid="member" data-user={m.user}>
              <span className="name">{m.user}</span>
              <select aria-label={`Role of ${m.user}`} value={m.role} disabled={busy} onChange={(e) => change(m.user, e.target.value)}>
                {ROLES.map(([r, words]) => <option key={r} value={r}>{words}</option>)}
              </select>
              <button type="button" className="ghost small" disabled={busy} onClick={() => change(m.user, null)}>Revoke</button>
            </li>
          ))}
        </ul>
      )}
      {members && members.length === 0 && <p className="hint">Only you see your diary.</p>}
    </section>
  );
}
