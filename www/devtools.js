// marksync/devtools: an inspector for the whole sync of one database, live,
// framework-free, apart from the main bundle (import it only where you want
// it). `mountInspector(db, element)` or `<marksync-inspector>` (set its `db`
// property). Everything it shows comes from `db.diagnostics()`, which is
// stored state shared by every tab and the Service Worker: a cycle the worker
// ran shows in a page. "Export diagnostics" saves one JSON file to attach to a
// bug report; it holds no token (the library never stores one).

const STYLE = `
  :host, .marksync-inspector { display: block; font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; color: #1b1f24; background: #f6f8fa; border: 1px solid #d0d7de; border-radius: 6px; padding: 8px; }
  .marksync-inspector h3 { font-size: 12px; margin: 10px 0 4px; }
  .marksync-inspector table { border-collapse: collapse; width: 100%; }
  .marksync-inspector td, .marksync-inspector th { border-bottom: 1px solid #d0d7de; padding: 2px 4px; text-align: left; vertical-align: top; }
  .marksync-inspector .bar { display: flex; gap: 6px; flex-wrap: wrap; }
  .marksync-inspector button { font: inherit; padding: 2px 8px; }
  .marksync-inspector .empty { color: #57606a; }
`;

/** One element, its attributes and children (text is set as text: nothing is parsed as HTML). */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'on') for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    else if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : String(c));
  return el;
}

const when = (ms) => (ms ? new Date(ms).toLocaleTimeString() : '—');
const json = (v) => JSON.stringify(v);

function table(name, heads, rows) {
  return h('section', { 'data-section': name },
    h('h3', {}, `${name} (${rows.length})`),
    rows.length
      ? h('table', {}, h('thead', {}, h('tr', {}, heads.map((x) => h('th', {}, x)))), h('tbody', {}, rows.map((r) => h('tr', {}, r.map((c) => h('td', {}, c))))))
      : h('p', { class: 'empty' }, 'none'));
}

/**
 * Everything a bug report needs, as one object: `db.diagnostics()` with the
 * metrics, storage persistence and usage, when and where it was taken.
 */
export async function diagnostics(db) {
  let storage = null;
  try {
    storage = await db.storage();
  } catch (e) {
    storage = { error: String(e?.message ?? e) };
  }
  return {
    kind: 'marksync-diagnostics',
    version: 1,
    exportedAt: new Date().toISOString(),
    userAgent: typeof navigator === 'undefined' ? null : navigator.userAgent,
    ...db.diagnostics(),
    metrics: db.metrics(),
    storage,
  };
}

/** Saves `diagnostics(db)` as a JSON file (a download); resolves with what it saved. */
export async function exportDiagnostics(db) {
  const d = await diagnostics(db);
  const blob = new Blob([JSON.stringify(d, null, 2)], { type: 'application/json' });
  const url = URL.createObjectURL(blob);
  const a = h('a', { href: url, download: `marksync-diagnostics-${d.deviceId}-${Date.now()}.json` });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
  return d;
}

/**
 * Shows the sync of `db` in `element`, live, until `unmount()`. Returns
 * `{ refresh, exportDiagnostics, unmount }`.
 */
export function mountInspector(db, element) {
  const root = h('div', { class: 'marksync-inspector', 'data-marksync-inspector': '' });
  const style = h('style', {}, STYLE);
  element.append(style, root);
  let storage = null;
  let message = '';
  const act = (label, run) => h('button', {
    type: 'button',
    on: {
      click: async () => {
        message = `${label}…`;
        render();
        try {
          const r = await run();
          message = `${label}: ${r && typeof r === 'object' && 'ok' in r ? (r.ok ? 'ok' : r.error ?? 'not finished') : 'done'}`;
        } catch (e) {
          message = `${label}: ${e?.code ? `${e.code}: ` : ''}${e?.message ?? e}`;
        }
        render();
      },
    },
  }, label);

  function render() {
    const d = db.diagnostics();
    const m = db.metrics();
    const cycles = [...d.cycles].reverse();
    root.replaceChildren(
      h('div', { class: 'bar' },
        act('Sync', () => db.sync()),
        act('Reconcile', () => db.reconcile()),
        act('Retry', () => db.retry()),
        act('Export diagnostics', () => exportDiagnostics(db)),
        h('span', { 'data-message': '' }, message)),
      h('p', {}, `device ${d.deviceId} · user ${d.user ?? '—'} · schema v${d.schemaVersion ?? '—'} · next retry ${when(d.nextRetryAt)}`,
        d.recovery ? ` · needs attention: ${d.recovery.code}: ${d.recovery.message}` : '',
        d.lastError ? ` · last error: ${d.lastError}` : ''),
      table('Outbox', ['opId', 'row', 'fields', 'phase', 'attempts', 'attemptKey'],
        d.outbox.map((q) => [q.op.opId, `${q.op.space ? `${q.op.space}/` : ''}${q.op.table}/${q.op.rowId}`, json(q.op.fields), q.phase, q.attempts, q.attemptKey ?? '—'])),
      table('Cycles', ['started', 'by', 'ms', 'attemptKeys', 'sent', 'verdicts', 'stale ignored', 'pulled', 'outcome'],
        cycles.map((c) => [when(c.startedAt), c.by, c.ms, c.attempts.join(' ') || '—', c.sent,
          `${c.applied} applied, ${c.duplicate} duplicate, ${c.rejected} rejected${c.verdicts.length ? `: ${c.verdicts.map((v) => `${v.opId} ${v.status}${v.code ? ` (${v.code})` : ''}`).join(', ')}` : ''}`,
          c.staleIgnored, c.pulled, c.error ? `${c.outcome}: ${c.error}` : c.outcome])),
      table('Rejections', ['opId', 'row', 'code', 'reason'],
        d.rejections.map((r) => [r.op.opId, `${r.op.table}/${r.op.rowId}`, r.code, r.reason])),
      table('Conflicts', ['row', 'field', 'mine', 'theirs'],
        d.conflicts.map((c) => [`${c.space ? `${c.space}/` : ''}${c.table}/${c.rowId}`, c.field, `${json(c.mine.value)} (${c.mine.opId})`,
          `${json(c.theirs.value)} (${c.theirs.opId}${c.theirs.user ? `, ${c.theirs.user}` : ''})`])),
      table('Spaces', ['space', 'role', 'cursor'], d.spaces.map((s) => [s.space ?? '(personal)', s.role ?? '—', s.cursor])),
      table('Storage', ['persisted', 'usage', 'quota'], storage ? [[String(storage.persisted ?? '—'), storage.usage ?? '—', storage.quota ?? '—']] : []),
      table('Metrics', ['name', 'value'], Object.entries(m).map(([k, v]) => [k, v === null ? '—' : String(v)])),
    );
  }

  const refreshStorage = () => db.storage().then((s) => { storage = s; render(); }, () => {});
  const unsubscribe = db.subscribe(() => render());
  const timer = setInterval(refreshStorage, 5000);
  render();
  refreshStorage();
  return {
    refresh: render,
    exportDiagnostics: () => exportDiagnostics(db),
    unmount() {
      unsubscribe?.();
      clearInterval(timer);
      root.remove();
      style.remove();
    },
  };
}

/** `<marksync-inspector>`: the same inspector as an element; give it a database with `el.db = db`. */
export class MarksyncInspector extends (globalThis.HTMLElement ?? class {}) {
  set db(db) {
    this.mounted?.unmount();
    this._db = db;
    this.mounted = db ? mountInspector(db, this) : null;
  }

  get db() {
    return this._db;
  }

  disconnectedCallback() {
    this.mounted?.unmount();
    this.mounted = null;
  }

  connectedCallback() {
    if (this._db && !this.mounted) this.mounted = mountInspector(this._db, this);
  }
}

if (globalThis.customElements && !customElements.get('marksync-inspector')) {
  customElements.define('marksync-inspector', MarksyncInspector);
}
