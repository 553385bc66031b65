// An app as a newcomer builds it with Vite: the package by its name, the worker by the plugin.
import { Marksync } from 'marksync';

window.started = (async () => {
  const user = new URLSearchParams(location.search).get('user');
  await navigator.serviceWorker.register('/service-worker.js', { type: 'module' });
  await navigator.serviceWorker.ready;
  window.db = await Marksync.open({ endpoint: location.origin, token: `dev:${user}`, name: 'vite-app', autoSync: false });
  return true;
})();
