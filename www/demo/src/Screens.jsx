// The screen shown instead of the diary when it could not open (the opening
// screen is index.html's own markup, painted before any script).

const HELP = {
  storage_unavailable:
    'This browser does not let the diary keep data on this device (private browsing, or site storage turned off). '
    + 'The diary needs it to keep your sets safe offline.',
  storage_failed: 'The browser’s storage failed while opening the diary. Reloading usually helps; if not, free some space on the device.',
  recovery_required: 'The diary cannot sync on its own any more.',
  bad_input: 'The diary was opened with settings the library refused.',
  closed: 'The diary was closed while it was opening.',
};

export function OpenError({ error }) {
  const code = error?.code ?? 'unknown';
  return (
    <main className="screen error" role="alert">
      <h1>The diary could not open</h1>
      <p>{HELP[code] ?? 'Something unexpected went wrong.'}</p>
      <p className="detail">
        <code>{code}</code> {error?.message ?? String(error)}
      </p>
      <button className="primary" type="button" onClick={() => location.reload()}>Try again</button>
    </main>
  );
}
