import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import { Marksync } from 'marksync';
import { App } from './App.jsx';
import { OpenError } from './Screens.jsx';
import './styles.css';

const USER_KEY = 'workout-user';
const USER_RE = /^[A-Za-z0-9._-]{1,64}$/;

/** The person: `?user=` (remembered), else the remembered one, else "demo". The server runs with --dev-auth. */
function pickUser() {
  const fromUrl = new URLSearchParams(location.search).get('user')?.trim();
  try {
    if (fromUrl && USER_RE.test(fromUrl)) {
      localStorage.setItem(USER_KEY, fromUrl);
      return fromUrl;
    }
    const stored = localStorage.getItem(USER_KEY);
    if (stored && USER_RE.test(stored)) return stored;
  } catch { /* storage blocked: fall through */ }
  return fromUrl && USER_RE.test(fromUrl) ? fromUrl : 'demo';
}

const user = pickUser();
// index.html paints the first screen; React takes over once the diary is open.
const root = createRoot(document.getElementById('root'));

Marksync.open({ endpoint: location.origin, token: 'dev:' + user, name: 'workout-' + user }).then(
  (db) => {
    window.db = db; // handy in the console
    root.render(<StrictMode><App db={db} user={user} /></StrictMode>);
    registerWorker();
  },
  (error) => {
    console.error(error);
    root.render(<OpenError error={error} />);
  },
);

/**
 * The worker is registered once the diary is open: its install fetches the
 * app shell and the sync library again, which must not compete with the
 * first visit's own downloads.
 */
function registerWorker() {
  if (!import.meta.env.PROD || !('serviceWorker' in navigator)) return;
  navigator.serviceWorker.register(`/service-worker.js?user=${encodeURIComponent(user)}`, { type: 'module' }).catch((e) => {
    console.warn('service worker not registered:', e);
  });
}
