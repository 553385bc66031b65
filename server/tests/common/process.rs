//! The server binary as a child process, its log gathered: for what only a
//! process shows — its environment, signals, resource limits, its exit.

use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running `marksync-server` process.
pub struct Spawned {
    pub child: Child,
    /// `http://addr` it listens on.
    pub url: String,
    log: Arc<Mutex<String>>,
}

/// The binary with `args`, its output piped, killed when dropped; no colours.
pub fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_marksync-server"));
    cmd.args(args)
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// `line` without ANSI escapes.
pub fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|c| c.is_ascii_alphabetic());
        } else {
            out.push(c);
        }
    }
    out
}

/// Gathers both outputs of `child` into one log, line by line; `listening`
/// gets the address of the first `listening … addr=…` line.
fn gather(child: &mut Child, log: &Arc<Mutex<String>>) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let out = BufReader::new(child.stdout.take().unwrap()).lines();
    let err = BufReader::new(child.stderr.take().unwrap()).lines();
    for mut lines in [Box::new(out) as Box<dyn LinesSource>, Box::new(err)] {
        let (log, tx) = (Arc::clone(log), tx.clone());
        tokio::spawn(async move {
            while let Some(line) = lines.next().await {
                let line = plain(&line);
                log.lock().unwrap().push_str(&format!("{line}\n"));
                if line.contains("listening") {
                    let addr = line
                        .split(|c: char| c.is_whitespace() || c == '"' || c == ',')
                        .find_map(|w| w.strip_prefix("addr=").or_else(|| w.strip_prefix("addr:")))
                        .map(str::to_owned);
                    if let Some(addr) = addr {
                        let _ = tx.send(addr);
                    }
                }
            }
        });
    }
    rx
}

trait LinesSource: Send {
    fn next(&mut self) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<String>> + Send + '_>>;
}

impl<R: tokio::io::AsyncBufRead + Unpin + Send> LinesSource for tokio::io::Lines<R> {
    fn next(&mut self) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<String>> + Send + '_>> {
        Box::pin(async move { self.next_line().await.ok().flatten() })
    }
}

impl Spawned {
    /// Starts `cmd` and waits (30 s at most) until it listens; its log if it exits first.
    pub async fn start(mut cmd: Command) -> Result<Spawned, String> {
        let mut child = cmd.spawn().expect("the server binary starts");
        let log = Arc::new(Mutex::new(String::new()));
        let mut addrs = gather(&mut child, &log);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            tokio::select! {
                addr = addrs.recv() => {
                    if let Some(addr) = addr {
                        return Ok(Spawned { child, url: format!("http://{addr}"), log });
                    }
                }
                status = child.wait() => {
                    // Let the last lines arrive.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    let log = log.lock().unwrap().clone();
                    return Err(format!("exited ({status:?}):\n{log}"));
                }
                () = tokio::time::sleep_until(deadline) => panic!("the server did not listen within 30 s:\n{}", log.lock().unwrap()),
            }
        }
    }

    /// Runs `cmd` to its end (30 s at most): its exit status and its log.
    pub async fn run(mut cmd: Command) -> (ExitStatus, String) {
        let mut child = cmd.spawn().expect("the server binary starts");
        let log = Arc::new(Mutex::new(String::new()));
        let _addrs = gather(&mut child, &log);
        let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
            .await
            .unwrap_or_else(|_| panic!("still running after 30 s:\n{}", log.lock().unwrap()))
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let log = log.lock().unwrap().clone();
        (status, log)
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Its process id.
    pub fn pid(&self) -> i32 {
        self.child.id().expect("still running") as i32
    }

    /// Sends `signal` (a `libc::SIG*`).
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(self.pid(), signal) }, 0);
    }

    /// Waits (30 s at most) for it to exit.
    pub async fn exited(&mut self) -> ExitStatus {
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("still running after 30 s:\n{}", self.log()))
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        status
    }
}
