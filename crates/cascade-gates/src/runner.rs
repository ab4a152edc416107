//! The gate runner: groups in order (format, then typecheck/lint/test/custom
//! in parallel, then verification), cache lookups, per-gate timeouts,
//! fail-fast that kills the running gates' process groups, flaky re-runs,
//! incremental gates, and events for reporters. With a remote cache
//! attached, lookups read through it and its warnings become
//! [`GateEvent::RemoteWarning`] events (never failures).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use cascade_git::fingerprint::Fingerprint;
use cascade_process::{CancelToken, Outcome, SpawnError, Spec};
use tokio::task::JoinSet;

use crate::cache::{GateCache, KeyParts};
use crate::config::{Gate, GateSet};
use crate::parse::{self, Parser};
use crate::report::{GateError, GateReport, GateResult, Severity};

/// Bytes of each output stream kept for parsing (JSON diagnostics can be long).
const CAPTURE_BYTES: usize = 4 * 1024 * 1024;
/// Bytes of output kept in a result's excerpt.
const EXCERPT_BYTES: usize = 4000;

/// How to run a [`GateSet`].
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Folder the gates' `working_dir`s are relative to (a story's worktree,
    /// or where `cascade gates run` was started).
    pub workdir: PathBuf,
    /// Root of the worktree containing `workdir`; discovered when `None`.
    /// Outside git, `workdir` itself.
    pub repo_root: Option<PathBuf>,
    /// Base commit for incremental gates; `None` runs them in full.
    pub base_commit: Option<String>,
    /// Use the cache (also requires the set's `use_cache`).
    pub use_cache: bool,
    /// Re-run a failed gate once (also enabled by the set's `rerun_failures`).
    pub rerun_failures: bool,
    /// Stop at the first failing required gate (also enabled by the set's `fail_fast`).
    pub fail_fast: bool,
    /// Take the test census of the gates whose runner it reads
    /// ([`crate::census`]). Each run of such a gate gets a fresh private
    /// directory (mode 0700, a name nobody can guess) under this one
    /// (cascade's own, outside the worktree) for its reports, removed once
    /// they are read: a report written before the run, or anywhere else,
    /// is never read. `None`: no census.
    pub census_dir: Option<PathBuf>,
}

/// Where and when gate processes run, beyond [`RunOptions`]: what a run
/// shares between the gate runs of its stories ([`run_gates_in`]).
#[derive(Debug, Clone, Default)]
pub struct GateEnv {
    /// What every gate process asks before it starts: a limit shared with
    /// the gate runs of other stories (`--gate-jobs`) and the memory guard.
    /// Cache hits and skipped gates do not ask.
    pub admission: cascade_process::resources::Admission,
    /// Environment every gate process gets besides its own `env` (a story's
    /// `CASCADE_PORT_BASE`, shared build caches). Not part of the cache key:
    /// it says where to put things, not what to check.
    pub extra_env: Vec<(String, String)>,
    /// The story's confinement of every gate process (its report directory
    /// is made writable too); `None`: unconfined. Not part of the cache key.
    pub sandbox: Option<Arc<cascade_process::sandbox::Policy>>,
    /// The story whose tree the gates judge: names their processes (a
    /// second Ctrl-C says what it stopped). `None`: `cascade gates run`.
    pub story: Option<String>,
}

/// What the runner reports while it runs.
#[derive(Debug, Clone)]
pub enum GateEvent {
    /// A gate is about to be looked up / run.
    Started { name: String, command: String },
    /// A gate finished (ran, came from the cache, or was skipped).
    Finished(Box<GateResult>),
    /// The tree fingerprint could not be computed: the cache is off for this run.
    CacheUnavailable { reason: String },
    /// The remote cache is slow, down, or returned an entry that failed
    /// verification: the run goes on with the local cache.
    RemoteWarning { message: String },
}

/// Shared by the tasks of one run.
struct Ctx {
    admission: cascade_process::resources::Admission,
    extra_env: Vec<(String, String)>,
    story: Option<String>,
    sandbox: Option<Arc<cascade_process::sandbox::Policy>>,
    /// The network namespace the run's confined gates share, made when
    /// the first of them starts (a run of cache hits makes none).
    network: std::sync::OnceLock<cascade_process::sandbox::Network>,
    repo_root: PathBuf,
    /// `workdir` relative to `repo_root` (`.` when equal).
    workdir_rel: String,
    workdir: PathBuf,
    base_commit: Option<String>,
    cache: Option<GateCache>,
    fingerprint: Option<Arc<Fingerprint>>,
    rerun: bool,
    census_dir: Option<PathBuf>,
}

impl Ctx {
    /// The run's gate network, made on first use.
    fn network(&self) -> cascade_process::sandbox::Network {
        self.network
            .get_or_init(cascade_process::sandbox::Network::shared_or_own)
            .clone()
    }
}

/// Runs the gates and returns the report. Never fails: problems become
/// failed (or skipped) gate results.
pub async fn run_gates(
    set: &GateSet,
    opts: &RunOptions,
    cache: &GateCache,
    on_event: impl Fn(GateEvent),
    cancel: &CancelToken,
) -> GateReport {
    run_gates_in(set, opts, &GateEnv::default(), cache, on_event, cancel).await
}

/// What a gate run knows before any gate starts: where it runs and the
/// tree's fingerprint. Made by [`prepare`], without an async runtime.
#[derive(Debug, Clone)]
pub struct Prepared {
    repo_root: PathBuf,
    workdir: PathBuf,
    /// `workdir` relative to `repo_root` (`.` when equal).
    workdir_rel: String,
    use_cache: bool,
    fingerprint: Option<Arc<Fingerprint>>,
    /// Why there is no fingerprint although the cache is on.
    unavailable: Option<String>,
}

/// Resolves where the gates run and fingerprints the tree when the cache
/// is on. Blocking: the fingerprint walks the tree.
pub fn prepare(set: &GateSet, opts: &RunOptions) -> Prepared {
    let workdir = opts
        .workdir
        .canonicalize()
        .unwrap_or_else(|_| opts.workdir.clone());
    let repo_root = match &opts.repo_root {
        Some(r) => r.canonicalize().unwrap_or_else(|_| r.clone()),
        None => cascade_git::RepoPaths::discover(&workdir)
            .map(|p| p.workdir)
            .unwrap_or_else(|_| workdir.clone()),
    };
    let workdir_rel = rel_path(&repo_root, &workdir);
    let use_cache = opts.use_cache && set.use_cache && !set.gates.is_empty();
    let (fingerprint, unavailable) = if use_cache {
        match cascade_git::fingerprint::fingerprint(&repo_root, None)
            .or_else(|_| cascade_git::fingerprint::fingerprint_dir(&repo_root, None))
        {
            Ok(fp) => (Some(Arc::new(fp)), None),
            Err(e) => (None, Some(e.to_string())),
        }
    } else {
        (None, None)
    };
    Prepared {
        repo_root,
        workdir,
        workdir_rel,
        use_cache,
        fingerprint,
        unavailable,
    }
}

/// Answers the whole run from the local cache when it can: every gate's
/// result is stored under its key, no remote tier is attached, no toolchain
/// has to be probed (see [`crate::toolchain`]) and no incremental gate
/// needs the changes since a base commit. Then the hits are recorded
/// (stats, explain) and reported through `on_event` exactly as
/// [`run_prepared`] would, and no process or async runtime is started.
/// Otherwise nothing is recorded and the prepared run comes back, to be
/// given to [`run_prepared`].
pub fn answer_from_cache(
    set: &GateSet,
    opts: &RunOptions,
    prepared: Prepared,
    cache: &GateCache,
    on_event: impl Fn(GateEvent),
) -> Result<GateReport, Prepared> {
    if set.gates.is_empty() {
        return Ok(GateReport {
            passed: true,
            gates: Vec::new(),
        });
    }
    let Some(fp) = prepared.fingerprint.clone().filter(|_| prepared.use_cache) else {
        return Err(prepared);
    };
    if cache.remote().is_some()
        || (opts.base_commit.is_some() && set.gates.iter().any(|g| g.incremental))
    {
        return Err(prepared);
    }
    // Every key and entry first: a single miss leaves nothing recorded.
    let mut found = Vec::with_capacity(set.gates.len());
    for gate in &set.gates {
        let dir_in_repo = join_rel(&prepared.workdir_rel, &gate.working_dir);
        let toolchain = match gate.toolchain_argv() {
            Some(argv) => match cache
                .toolchains()
                .remembered(&argv, &prepared.workdir.join(&gate.working_dir))
            {
                Some(t) => t,
                None => return Err(prepared),
            },
            None => String::new(),
        };
        let (parts, gate_fp) = key_parts(gate, &gate.args, dir_in_repo, toolchain, &fp);
        let Some(entry) = cache.get(&parts.key()) else {
            return Err(prepared);
        };
        if wants_census(opts.census_dir.as_deref(), gate, &gate.args)
            && entry.result.census.is_none()
        {
            return Err(prepared);
        }
        found.push((parts, gate_fp, entry));
    }
    let mut results: Vec<Option<GateResult>> = vec![None; set.gates.len()];
    for group in 0..3 {
        let members: Vec<usize> = (0..set.gates.len())
            .filter(|i| set.gates[*i].kind.group() == group)
            .collect();
        for &i in &members {
            on_event(GateEvent::Started {
                name: set.gates[i].name.clone(),
                command: set.gates[i].command_line(),
            });
        }
        for &i in &members {
            let started = Instant::now();
            let (parts, gate_fp, entry) = &found[i];
            let mut r = cache.record_hit(parts, entry.clone(), gate_fp);
            finish_hit(&mut r, &set.gates[i], started);
            on_event(GateEvent::Finished(Box::new(r.clone())));
            results[i] = Some(r);
        }
    }
    let gates: Vec<GateResult> = results.into_iter().flatten().collect();
    let passed = gates.iter().all(|g| g.passed || !g.required);
    Ok(GateReport { passed, gates })
}

/// [`run_gates`] with the admission and environment of `env`.
pub async fn run_gates_in(
    set: &GateSet,
    opts: &RunOptions,
    env: &GateEnv,
    cache: &GateCache,
    on_event: impl Fn(GateEvent),
    cancel: &CancelToken,
) -> GateReport {
    let prepared = {
        let (set, opts) = (set.clone(), opts.clone());
        tokio::task::spawn_blocking(move || prepare(&set, &opts)).await
    };
    let prepared = match prepared {
        Ok(p) => p,
        Err(e) => {
            on_event(GateEvent::CacheUnavailable {
                reason: e.to_string(),
            });
            // The fingerprint task panicked: run without the cache.
            let no_cache = RunOptions {
                use_cache: false,
                ..opts.clone()
            };
            prepare(set, &no_cache)
        }
    };
    run_prepared(set, opts, prepared, env, cache, on_event, cancel).await
}

/// Runs the gates of a prepared run (see [`prepare`]).
pub async fn run_prepared(
    set: &GateSet,
    opts: &RunOptions,
    prepared: Prepared,
    env: &GateEnv,
    cache: &GateCache,
    on_event: impl Fn(GateEvent),
    cancel: &CancelToken,
) -> GateReport {
    if let Some(reason) = &prepared.unavailable {
        on_event(GateEvent::CacheUnavailable {
            reason: reason.clone(),
        });
    }
    let ctx = Arc::new(Ctx {
        admission: env.admission.clone(),
        extra_env: env.extra_env.clone(),
        story: env.story.clone(),
        sandbox: env.sandbox.clone(),
        network: std::sync::OnceLock::new(),
        repo_root: prepared.repo_root,
        workdir_rel: prepared.workdir_rel,
        workdir: prepared.workdir,
        base_commit: opts.base_commit.clone(),
        cache: (prepared.use_cache && prepared.fingerprint.is_some()).then(|| cache.clone()),
        fingerprint: prepared.fingerprint,
        rerun: opts.rerun_failures || set.rerun_failures,
        census_dir: opts.census_dir.clone(),
    });
    let fail_fast = opts.fail_fast || set.fail_fast;

    let mut results: Vec<Option<GateResult>> = vec![None; set.gates.len()];
    let mut stop_reason: Option<String> = None;
    for group in 0..3 {
        let members: Vec<usize> = (0..set.gates.len())
            .filter(|i| set.gates[*i].kind.group() == group)
            .collect();
        if members.is_empty() {
            continue;
        }
        if stop_reason.is_none() && cancel.is_cancelled() {
            stop_reason = Some("cancelled before it started".into());
        }
        if let Some(reason) = &stop_reason {
            for i in members {
                let r = skipped(&set.gates[i], &ctx, reason.clone(), false);
                on_event(GateEvent::Finished(Box::new(r.clone())));
                results[i] = Some(r);
            }
            continue;
        }
        let mut tokens: HashMap<usize, CancelToken> = HashMap::new();
        let mut tasks: JoinSet<(usize, GateResult)> = JoinSet::new();
        for &i in &members {
            let gate = set.gates[i].clone();
            on_event(GateEvent::Started {
                name: gate.name.clone(),
                command: gate.command_line(),
            });
            let token = CancelToken::new();
            tokens.insert(i, token.clone());
            let ctx = ctx.clone();
            tasks.spawn(async move { (i, run_one(&ctx, &gate, &token).await) });
        }
        let mut outer_cancelled = false;
        loop {
            let joined = tokio::select! {
                j = tasks.join_next() => j,
                _ = cancel.cancelled(), if !outer_cancelled => {
                    outer_cancelled = true;
                    for t in tokens.values() { t.cancel(); }
                    if stop_reason.is_none() {
                        stop_reason = Some("cancelled".into());
                    }
                    continue;
                }
            };
            let Some(joined) = joined else { break };
            let Ok((i, mut r)) = joined else { continue };
            tokens.remove(&i);
            if r.skipped && r.skip_reason.as_deref() == Some(CANCELLED) {
                r.skip_reason = stop_reason.clone().or(Some(CANCELLED.into()));
            }
            if fail_fast && stop_reason.is_none() && r.required && !r.passed && !r.skipped {
                stop_reason = Some(format!("fail-fast: gate '{}' failed", r.name));
                // Kill the rest of the group: their whole process groups go.
                for t in tokens.values() {
                    t.cancel();
                }
            }
            for message in cache.take_remote_warnings() {
                on_event(GateEvent::RemoteWarning { message });
            }
            on_event(GateEvent::Finished(Box::new(r.clone())));
            results[i] = Some(r);
        }
        // A task that panicked leaves no result: report it rather than drop it.
        for &i in &members {
            if results[i].is_none() {
                let mut r = skipped(
                    &set.gates[i],
                    &ctx,
                    "internal error: the gate task panicked".into(),
                    false,
                );
                r.skipped = false;
                on_event(GateEvent::Finished(Box::new(r.clone())));
                results[i] = Some(r);
            }
        }
    }
    for message in cache.take_remote_warnings() {
        on_event(GateEvent::RemoteWarning { message });
    }
    let gates: Vec<GateResult> = results.into_iter().flatten().collect();
    let passed = gates.iter().all(|g| g.passed || !g.required);
    GateReport { passed, gates }
}

const CANCELLED: &str = "cancelled";

fn rel_path(root: &Path, dir: &Path) -> String {
    match dir.strip_prefix(root) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
        Ok(rel) => rel.to_string_lossy().into_owned(),
        Err(_) => ".".into(),
    }
}

fn join_rel(a: &str, b: &str) -> String {
    match (a, b) {
        (".", b) => b.to_string(),
        (a, ".") => a.to_string(),
        (a, b) => format!("{a}/{b}"),
    }
}

fn base_result(gate: &Gate, ctx: &Ctx) -> GateResult {
    GateResult {
        name: gate.name.clone(),
        passed: false,
        required: gate.required,
        cached: false,
        cache: Default::default(),
        skipped: false,
        skip_reason: None,
        flaky: false,
        tool_missing: false,
        timed_out: false,
        duration_ms: 0,
        original_duration_ms: None,
        command: gate.command_line(),
        working_dir: join_rel(&ctx.workdir_rel, &gate.working_dir),
        outcome: None,
        errors: Vec::new(),
        output_excerpt: String::new(),
        census: None,
    }
}

fn skipped(gate: &Gate, ctx: &Ctx, reason: String, passed: bool) -> GateResult {
    let mut r = base_result(gate, ctx);
    r.skipped = true;
    r.passed = passed;
    r.outcome = Some(format!("skipped: {reason}"));
    r.skip_reason = Some(reason);
    r
}

async fn run_one(ctx: &Ctx, gate: &Gate, token: &CancelToken) -> GateResult {
    let started = Instant::now();
    let dir_in_repo = join_rel(&ctx.workdir_rel, &gate.working_dir);
    let mut args = gate.args.clone();
    // Only a full run is a census (not one over the changed files).
    let mut census_dir = ctx.census_dir.as_deref();

    if gate.incremental {
        if let Some(base) = &ctx.base_commit {
            let (root, base, g, d) = (
                ctx.repo_root.clone(),
                base.clone(),
                gate.clone(),
                dir_in_repo.clone(),
            );
            let changes = tokio::task::spawn_blocking(move || {
                crate::incremental::relevant_changes(&root, &base, &g, &d)
            })
            .await;
            match changes {
                Ok(Ok(files)) if files.is_empty() => {
                    let mut r = skipped(
                        gate,
                        ctx,
                        format!(
                            "incremental: no relevant file changed since {}",
                            short(ctx.base_commit.as_deref())
                        ),
                        true,
                    );
                    r.duration_ms = started.elapsed().as_millis() as u64;
                    return r;
                }
                Ok(Ok(files)) => {
                    if let Some(a) = crate::incremental::substitute(&args, &files) {
                        args = a;
                        census_dir = None;
                    }
                }
                // Cannot tell what changed: run in full, which is always correct.
                _ => {}
            }
        }
    }

    let parts = match (&ctx.cache, &ctx.fingerprint) {
        (Some(cache), Some(fp)) => {
            // The compiler/interpreter the verdict depends on (once per run).
            let toolchain = match gate.toolchain_argv() {
                Some(argv) => {
                    cache
                        .toolchains()
                        .identity(&argv, &ctx.workdir.join(&gate.working_dir))
                        .await
                }
                None => String::new(),
            };
            Some(key_parts(gate, &args, dir_in_repo.clone(), toolchain, fp))
        }
        _ => None,
    };
    if let (Some(cache), Some((parts, fp))) = (&ctx.cache, &parts) {
        if let Some(mut r) = cache.lookup_through(parts, fp.clone()).await {
            // A result stored without the census asked for does not answer.
            if r.census.is_some() || !wants_census(census_dir, gate, &args) {
                finish_hit(&mut r, gate, started);
                return r;
            }
        }
    }

    let dir = ctx.workdir.join(&gate.working_dir);
    let report = census_dir.filter(|_| wants_census(census_dir, gate, &args));
    let mut result = execute(ctx, gate, &args, &dir, report, token).await;
    if !result.passed
        && ctx.rerun
        && !result.timed_out
        && !result.tool_missing
        && !token.is_cancelled()
        && !result.skipped
    {
        let second = execute(ctx, gate, &args, &dir, report, token).await;
        if second.passed {
            let mut r = second;
            r.flaky = true;
            r.outcome = Some(format!(
                "flaky: failed ({}), passed when re-run",
                result.outcome.clone().unwrap_or_default()
            ));
            result = r;
        } else {
            result = second;
        }
    }
    result.duration_ms = started.elapsed().as_millis() as u64;
    if parts.is_some() {
        result.cache = crate::report::CacheSource::Miss;
    }

    if let (Some(cache), Some((parts, _))) = (&ctx.cache, &parts) {
        let storable = !result.skipped
            && !result.flaky
            && !result.tool_missing
            && (result.passed || (gate.cache_failures && !result.timed_out));
        if storable {
            let (cache, p, r) = (cache.clone(), parts.clone(), result.clone());
            let _ = tokio::task::spawn_blocking(move || cache.store(&p, &r)).await;
        }
    }
    result
}

/// The cache key parts of a gate run with `args` on the tree `fp`
/// (restricted to the gate's inputs when it declares some), and that
/// fingerprint.
fn key_parts(
    gate: &Gate,
    args: &[String],
    dir_in_repo: String,
    toolchain: String,
    fp: &Arc<Fingerprint>,
) -> (KeyParts, Arc<Fingerprint>) {
    let fp = match &gate.inputs_set {
        Some(set) => Arc::new(fp.restrict(set)),
        None => fp.clone(),
    };
    let parts = KeyParts {
        fingerprint: fp.hex(),
        gate: gate.name.clone(),
        command: gate.program.clone(),
        args: args.to_vec(),
        working_dir: dir_in_repo,
        env: gate.env.clone(),
        inputs: gate.inputs.clone(),
        toolchain,
    };
    (parts, fp)
}

/// A cached result as this run reports it: its own (lookup) duration and
/// the gate's current `required`.
fn finish_hit(r: &mut GateResult, gate: &Gate, started: Instant) {
    r.duration_ms = started.elapsed().as_millis() as u64;
    r.required = gate.required;
}

fn short(base: Option<&str>) -> String {
    base.map(|b| b.chars().take(12).collect())
        .unwrap_or_default()
}

/// Whether a run with the census in `dir` takes the census of `gate` run with `args`.
fn wants_census(dir: Option<&Path>, gate: &Gate, args: &[String]) -> bool {
    dir.is_some() && crate::census::runner_of(&gate.program, args).is_some()
}

/// The name of `gate`'s report file: the gate's name, safe as a file name.
fn report_name(gate: &Gate) -> String {
    let name: String = gate
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{name}.report")
}

/// A fresh private directory for one gate run's reports under `parent`:
/// mode 0700 (the parent too, when this makes it), a random name, removed
/// when dropped. What the census reads is what this run wrote there.
pub fn private_report_dir(parent: &Path) -> std::io::Result<tempfile::TempDir> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if !parent.is_dir() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)?;
    }
    tempfile::Builder::new()
        .prefix("census-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(parent)
}

/// Runs the gate's process once and turns its outcome into a result (with
/// the census when `census_dir` says where its private report directory
/// goes).
async fn execute(
    ctx: &Ctx,
    gate: &Gate,
    args: &[String],
    dir: &Path,
    census_dir: Option<&Path>,
    token: &CancelToken,
) -> GateResult {
    let mut r = base_result(gate, ctx);
    // Without its private directory a gate runs without a census (never
    // with a report somewhere else).
    let private = census_dir.and_then(|d| private_report_dir(d).ok());
    let plan = private.as_ref().and_then(|d| {
        crate::census::instrument(&gate.program, args, &d.path().join(report_name(gate)))
    });
    let args = plan.as_ref().map_or(args, |p| p.args.as_slice());
    if token.is_cancelled() {
        return skipped(gate, ctx, CANCELLED.into(), false);
    }
    // Held until the process has exited or its group was killed (a re-run
    // asks again): a gate past its timeout gives the slot back at once.
    let Ok(admitted) = ctx.admission.enter(token).await else {
        return skipped(gate, ctx, CANCELLED.into(), false);
    };
    let name = match &ctx.story {
        Some(story) => format!("{} of {story}", gate.name),
        None => gate.name.clone(),
    };
    let mut spec = Spec::new(&gate.program)
        .args(args)
        .cwd(dir)
        .timeout(gate.timeout)
        .tail_bytes(CAPTURE_BYTES)
        .label("gate", name);
    for (k, v) in &ctx.extra_env {
        spec = spec.env(k, v);
    }
    for (k, v) in &gate.env {
        spec = spec.env(k, v);
    }
    // Gates run off the host's network, in one namespace per run (loopback
    // only); they may write their report directory.
    if let Some(policy) = &ctx.sandbox {
        let policy = policy.with_write(private.iter().map(|d| d.path().to_path_buf()));
        spec = spec.sandbox(Arc::new(policy.with_network(ctx.network())));
    }
    let mut running = match spec.spawn() {
        Ok(r) => r,
        Err(e) => {
            let (msg, missing) = match &e {
                SpawnError::NotFound { program } => (
                    format!("tool '{program}' is not installed (not found on PATH); install it or disable gate '{}'", gate.name),
                    true,
                ),
                other => (other.to_string(), false),
            };
            r.tool_missing = missing;
            r.outcome = Some(if missing {
                "tool missing".into()
            } else {
                "could not start".into()
            });
            r.errors
                .push(GateError::message(Severity::Error, msg.clone()));
            r.output_excerpt = msg;
            return r;
        }
    };
    running.hold_until_exit(admitted);
    let outcome: Outcome = running.wait(token).await;
    if !outcome.success() && !outcome.cancelled && !outcome.timed_out {
        if let Some(tool) = launcher_says_missing(&gate.program, args, &outcome) {
            r.tool_missing = true;
            r.outcome = Some("tool missing".into());
            let msg = format!(
                "tool '{tool}' is not installed ({} could not find it); install it or disable gate '{}'",
                gate.program, gate.name
            );
            r.errors.push(GateError::message(Severity::Error, msg));
            r.output_excerpt = outcome.output_excerpt(EXCERPT_BYTES);
            return r;
        }
    }
    if outcome.cancelled {
        let mut s = skipped(gate, ctx, CANCELLED.into(), false);
        s.outcome = Some("cancelled (process group killed)".into());
        s.output_excerpt = outcome.output_excerpt(EXCERPT_BYTES);
        return s;
    }
    let stdout = outcome.stdout.text_lossy();
    let stderr = outcome.stderr.text_lossy();
    if let Some(plan) = &plan {
        if !outcome.timed_out {
            r.census = Some(crate::census::read(plan, &stdout, &stderr, dir));
        }
    }
    let stdout = match &plan {
        Some(plan) => crate::census::plain_output(plan, &stdout).into_owned(),
        None => stdout,
    };
    let output_ok = !gate.fail_on_output || stdout.trim().is_empty();
    r.passed = outcome.success() && output_ok;
    r.timed_out = outcome.timed_out;
    r.outcome = Some(if outcome.success() && !output_ok {
        "exit code 0 but the tool reported problems on stdout".into()
    } else if outcome.timed_out {
        // The limit the user set, not the measured time (a little longer).
        format!("timed out after {} s", gate.timeout.as_secs())
    } else {
        outcome.describe()
    });
    let parser = gate
        .parser
        .as_deref()
        .map(Parser::by_name)
        .unwrap_or_else(|| Parser::for_command(&gate.program, args));
    r.errors = parse::parse(parser, &stdout, &stderr, Some(dir));
    if outcome.timed_out {
        r.errors.insert(
            0,
            GateError::message(
                Severity::Error,
                format!(
                    "gate '{}' timed out after {}s and was killed",
                    gate.name,
                    gate.timeout.as_secs()
                ),
            ),
        );
    } else if !r.passed && !r.errors.iter().any(|e| e.severity == Severity::Error) {
        r.errors.insert(0, parse::fallback(&stdout, &stderr, 2000));
    }
    r.output_excerpt = outcome.output_excerpt(EXCERPT_BYTES);
    r
}

/// Launchers (`cargo clippy`, `npx --no-install eslint`) start fine but then
/// report that the tool itself is missing; that is a missing tool, not a
/// failing check. Returns the tool's name.
fn launcher_says_missing(program: &str, args: &[String], outcome: &Outcome) -> Option<String> {
    let base = Path::new(program).file_name()?.to_str()?;
    let stderr = outcome.stderr.text_lossy();
    let first = args.iter().find(|a| !a.starts_with('-')).cloned();
    let missing = match base {
        "cargo" => {
            stderr.contains("no such command:")
                || stderr.contains("is not installed for the toolchain")
        }
        "npx" => {
            stderr.contains("could not determine executable to run")
                || stderr.contains("npx canceled due to missing packages")
        }
        "npm" | "pnpm" | "yarn" => {
            stderr.contains("Missing script:") || stderr.contains("missing script:")
        }
        "python" | "python3" => stderr.contains("No module named"),
        _ => false,
    };
    missing.then(|| first.unwrap_or_else(|| base.to_string()))
}
