//! The remote gate cache flags shared by `gates run`, `approve` and
//! `resume` (`--remote-cache URL`, `--remote-cache-mode MODE`), and the one
//! place that turns them, the environment and `.cascade/gates.json` into a
//! connected remote tier.

use cascade_gates::{GateCache, GateSet, RemoteCache, RemoteMode, RemoteRequest, RemoteSettings};
use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};

use super::Failure;

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RemoteModeArg {
    /// Look results up, never publish
    Read,
    /// Publish passes, never look up
    Write,
    /// Both (the default when CASCADE_CACHE_SECRET is set)
    ReadWrite,
}

#[derive(Debug, Clone, Default, PartialEq, Args, Serialize, Deserialize)]
#[serde(default)]
pub struct RemoteCacheArgs {
    /// Share gate results through this store: s3://bucket/prefix, gs://..., az://..., file:///dir
    /// (default: $CASCADE_REMOTE_CACHE, then remote_cache in .cascade/gates.json; `off` disables)
    #[arg(long, value_name = "URL")]
    pub remote_cache: Option<String>,
    /// read, write or read-write (default: read-write when CASCADE_CACHE_SECRET is set, else read)
    #[arg(long, value_enum, value_name = "MODE")]
    pub remote_cache_mode: Option<RemoteModeArg>,
}

impl RemoteCacheArgs {
    /// The flags as the gates crate takes them.
    pub fn request(&self) -> RemoteRequest {
        RemoteRequest {
            url: self.remote_cache.clone(),
            mode: self.remote_cache_mode.map(|m| match m {
                RemoteModeArg::Read => RemoteMode::Read,
                RemoteModeArg::Write => RemoteMode::Write,
                RemoteModeArg::ReadWrite => RemoteMode::ReadWrite,
            }),
        }
    }
}

/// The remote tier for `set`'s config and the flags: `Ok(None)` when none is
/// configured; a configuration that cannot work is a usage error (exit 2).
pub fn connect(req: &RemoteRequest, set: Option<&GateSet>) -> Result<Option<RemoteCache>, Failure> {
    let settings = RemoteSettings::resolve(req, set.and_then(|s| s.remote.as_ref()))
        .map_err(Failure::usage)?;
    match settings {
        Some(s) => RemoteCache::connect(s).map(Some).map_err(Failure::usage),
        None => Ok(None),
    }
}

/// `cache` with the remote of the flags/env/config attached.
pub fn attach(cache: GateCache, req: &RemoteRequest, set: &GateSet) -> Result<GateCache, Failure> {
    Ok(cache.with_remote(connect(req, Some(set))?))
}
