//! How the server logs: to stdout, as text for people or as one JSON object
//! per line for log collectors, filtered by `RUST_LOG` (default `info`).
//!
//! Colours only on a terminal: escape codes in a file or a collector are
//! noise that breaks searches. `NO_COLOR` turns them off on a terminal too.

use std::io::IsTerminal;

use tracing::Subscriber;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One line per event, for people; coloured on a terminal.
    #[default]
    Text,
    /// One JSON object per line: the event's fields at the top level, the
    /// request's (method, path, request id, user) under `span`.
    Json,
}

/// Whether lines get colours: text written to a terminal, unless `NO_COLOR` is set.
pub fn colours(format: LogFormat, terminal: bool, no_color: bool) -> bool {
    format == LogFormat::Text && terminal && !no_color
}

/// The filter of `RUST_LOG`, or `info` when it is unset or does not parse.
pub fn filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"))
}

/// A subscriber writing `format` to `writer`. Apart from [`init`], for tests
/// that read what would be logged.
pub fn subscriber<W>(format: LogFormat, ansi: bool, filter: EnvFilter, writer: W) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    // A line that cannot be written (a full disk under a log file) is lost,
    // not reported: the report goes to stderr, on the same disk as often as
    // not, and its `eprintln!` panics — the request being logged with it.
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).log_internal_errors(false);
    match format {
        LogFormat::Text => Box::new(builder.with_ansi(ansi).finish()),
        LogFormat::Json => Box::new(
            builder.json().with_ansi(false).flatten_event(true).with_current_span(true).with_span_list(false).finish(),
        ),
    }
}

/// Installs the process's logger: `format` on stdout, filtered by `RUST_LOG`.
pub fn init(format: LogFormat) -> Result<(), tracing::subscriber::SetGlobalDefaultError> {
    let ansi = colours(format, std::io::stdout().is_terminal(), std::env::var_os("NO_COLOR").is_some());
    tracing::subscriber::set_global_default(subscriber(format, ansi, filter(), std::io::stdout))
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What `format` writes for an error logged inside a request's span.
    fn logged(format: LogFormat, ansi: bool) -> String {
        let buffer = Buffer::default();
        let out = buffer.clone();
        let sub = subscriber(format, ansi, EnvFilter::new("info"), move || out.clone());
        tracing::subscriber::with_default(sub, || {
            let span = tracing::info_span!(
                "request",
                method = "POST",
                path = "/v1/push",
                request_id = "r-1",
                user = tracing::field::Empty
            );
            span.record("user", "ann");
            span.in_scope(|| tracing::error!(error = "disk full", "internal error"));
            tracing::debug!("filtered out");
        });
        let bytes = buffer.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn json_lines_parse_and_carry_the_requests_fields() {
        let text = logged(LogFormat::Json, true);
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(v["level"], "ERROR");
        assert_eq!(v["message"], "internal error");
        assert_eq!(v["error"], "disk full");
        assert_eq!(v["span"]["method"], "POST");
        assert_eq!(v["span"]["path"], "/v1/push");
        assert_eq!(v["span"]["request_id"], "r-1");
        assert_eq!(v["span"]["user"], "ann");
        assert!(!text.contains('\u{1b}'), "JSON is never coloured: {text}");
    }

    #[test]
    fn text_has_colours_only_when_asked_and_carries_the_requests_fields() {
        let plain = logged(LogFormat::Text, false);
        assert!(!plain.contains('\u{1b}'), "{plain}");
        let unquoted = plain.replace('"', "");
        for field in ["method=POST", "path=/v1/push", "request_id=r-1", "user=ann", "internal error"] {
            assert!(unquoted.contains(field), "{field} in {plain}");
        }
        assert!(logged(LogFormat::Text, true).contains('\u{1b}'));
    }

    #[test]
    fn colours_go_to_terminals_only() {
        assert!(colours(LogFormat::Text, true, false));
        assert!(!colours(LogFormat::Text, false, false), "a file or a pipe");
        assert!(!colours(LogFormat::Text, true, true), "NO_COLOR");
        assert!(!colours(LogFormat::Json, true, false));
    }
}
