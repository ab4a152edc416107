//! cascade-ui: the local web dashboard (`cascade ui`).
//!
//! A small axum server on 127.0.0.1 (by default) that serves the embedded
//! page (`assets/`), a JSON API over the repository's run state, logs,
//! event journal and planning sessions, a server-sent event stream fed by a
//! running `cascade` process through its live channel, and the few actions
//! (pause/resume scheduling, retry and cancel a story, of a plain run or of
//! a mega run's feature, answer and approve a plan). Every request needs the access token printed in the URL
//! ([`auth`]). It never prints: the binary says where it listens.
//!
//! # API summary
//! - [`UiConfig`]`{ repo_root, workdir, cli: Option<`[`Cli`]`>, bind, port }` ->
//!   [`Ui::bind`]`(config).await -> Result<Ui, UiError>`: listens (port 0:
//!   a free one) and makes a fresh token; [`Ui::url`] is the address to
//!   open (with `?token=`), [`Ui::serve`]`(shutdown)` answers requests
//!   (and follows the repository's live runs) until `shutdown` completes.
//! - [`auth::Token`]: 128 random bits from the OS, compared in constant time.
//! - [`live`]: the live channel a running `cascade` process serves on
//!   `.cascade/live.sock` ([`live::Publisher`]: wraps the engine's event
//!   sink, takes requests for its `Steering`) and the dashboard reads
//!   ([`live::LiveClient`]), and the per-run event journal
//!   ([`live::journal`], `.cascade/runs/<run_id>/events.jsonl`).
//! - Inside: `routes` (router and the token/CSRF guard), `api` (JSON
//!   endpoints and actions), `sse` (the event stream), `hub` (the run on
//!   show: live or from its journal), `snapshot` (run view), `train` (the
//!   run view's merge train), `detail` (story view), `mega` (the mega run's
//!   features and their stories), `plans` (planning sessions, running
//!   cascade commands).
//! - The HTTP API itself is documented in `docs/dashboard.md` ("API").

mod api;
pub mod assets;
pub mod auth;
mod detail;
mod hub;
pub mod live;
mod mega;
mod plans;
mod records;
mod routes;
mod snapshot;
mod sse;
mod stamp;
mod train;

pub use plans::Cli;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use cascade_process::AbortOnDrop;

/// What `cascade ui` was asked for.
#[derive(Debug, Clone)]
pub struct UiConfig {
    /// The repository whose `.cascade/` is shown (its main worktree).
    pub repo_root: PathBuf,
    /// Where `cascade ui` was started: its `prd.json` is shown before any
    /// run, and the actions run cascade there.
    pub workdir: PathBuf,
    /// How to run cascade for the actions that are commands (`plan
    /// answer`, `plan approve`, `resume`); `None`: those actions answer 409.
    pub cli: Option<Cli>,
    /// Address to listen on; 127.0.0.1 unless `--bind` says otherwise.
    pub bind: IpAddr,
    /// Port; 0 picks a free one.
    pub port: u16,
}

impl UiConfig {
    /// Loopback, any free port.
    pub fn new(repo_root: impl Into<PathBuf>) -> UiConfig {
        let repo_root = repo_root.into();
        UiConfig {
            workdir: repo_root.clone(),
            cli: None,
            repo_root,
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 0,
        }
    }
}

/// Why the dashboard could not start.
#[derive(Debug, thiserror::Error)]
pub enum UiError {
    #[error("cannot listen on {addr}: {source} (pick another --port, or 0 for a free one)")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read random bytes from the operating system for the access token: {0}")]
    Random(String),
    #[error("dashboard server failed: {0}")]
    Serve(#[source] std::io::Error),
}

/// Shared by every request handler.
pub(crate) struct AppState {
    pub config: UiConfig,
    pub token: auth::Token,
    /// `host:port` the server is reached at (for the same-origin check).
    pub local: SocketAddr,
    pub hub: Arc<hub::Hub>,
    /// The run state and PRD as last read.
    pub files: std::sync::Mutex<api::RunFiles>,
}

/// A listening dashboard.
pub struct Ui {
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
}

impl Ui {
    /// Listens on `config.bind:config.port` with a fresh token.
    pub async fn bind(config: UiConfig) -> Result<Ui, UiError> {
        let addr = SocketAddr::new(config.bind, config.port);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| UiError::Bind { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| UiError::Bind { addr, source })?;
        let token = auth::Token::generate()?;
        Ok(Ui {
            listener,
            state: Arc::new(AppState {
                hub: hub::Hub::new(config.repo_root.join(".cascade")),
                files: std::sync::Mutex::new(api::RunFiles::new(
                    &config.repo_root.join(".cascade"),
                )),
                config,
                token,
                local,
            }),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.state.local
    }

    /// The access token.
    pub fn token(&self) -> &str {
        self.state.token.as_str()
    }

    /// The URL to open: `http://HOST:PORT/?token=T`. A wildcard bind
    /// address is shown as 127.0.0.1 (what a browser on this machine uses).
    pub fn url(&self) -> String {
        let addr = self.state.local;
        let host = match addr.ip() {
            ip if ip.is_unspecified() => "127.0.0.1".to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
            IpAddr::V4(v4) => v4.to_string(),
        };
        format!("http://{host}:{}/?token={}", addr.port(), self.token())
    }

    /// Answers requests until `shutdown` completes.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), UiError> {
        let app = routes::router(Arc::clone(&self.state));
        // Follows the repository's live runs while serving.
        let _watch = AbortOnDrop(self.state.hub.spawn_watch());
        // Meanwhile, the last run is on show (read once, in the background).
        let _last = AbortOnDrop({
            let state = Arc::clone(&self.state);
            tokio::task::spawn_blocking(move || state.show_last_run())
        });
        axum::serve(self.listener, app)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(UiError::Serve)
    }
}

/// A mutex's guard, poisoned or not: the data behind the dashboard's locks
/// (views, records) stays usable after a panicking holder.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
