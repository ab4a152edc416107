//! Quality gates for cascade: configuration, project detection, the gate
//! runner, the content-hash gate cache and structured error parsing.
//! It knows nothing about agents or stories.
//!
//! # API summary (what the engine codes against)
//!
//! ```text
//! GateSet::resolve(prd_quality_gates: Option<&serde_json::Value>, cascade_dir: &Path,
//!                  project_root: &Path) -> Result<GateSet, GateConfigError>
//!     // <cascade_dir>/gates.json overrides prd.json's quality_gates; nothing
//!     // configured => default gates of the detected project types.
//!     GateSet { enabled, fail_fast, use_cache, rerun_failures, gates: Vec<Gate>, source,
//!               remote: Option<RemoteConfig> }   // Gate { .., toolchain: Option<Vec<String>> }
//! GateCache::open(cascade_dir) -> GateCache          // Clone = shared; never fails a run
//!     .with_remote(Option<RemoteCache>)               // read-through / write-through tier
//!     .stats() -> CacheStats{entries, bytes, hits, misses, time_saved_ms, local_hits,
//!                            remote_hits, remote_time_saved_ms, bytes_downloaded, uploads,
//!                            bytes_uploaded}
//!     .clear() -> io::Result<usize>, .explain() -> Vec<MissExplanation{.., remote}>,
//!     .prune(), .load_all(), .flush_remote(bound).await, .take_remote_warnings()
//! RemoteSettings::resolve(&RemoteRequest{url, mode}, Option<&RemoteConfig>)
//!     -> Result<Option<RemoteSettings>, RemoteError>   // flag > CASCADE_REMOTE_CACHE > gates.json
//! RemoteCache::connect(settings) -> Result<RemoteCache, RemoteError>
//!     // object_store (feature `remote`: file://; `remote-cloud`: s3/gs/az/http);
//!     // entries HMAC-SHA256-signed with CASCADE_CACHE_SECRET; create-only puts
//! run_gates(&GateSet, &RunOptions{ workdir, repo_root: Option<PathBuf>,
//!           base_commit: Option<String>, use_cache, rerun_failures, fail_fast },
//!           &GateCache, on_event: impl Fn(GateEvent), &CancelToken).await -> GateReport
//!     GateEvent::{Started{name, command}, Finished(GateResult), CacheUnavailable{reason},
//!                 RemoteWarning{message}}
//!     // = runner::prepare(&set, &opts) (blocking: where, and the fingerprint)
//!     //   + runner::run_prepared(&set, &opts, prepared, &env, &cache, on_event, &cancel).await
//! runner::answer_from_cache(&set, &opts, prepared, &cache, on_event)
//!     -> Result<GateReport, Prepared>   // every gate a local hit: no runtime, no process
//! GateReport { passed, gates: Vec<GateResult> }
//!     .summary_for_prompt(max_errors) -> String   // errors before warnings, "... and K more"
//!     .summary_line(), .failed(), .skipped(), .cached()
//! GateResult { name, passed, required, cached, cache: CacheSource::{Local,Remote,Miss,Off}, skipped, skip_reason, flaky, tool_missing,
//!              timed_out, duration_ms, original_duration_ms, command, working_dir,
//!              outcome, errors: Vec<GateError>, output_excerpt }
//! GateError { file, line, column, code, message, severity: Severity::{Error,Warning,Note} }
//! parse::{parse(Parser, stdout, stderr, base), Parser::for_command(program, args)}
//! ```
//!
//! Every gate's key includes its toolchain identity ([`toolchain`]: `rustc -vV`,
//! `node --version`... or the gate's `toolchain` argv), computed once per cache
//! and, without a remote tier, remembered across runs while its inputs
//! (environment, program, version pins) are unchanged.
//!
//! `RunOptions::fail_fast`/`rerun_failures` are OR-ed with the set's flags and
//! `use_cache` is AND-ed. Fail-fast cancels the running gates' tokens, so
//! `cascade-process` kills their whole process groups; gates that never ran
//! are reported `skipped` with the reason. A failed gate re-run once that then
//! passes is `passed` with `flaky: true` (and not cached). A gate whose program
//! is missing fails with `tool_missing: true`.
//!
//! ```no_run
//! # async fn demo() {
//! use cascade_gates::{run_gates, GateCache, GateSet, RunOptions};
//! use std::path::Path;
//! let root = Path::new("/tmp/project");
//! let cascade_dir = root.join(".cascade");
//! let set = GateSet::resolve(None, &cascade_dir, root).expect("valid config");
//! let cache = GateCache::open(&cascade_dir);
//! let opts = RunOptions { workdir: root.into(), use_cache: true, ..Default::default() };
//! let report = run_gates(&set, &opts, &cache, |_e| {}, &Default::default()).await;
//! println!("{}", report.summary_line());
//! # }
//! ```

pub mod cache;
pub mod census;
pub mod config;
pub mod detect;
pub mod incremental;
pub mod parse;
pub mod report;
pub mod runner;
pub mod toolchain;

pub use cache::remote::{RemoteConfig, RemoteError, RemoteMode, RemoteRequest, RemoteSettings};
pub use cache::{CacheStats, GateCache, KeyParts, MissExplanation, RemoteCache, RemoteNote};
pub use census::{Census, CensusRunner, TestOutcome};
pub use config::{ConfigSource, Gate, GateConfigError, GateKind, GateSet};
pub use report::{CacheSource, GateError, GateReport, GateResult, Severity};
pub use runner::{run_gates, run_gates_in, GateEnv, GateEvent, Prepared, RunOptions};
