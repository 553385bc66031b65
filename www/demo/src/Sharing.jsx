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
 * invite another user with a role (the diary reaches them once they accept),
 * see who is invited still and withdraw it, change a member's role, or take it back. Membership is the server's, so
 * this needs the network; the server's refusal (not an owner, a limit
 * reached…) shows word for word.
 */
export function Sharing({ db, personal, onError, say }) {
  const [members, setMembers] = useState(null);
  // The diary's pending invitations, as the server lists them (one just sent shows at once).
  const [invited, setInvited] = useState([]);
  const [who, setWho] = useState('');
  const [role, setRole] = useState('viewer');
  const [busy, setBusy] = useState(false);

  const load = useCallback(async () => {
    if (!personal) return;
    try {
      const [list, pending] = await Promise.all([db.members(personal), db.invited(personal)]);
      const others = list.members.filter((m) => m.role !== 'owner' || m.user !== ownerOf(personal));
      setMembers(others);
      setInvited(pending.map(({ user, role }) => ({ user, role })));
    } catch {
      setMembers(null); // offline: the list shows once the server answers
    }
  }, [db, personal]);
  useEffect(() => { load(); }, [load]);
  // While someone is invited, look again now and then: accepting tells the invitee's phones, not the owner's.
  const waiting = invited.length > 0;
  useEffect(() => {
    if (!waiting) return undefined;
    const timer = setInterval(load, INVITATIONS_EVERY_MS / 2);
    return () => clearInterval(timer);
  }, [waiting, load]);

  const change = async (user, r) => {
    setBusy(true);
    try {
      const answer = await db.setMember(personal, user, r);
      if (answer.invited) {
        setInvited((all) => [...all.filter((i) => i.user !== user), { user, role: r }]);
        say(`${user} is invited: they see your diary once they accept`);
      } else {
        say(r ? `${user} ${r === 'viewer' ? 'can view' : 'can edit'} your diary` : `${user} no longer sees your diary`);
      }
    } catch (e) {
      onError(e);
      return false;
    } finally {
      setBusy(false);
    }
    // The change is the server's now: the next one need not wait for the list.
    load();
    return true;
  };

  async function share(event) {
    event.preventDefault();
    const name = who.trim();
    if (!name) return;
    // Cleared only if it still holds the name just shared: a name typed
    // while the server answered is the person's next one, not to be lost.
    if (await change(name, role)) setWho((now) => (now.trim() === name ? '' : now));
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
      {invited.length > 0 && (
        <ul className="members">
          {invited.map((i) => (
            <li key={i.user} data-testid="invited" data-user={i.user}>
              <span className="name">{i.user}</span>
              <span className="hint">invited, {i.role === 'viewer' ? 'to view' : 'to edit'}</span>
              <button type="button" className="ghost small" disabled={busy} onClick={() => change(i.user, null).then((ok) => ok && setInvited((all) => all.filter((x) => x.user !== i.user)))}>Withdraw</button>
            </li>
          ))}
        </ul>
      )}
      {members && members.length === 0 && invited.length === 0 && <p className="hint">Only you see your diary.</p>}
    </section>
  );
}

/** How often the invitations are asked for: an invitation pokes no one (it costs the invitee nothing). */
const INVITATIONS_EVERY_MS = 5000;

/**
 * Diaries shared with this person: invitations to accept or decline (nothing
 * of a diary is on the phone before), and the diaries they are in, to leave
 * (its sets then leave the phone).
 */
export function SharedWithMe({ db, shared, onError, say }) {
  const [invitations, setInvitations] = useState([]);
  const [busy, setBusy] = useState(false);

  const load = useCallback(async () => {
    try {
      setInvitations(await db.invitations());
    } catch {
      // offline: asked again later
    }
  }, [db]);
  useEffect(() => {
    load();
    const timer = setInterval(load, INVITATIONS_EVERY_MS);
    return () => clearInterval(timer);
  }, [load]);

  const act = async (what, space, words) => {
    setBusy(true);
    try {
      await db[what](space);
      say(words);
      await load();
    } catch (e) {
      onError(e);
    } finally {
      setBusy(false);
    }
  };

  if (invitations.length === 0 && shared.length === 0) return null;
  return (
    <section className="card sharing" data-testid="shared-with-me" aria-labelledby="shared-title">
      <h2 id="shared-title">Shared with you</h2>
      <ul className="members">
        {invitations.map((i) => (
          <li key={i.space} data-testid="invitation" data-space={i.space}>
            <span className="name">{ownerOf(i.space)}’s diary</span>
            <span className="hint">{i.from} invites you {i.role === 'viewer' ? 'to view' : 'to edit'}</span>
            <button type="button" className="primary small" disabled={busy} onClick={() => act('accept', i.space, `You joined ${ownerOf(i.space)}’s diary`)}>Accept</button>
            <button type="button" className="ghost small" disabled={busy} onClick={() => act('decline', i.space, 'Invitation declined')}>Decline</button>
          </li>
        ))}
        {shared.map((s) => (
          <li key={s.space} data-testid="membership" data-space={s.space}>
            <span className="name">{ownerOf(s.space)}’s diary</span>
            <button type="button" className="ghost small" disabled={busy} onClick={() => act('leave', s.space, `You left ${ownerOf(s.space)}’s diary`)}>Leave</button>
          </li>
        ))}
      </ul>
    </section>
  );
}
