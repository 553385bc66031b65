//! `marksync-server`: see `marksync-server --help` and docs/server.md.

use std::process::ExitCode;

use clap::Parser;
use marksync_server::config::Command;
use marksync_server::store::Store;
use marksync_server::{logging, Config};

/// mimalloc, not the system's malloc: a push allocates and frees many small
/// values (rows, marks, verdicts) on every worker thread at once, where
/// glibc's allocator contends on its arenas and coalesces freed chunks
/// (BENCHMARKS.md, "The allocator"). An app embedding the server chooses its
/// own allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // Before the threads and their allocations: see the function's docs.
    marksync_server::memory::no_transparent_huge_pages();
    // Before any thread starts: an empty variable is an unset one, everywhere
    // (`MARKSYNC_JWT_AUDIENCE=` must not demand an empty audience of every token).
    unset_empty_variables();
    let config = Config::parse();
    if let Err(e) = logging::init(config.log_format) {
        eprintln!("marksync-server: cannot start logging: {e}");
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(config))
}

async fn run(config: Config) -> ExitCode {
    if config.command == Some(Command::Migrate) {
        return match Store::migrate(&config.database, &config.db_options()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = %e, "migrate failed");
                ExitCode::FAILURE
            }
        };
    }
    let signals = match StopSignals::register() {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for stop signals");
            return ExitCode::FAILURE;
        }
    };
    let listen = config.listen;
    // The database first: the port is bound only once requests can be answered.
    let prepared = match marksync_server::prepare(config).await {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e, "marksync-server cannot start");
            return ExitCode::FAILURE;
        }
    };
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(listen = %listen, error = %e, "cannot listen");
            return ExitCode::FAILURE;
        }
    };
    match prepared.serve(listener, shutdown_signal(signals)).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "marksync-server failed");
            ExitCode::FAILURE
        }
    }
}

/// Removes every `MARKSYNC_*` variable set to the empty string.
fn unset_empty_variables() {
    let empty: Vec<_> = std::env::vars_os()
        .filter(|(k, v)| v.is_empty() && k.to_str().is_some_and(|k| k.starts_with("MARKSYNC_")))
        .map(|(k, _)| k)
        .collect();
    for k in empty {
        std::env::remove_var(k);
    }
}

/// The stop signals, listened to from the moment they are registered: a
/// signal that arrives while the database opens is not lost (nor does it kill
/// the process by its default action).
struct StopSignals {
    #[cfg(unix)]
    signals: Vec<(&'static str, tokio::signal::unix::Signal)>,
}

impl StopSignals {
    /// Registers SIGINT, SIGTERM and SIGHUP (in the runtime).
    fn register() -> std::io::Result<StopSignals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(StopSignals {
                signals: vec![
                    ("SIGINT", signal(SignalKind::interrupt())?),
                    ("SIGTERM", signal(SignalKind::terminate())?),
                    ("SIGHUP", signal(SignalKind::hangup())?),
                ],
            })
        }
        #[cfg(not(unix))]
        Ok(StopSignals {})
    }

    /// The next stop signal's name.
    async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            let waits = self.signals.iter_mut().map(|(name, s)| {
                Box::pin(async move {
                    s.recv().await;
                    *name
                })
            });
            futures_util::future::select_all(waits).await.0
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}

/// Resolves on the first SIGINT, SIGTERM or SIGHUP: the server drains
/// (requests in flight finish, within `--shutdown-timeout-ms`). A second
/// signal exits at once — an operator who asks twice means it.
async fn shutdown_signal(mut signals: StopSignals) {
    let name = signals.next().await;
    tracing::info!(signal = name, "stopping: finishing requests in flight (a second signal exits at once)");
    tokio::spawn(async move {
        let again = signals.next().await;
        tracing::warn!(signal = again, "second signal: exiting at once");
        std::process::exit(130);
    });
}
