//! `cascade gates run` and `cascade gates cache stats|clear|explain`.
//!
//! Gates run in the current directory (after `-C`): their config comes from
//! `.cascade/gates.json` of the repository, else `quality_gates` of
//! the PRD (`./prd.json`, else the project's Plan Cascade data directory),
//! else the detected project types. Exit 0 when every required
//! gate passed, 1 otherwise, 2 for a bad config, 130 on Ctrl-C.
//!
//! With a remote cache (`--remote-cache`, `CASCADE_REMOTE_CACHE`, or
//! `remote_cache` in gates.json) lookups read through it and passes are
//! published; its problems are warnings on stderr, and the uploads still
//! running at the end are waited for only up to the flush bound.

use std::path::{Path, PathBuf};

use anyhow::Context;
use cascade_gates::{
    runner, GateCache, GateEnv, GateEvent, GateReport, GateResult, GateSet, RunOptions,
};
use cascade_process::CancelToken;
use clap::{Args, Subcommand};

use super::remote_args::{self, RemoteCacheArgs};
use super::{CliResult, Failure, Global, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK};

#[derive(Debug, Subcommand)]
pub enum GatesCommand {
    /// Run the quality gates in the current directory
    Run(GatesRunArgs),
    /// Inspect or clear the gate result cache
    #[command(subcommand)]
    Cache(CacheCommand),
}

#[derive(Debug, Args)]
pub struct GatesRunArgs {
    /// Run every gate even if a cached result exists
    #[arg(long)]
    pub no_cache: bool,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
    /// Stop at the first failing required gate (kills the gates still running)
    #[arg(long)]
    pub fail_fast: bool,
    /// Re-run a failing gate once; a pass on the re-run counts as flaky
    #[arg(long)]
    pub rerun_failures: bool,
    /// Base commit for incremental gates (they get the files changed since it)
    #[arg(long, value_name = "REV")]
    pub base: Option<String>,
    /// prd.json whose `quality_gates` to use (default: ./prd.json, else the
    /// project's Plan Cascade data directory, if present)
    #[arg(long, value_name = "PATH")]
    pub prd: Option<PathBuf>,
    #[command(flatten)]
    pub remote: RemoteCacheArgs,
}

#[derive(Debug, Subcommand)]
pub enum CacheCommand {
    /// Entries, hits, misses and time saved
    Stats(JsonFlag),
    /// Remove every cached result
    Clear(JsonFlag),
    /// Why the last lookup of each gate missed
    Explain(JsonFlag),
}

#[derive(Debug, Args)]
pub struct JsonFlag {
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

pub fn run(_g: &Global, c: GatesCommand) -> CliResult {
    let cwd = std::env::current_dir()
        .context("cannot read the current directory")
        .map_err(Failure::usage)?;
    match c {
        GatesCommand::Run(a) => gates_run(&cwd, a),
        GatesCommand::Cache(CacheCommand::Stats(f)) => cache_stats(&cwd, f.json),
        GatesCommand::Cache(CacheCommand::Clear(f)) => cache_clear(&cwd, f.json),
        GatesCommand::Cache(CacheCommand::Explain(f)) => cache_explain(&cwd, f.json),
    }
}

/// The repository's one `.cascade/` (main worktree root), or `./.cascade`
/// outside git. Inside git it is added to `.git/info/exclude`.
fn cascade_dir(cwd: &Path) -> PathBuf {
    match cascade_git::RepoPaths::discover(cwd) {
        Ok(paths) => {
            // Not fatal: the fingerprint skips `.cascade/` anyway.
            let _ = paths.ensure_excluded(&["/.cascade/"]);
            paths.cascade_dir()
        }
        Err(_) => cwd.join(".cascade"),
    }
}

fn prd_quality_gates(
    cwd: &Path,
    explicit: Option<&Path>,
) -> Result<Option<serde_json::Value>, Failure> {
    let path = match explicit {
        Some(p) => cwd.join(p),
        // ./prd.json, else the project's Plan Cascade data directory; none: no PRD gates.
        None => {
            let project = super::plan_file::Project::of(cwd.to_path_buf());
            match project
                .paths
                .find_plan(cascade_plan::paths::PlanKind::Prd, cwd, None)
            {
                Some(found) => {
                    for w in &found.warnings {
                        errln!("warning: {w}");
                    }
                    found.path
                }
                None => return Ok(None),
            }
        }
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read '{}'", path.display()))
        .map_err(Failure::usage)?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| {
            format!(
                "'{}' is not valid JSON (fix it or pass --prd)",
                path.display()
            )
        })
        .map_err(Failure::usage)?;
    Ok(value.get("quality_gates").cloned())
}

fn gates_run(cwd: &Path, a: GatesRunArgs) -> CliResult {
    let cascade_dir = cascade_dir(cwd);
    let qg = prd_quality_gates(cwd, a.prd.as_deref())?;
    let set = GateSet::resolve(qg.as_ref(), &cascade_dir, cwd).map_err(Failure::usage)?;
    let cache = if a.no_cache {
        GateCache::open(&cascade_dir)
    } else {
        remote_args::attach(GateCache::open(&cascade_dir), &a.remote.request(), &set)?
    };
    let opts = RunOptions {
        workdir: cwd.to_path_buf(),
        repo_root: None,
        base_commit: a.base.clone(),
        use_cache: !a.no_cache,
        rerun_failures: a.rerun_failures,
        fail_fast: a.fail_fast,
        census_dir: None,
    };
    let json = a.json;
    // A run the local cache answers whole needs no async runtime: the
    // fingerprint and the lookups are plain blocking work.
    let prepared = runner::prepare(&set, &opts);
    let (report, interrupted, flushed) =
        match runner::answer_from_cache(&set, &opts, prepared, &cache, |e| print_event(&e, json)) {
            Ok(report) => (report, false, None),
            Err(prepared) => run_async(&set, &opts, prepared, &cache, json)?,
        };
    if json {
        let mut v = serde_json::json!({ "passed": report.passed, "gates": report.gates });
        if let Some(remote) = cache.remote() {
            v["remote_cache"] = serde_json::json!({
                "url": remote.url(),
                "mode": remote.settings().mode.as_str(),
                "verified": remote.settings().verifies(),
                "uploads": flushed,
            });
        }
        outln!("{v}");
    } else {
        print_summary(&set, &report);
        if let (Some(remote), Some(f)) = (cache.remote(), flushed) {
            let hits = report
                .gates
                .iter()
                .filter(|g| g.cache == cascade_gates::CacheSource::Remote)
                .count();
            outln!(
                "remote cache {} ({}): {hits} hit{}, {} published, {} already there{}",
                remote.url(),
                remote.settings().mode.as_str(),
                if hits == 1 { "" } else { "s" },
                f.uploaded,
                f.already_present,
                if f.failed + f.abandoned > 0 {
                    format!(", {} failed", f.failed + f.abandoned)
                } else {
                    String::new()
                }
            );
        }
    }
    if interrupted {
        return Ok(EXIT_INTERRUPTED);
    }
    Ok(if report.passed { EXIT_OK } else { EXIT_FAILED })
}

/// Runs what the cache could not answer, on a runtime that lives for this
/// run: Ctrl-C cancels the gates, remote uploads are flushed (bounded).
fn run_async(
    set: &GateSet,
    opts: &RunOptions,
    prepared: runner::Prepared,
    cache: &GateCache,
    json: bool,
) -> Result<
    (
        GateReport,
        bool,
        Option<cascade_gates::cache::remote::FlushReport>,
    ),
    Failure,
> {
    let rt = super::runtime()?;
    let cancel = CancelToken::new();
    let out = rt.block_on(async {
        let c = cancel.clone();
        let watcher = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                c.cancel();
            }
        });
        let report = runner::run_prepared(
            set,
            opts,
            prepared,
            &GateEnv::default(),
            cache,
            |e| print_event(&e, json),
            &cancel,
        )
        .await;
        watcher.abort();
        // Uploads run beside the gates; wait for the rest a bounded while.
        let flushed = cache.flush_remote(None).await;
        for message in cache.take_remote_warnings() {
            print_event(&GateEvent::RemoteWarning { message }, json);
        }
        (report, cancel.is_cancelled(), flushed)
    });
    // A backend thread stuck on an unanswering store must not hold the exit.
    rt.shutdown_timeout(std::time::Duration::from_millis(100));
    Ok(out)
}

fn print_event(e: &GateEvent, json: bool) {
    if let GateEvent::RemoteWarning { message } = e {
        // On stderr in both modes: stdout stays valid JSON.
        errln!("warning: remote gate cache: {message}");
        return;
    }
    if json {
        return;
    }
    match e {
        GateEvent::Started { .. } => {}
        GateEvent::Finished(r) => outln!("{}", gate_line(r)),
        GateEvent::CacheUnavailable { reason } => {
            errln!("warning: gate cache disabled for this run: {reason}")
        }
        GateEvent::RemoteWarning { .. } => {}
    }
}

fn gate_line(r: &GateResult) -> String {
    let mark = if r.skipped {
        if r.passed {
            "skip"
        } else {
            "SKIP"
        }
    } else if r.passed {
        "ok"
    } else {
        "FAIL"
    };
    let mut s = format!("{mark:>4}  {}", r.name);
    if !r.required {
        s.push_str(" (optional)");
    }
    if r.cached {
        s.push_str(match r.cache {
            cascade_gates::CacheSource::Remote => " (cached: remote)",
            _ => " (cached)",
        });
    }
    if r.flaky {
        s.push_str(" (flaky)");
    }
    s.push_str(&format!("  {}ms", r.duration_ms));
    if let Some(reason) = &r.skip_reason {
        s.push_str(&format!("  {reason}"));
    } else if !r.passed {
        if let Some(o) = &r.outcome {
            s.push_str(&format!("  {o}"));
        }
        for e in r.errors.iter().take(10) {
            s.push_str(&format!("\n        {}", e.display_line()));
        }
        if r.errors.len() > 10 {
            s.push_str(&format!("\n        ... and {} more", r.errors.len() - 10));
        }
    }
    s
}

fn print_summary(set: &GateSet, report: &GateReport) {
    if set.gates.is_empty() {
        if set.enabled {
            outln!("no gates configured and no project detected (add quality_gates to prd.json or .cascade/gates.json)");
        } else {
            outln!("quality gates are disabled");
        }
        return;
    }
    outln!("{}", report.summary_line());
    let cached: Vec<&str> = report.cached().map(|g| g.name.as_str()).collect();
    if !cached.is_empty() {
        outln!("cached: {}", cached.join(", "));
    }
    outln!(
        "{}",
        if report.passed {
            "gates passed"
        } else {
            "gates failed"
        }
    );
}

/// The remote configured by the environment or gates.json (for display;
/// `None` when none or when it does not resolve).
fn configured_remote(cwd: &Path) -> Option<cascade_gates::RemoteSettings> {
    let set = GateSet::resolve(None, &cascade_dir(cwd), cwd).ok();
    cascade_gates::RemoteSettings::resolve(
        &Default::default(),
        set.as_ref().and_then(|s| s.remote.as_ref()),
    )
    .ok()
    .flatten()
}

fn cache_stats(cwd: &Path, json: bool) -> CliResult {
    let cache = GateCache::open(&cascade_dir(cwd));
    let s = cache.stats();
    let remote = configured_remote(cwd);
    if json {
        let mut v = serde_json::to_value(&s).map_err(Failure::failed)?;
        v["remote"] = match &remote {
            Some(r) => {
                serde_json::json!({"url": r.url, "mode": r.mode.as_str(), "verified": r.verifies()})
            }
            None => serde_json::Value::Null,
        };
        outln!("{v}");
    } else {
        let lookups = s.hits + s.misses;
        let rate = if lookups > 0 {
            s.hits as f64 * 100.0 / lookups as f64
        } else {
            0.0
        };
        outln!("entries:    {} ({} KiB)", s.entries, s.bytes / 1024);
        outln!(
            "hits:       {} ({} local, {} remote)",
            s.hits,
            s.local_hits,
            s.remote_hits
        );
        outln!("misses:     {}", s.misses);
        outln!("hit rate:   {rate:.0}%");
        outln!(
            "time saved: {:.1}s ({:.1}s by remote hits)",
            s.time_saved_ms as f64 / 1000.0,
            s.remote_time_saved_ms as f64 / 1000.0
        );
        outln!(
            "remote:     {}",
            match &remote {
                Some(r) => format!(
                    "{} ({}{})",
                    r.url,
                    r.mode.as_str(),
                    if r.verifies() {
                        ", signed"
                    } else {
                        ", unverified: CASCADE_CACHE_SECRET not set"
                    }
                ),
                None => "not configured".into(),
            }
        );
        outln!(
            "moved:      {} KiB down ({} remote hits), {} KiB up ({} entries published)",
            s.bytes_downloaded / 1024,
            s.remote_hits,
            s.bytes_uploaded / 1024,
            s.uploads
        );
    }
    Ok(EXIT_OK)
}

fn cache_clear(cwd: &Path, json: bool) -> CliResult {
    let cache = GateCache::open(&cascade_dir(cwd));
    let n = cache
        .clear()
        .context("cannot remove the gate cache (check the permissions of .cascade/gate-cache)")
        .map_err(Failure::failed)?;
    if json {
        outln!("{}", serde_json::json!({ "removed": n }));
    } else {
        outln!(
            "removed {n} cached gate result{}",
            if n == 1 { "" } else { "s" }
        );
    }
    Ok(EXIT_OK)
}

fn cache_explain(cwd: &Path, json: bool) -> CliResult {
    let cache = GateCache::open(&cascade_dir(cwd));
    let misses = cache.explain();
    if json {
        outln!("{}", serde_json::json!({ "misses": misses }));
        return Ok(EXIT_OK);
    }
    if misses.is_empty() {
        outln!("no gate's last lookup missed");
    }
    for m in &misses {
        outln!(
            "{}: missed ({})",
            m.gate,
            if m.changed.is_empty() {
                "key unchanged".to_string()
            } else {
                m.changed.join(", ") + " changed"
            }
        );
        // The remote's answer is one of the reasons (with its detail).
        for r in &m.reasons {
            outln!("  {r}");
        }
        for (label, list) in [
            ("added", &m.files_added),
            ("removed", &m.files_removed),
            ("modified", &m.files_modified),
        ] {
            for p in list {
                outln!("    {label}: {p}");
            }
        }
    }
    Ok(EXIT_OK)
}
