import { useEffect } from 'react';

/** One message at a time at the bottom of the screen; an optional action (Undo). */
export function Toast({ toast, onClose }) {
  useEffect(() => {
    if (!toast) return undefined;
    const t = setTimeout(onClose, toast.ms);
    return () => clearTimeout(t);
  }, [toast]); // eslint-disable-line react-hooks/exhaustive-deps

  return (
    <div className="toast-slot" aria-live="polite">
      {toast && (
        <div className="toast" key={toast.id} data-testid="toast">
          <span className="text">{toast.text}</span>
          {toast.action && (
            <button type="button" onClick={() => { onClose(); toast.action.run(); }}>
              {toast.action.label}
            </button>
          )}
          <span className="timer" style={{ animationDuration: `${toast.ms}ms` }} aria-hidden="true" />
        </div>
      )}
    </div>
  );
}
