//! The fleet's errors.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("invalid --fleet URL '{url}': {message} (expected nats://HOST:PORT)")]
    BadUrl { url: String, message: String },
    #[error("cannot reach NATS at {url}: {message} (is nats-server running with JetStream, `nats-server -js`?)")]
    Connect { url: String, message: String },
    #[error("NATS JetStream at {url}: {message}")]
    JetStream { url: String, message: String },
    #[error("{command} failed: {message}")]
    Git { command: String, message: String },
    #[error("no shared git remote: the repository has no `origin`; pass --remote GIT_URL")]
    NoRemote,
    #[error("cannot use '{}': {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("work directory '{}' is in use by {holder}; give each worker its own --id (or leave --id out: each worker then gets a directory of its own)", dir.display())]
    WorkdirBusy { dir: PathBuf, holder: String },
    #[error("agents: {message}")]
    Agents { message: String },
    #[error("stopped")]
    Cancelled,
}

impl FleetError {
    /// Bad input (exit 2) rather than trouble at run time.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            FleetError::BadUrl { .. }
                | FleetError::NoRemote
                | FleetError::Agents { .. }
                | FleetError::WorkdirBusy { .. }
        )
    }
}
