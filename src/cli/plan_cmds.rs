//! `cascade batches`, `cascade deps`, `cascade validate`: the dependency analyzer's commands.
//!
//! Each finds its plan file through `plan_file` (flag, `./prd.json`, Plan
//! Cascade's data directory), loads it through cascade-plan, validates it (unless `deps
//! --no-check`), and renders the result as text for people or as the JSON
//! shapes of CLI.md. Every input problem exits 2 with an `error:` that names
//! the file and what to do.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::anyhow;
use cascade_plan::{
    load_mega, load_prd, load_valid_plan_warned, paths::PlanKind, validate_mega, validate_prd,
    Analysis, CheckError, DepGraph, MegaPlan, PlanWarning, Prd, ValidPlan, ValidationErrors,
};
use clap::Args;
use serde::Serialize;

use super::plan_file::{find_prd, Plan, Project};
use super::{CliResult, Failure, Global, EXIT_OK};

#[derive(Debug, Args)]
pub struct BatchesArgs {
    /// The PRD to read (default: ./prd.json, else the project's Plan Cascade data directory)
    #[arg(long, value_name = "PATH")]
    pub prd: Option<PathBuf>,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DepsArgs {
    /// The PRD to read (default: ./prd.json, ./mega-plan.json, else the
    /// project's Plan Cascade data directory)
    #[arg(long, value_name = "PATH", conflicts_with = "mega")]
    pub prd: Option<PathBuf>,
    /// The mega-plan to read
    #[arg(long, value_name = "PATH")]
    pub mega: Option<PathBuf>,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
    /// Report cycles and unknown dependencies instead of failing on them
    #[arg(long)]
    pub no_check: bool,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The PRD to read (default: ./prd.json, ./mega-plan.json, else the
    /// project's Plan Cascade data directory)
    #[arg(long, value_name = "PATH", conflicts_with = "mega")]
    pub prd: Option<PathBuf>,
    /// The mega-plan to read
    #[arg(long, value_name = "PATH")]
    pub mega: Option<PathBuf>,
    /// Print JSON (`{"valid": bool, "problems": [...]}`) instead of text
    #[arg(long)]
    pub json: bool,
}

/// A loaded plan file of either kind.
enum Loaded {
    Prd(PathBuf, Prd),
    Mega(PathBuf, MegaPlan),
}

impl Loaded {
    fn path(&self) -> &Path {
        match self {
            Loaded::Prd(p, _) | Loaded::Mega(p, _) => p,
        }
    }

    fn warnings(&self) -> &[PlanWarning] {
        match self {
            Loaded::Prd(_, prd) => &prd.warnings,
            Loaded::Mega(_, mega) => &mega.warnings,
        }
    }

    fn validate(&self) -> Result<ValidPlan, ValidationErrors> {
        match self {
            Loaded::Prd(_, prd) => validate_prd(prd),
            Loaded::Mega(_, mega) => validate_mega(mega),
        }
    }

    fn graph(&self) -> DepGraph {
        match self {
            Loaded::Prd(_, prd) => DepGraph::from_prd(prd),
            Loaded::Mega(_, mega) => DepGraph::from_mega(mega),
        }
    }

    /// `(noun, plural)` for messages.
    fn nouns(&self) -> (&'static str, &'static str) {
        match self {
            Loaded::Prd(..) => ("story", "stories"),
            Loaded::Mega(..) => ("feature", "features"),
        }
    }

    fn title(&self, pos: usize) -> &str {
        match self {
            Loaded::Prd(_, prd) => &prd.stories[pos].title,
            Loaded::Mega(_, mega) => {
                let f = &mega.features[pos];
                if f.title.is_empty() {
                    &f.name
                } else {
                    &f.title
                }
            }
        }
    }

    fn status(&self, pos: usize) -> &str {
        match self {
            Loaded::Prd(_, prd) => prd.stories[pos].status_label(),
            Loaded::Mega(_, mega) => mega.features[pos].status_label(),
        }
    }
}

/// Loads the file [`Project::find_either`] picks: `--mega`, `--prd`, else
/// `./prd.json`, `./mega-plan.json`, then the same in the project's Plan
/// Cascade data directory.
fn load_either(prd: Option<PathBuf>, mega: Option<PathBuf>) -> Result<(Loaded, Plan), Failure> {
    let plan = Project::current()?.find_either(prd.as_deref(), mega.as_deref())?;
    let path = plan.path.clone();
    let loaded = match plan.kind {
        PlanKind::Mega => Loaded::Mega(path.clone(), load_mega(&path).map_err(Failure::usage)?),
        PlanKind::Prd => Loaded::Prd(path.clone(), load_prd(&path).map_err(Failure::usage)?),
    };
    warn(loaded.warnings());
    Ok((loaded, plan))
}

/// Prints what reading a plan accepted but probably was not meant.
fn warn(warnings: &[PlanWarning]) {
    for w in warnings {
        errln!("warning: {w}");
    }
}

/// `"plan_file"` and `"plan_source"` (flag|project|data_dir) for JSON outputs.
fn plan_fields(plan: &Plan) -> serde_json::Value {
    serde_json::json!({"plan_file": plan.path.display().to_string(),
        "plan_source": plan.source.as_str()})
}

fn invalid(path: &Path, e: &ValidationErrors) -> Failure {
    Failure::usage(anyhow!(
        "{}: {e}\nfix these and run `cascade validate` again",
        path.display()
    ))
}

/// Maps an output error to the command's result: a closed pipe
/// (`cascade batches | head`) ends the command quietly with success.
fn output_result(r: std::io::Result<()>) -> CliResult {
    match r {
        Ok(()) => Ok(EXIT_OK),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(EXIT_OK),
        Err(e) => Err(Failure::failed(anyhow!("cannot write output: {e}"))),
    }
}

/// Terminal styling, only when stdout is a terminal and NO_COLOR is unset.
struct Style {
    on: bool,
}

impl Style {
    fn detect() -> Style {
        Style {
            on: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        }
    }
    fn bold(&self, s: &str) -> String {
        self.wrap("1", s)
    }
    fn dim(&self, s: &str) -> String {
        self.wrap("2", s)
    }
    fn accent(&self, s: &str) -> String {
        self.wrap("33", s)
    }
    fn wrap(&self, code: &str, s: &str) -> String {
        if self.on {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_owned()
        }
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

// ---------------------------------------------------------------- batches

pub fn batches(_g: &Global, a: BatchesArgs) -> CliResult {
    let found = find_prd(a.prd.as_deref())?;
    let path = found.path.clone();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, super::out::stdout());
    if a.json {
        // The JSON needs ids only: skip building the model (titles,
        // criteria, ...), which is most of the time on large plans.
        let (plan, warnings) = load_valid_plan_warned(&path).map_err(|e| match e {
            CheckError::Parse(e) => Failure::usage(e),
            CheckError::Invalid(e) => invalid(&path, &e),
        })?;
        warn(&warnings);
        let result = write_batches_json(&mut out, &plan, &found).and_then(|()| out.flush());
        return output_result(result);
    }
    let prd = load_prd(&path).map_err(Failure::usage)?;
    warn(&prd.warnings);
    let plan = validate_prd(&prd).map_err(|e| invalid(&path, &e))?;
    let loaded = Loaded::Prd(path, prd);
    let result = write_batches_text(&mut out, &loaded, &plan).and_then(|()| out.flush());
    output_result(result)
}

/// `{"batches": [["story-001"], ["story-002", "story-003"]], "plan_file": ..., "plan_source": ...}`.
fn write_batches_json(out: &mut impl Write, plan: &ValidPlan, found: &Plan) -> std::io::Result<()> {
    out.write_all(b"{\"batches\":[")?;
    for (b, batch) in plan.batch_positions().enumerate() {
        if b > 0 {
            out.write_all(b",")?;
        }
        out.write_all(b"[")?;
        for (i, &pos) in batch.iter().enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            // Valid ids are plain ASCII without quotes or backslashes.
            out.write_all(b"\"")?;
            out.write_all(plan.id_str(pos as usize).as_bytes())?;
            out.write_all(b"\"")?;
        }
        out.write_all(b"]")?;
    }
    out.write_all(b"],\"plan_file\":")?;
    serde_json::to_writer(&mut *out, &found.path.display().to_string())?;
    out.write_all(b",\"plan_source\":")?;
    serde_json::to_writer(&mut *out, found.source.as_str())?;
    out.write_all(b"}\n")
}

fn write_batches_text(
    out: &mut impl Write,
    loaded: &Loaded,
    plan: &ValidPlan,
) -> std::io::Result<()> {
    let st = Style::detect();
    let critical: std::collections::HashSet<usize> = plan
        .critical_path()
        .iter()
        .filter_map(|id| plan.position(id))
        .collect();
    let total = plan.len();
    let pending = plan.pending_len();
    writeln!(
        out,
        "{}: {}, {} to do in {}",
        loaded.path().display(),
        plural(total, "story", "stories"),
        pending,
        plural(plan.batch_count(), "batch", "batches"),
    )?;
    if total == 0 {
        writeln!(out, "nothing to schedule: the PRD has no stories")?;
        return Ok(());
    }
    if pending == 0 {
        writeln!(out, "nothing to schedule: every story is complete")?;
        return Ok(());
    }
    let width = plan
        .batch_positions()
        .flat_map(|b| b.iter())
        .map(|&p| plan.id_str(p as usize).len())
        .max()
        .unwrap_or(0);
    for (b, batch) in plan.batch_positions().enumerate() {
        writeln!(out)?;
        let size = if batch.len() == 1 {
            "1 story".to_owned()
        } else {
            format!("{} stories, can run in parallel", batch.len())
        };
        writeln!(
            out,
            "{} {}",
            st.bold(&format!("Batch {}", b + 1)),
            st.dim(&format!("({size})"))
        )?;
        for &pos in batch {
            let node = plan.node_at(pos as usize);
            let mark = if critical.contains(&(pos as usize)) {
                "*"
            } else {
                " "
            };
            let deps: Vec<&str> = node.dependencies().map(|d| d.as_str()).collect();
            let after = if deps.is_empty() {
                String::new()
            } else {
                st.dim(&format!("  (after {})", deps.join(", ")))
            };
            writeln!(
                out,
                "  {} {:<width$}  {:<9} {}{}",
                st.accent(mark),
                node.id_str(),
                format!("[{}]", node.priority()),
                super::report::printable_line(loaded.title(pos as usize)),
                after,
            )?;
        }
    }
    writeln!(out)?;
    let cp: Vec<&str> = plan.critical_path().iter().map(|s| s.as_str()).collect();
    writeln!(
        out,
        "{} critical path ({}): {}",
        st.accent("*"),
        plural(cp.len(), "story", "stories"),
        cp.join(" -> ")
    )?;
    let done: Vec<&str> = plan
        .nodes()
        .filter(|n| n.is_complete())
        .map(|n| n.id_str())
        .collect();
    if !done.is_empty() {
        writeln!(
            out,
            "already complete ({}): {}",
            done.len(),
            abbreviate(&done, 20)
        )?;
    }
    Ok(())
}

/// `a, b, c and 17 more`.
fn abbreviate(items: &[&str], max: usize) -> String {
    if items.len() <= max {
        items.join(", ")
    } else {
        format!("{} and {} more", items[..max].join(", "), items.len() - max)
    }
}

// ---------------------------------------------------------------- deps

#[derive(Serialize)]
struct DepsJson<'a> {
    nodes: Vec<NodeJson<'a>>,
    roots: Vec<&'a str>,
    critical_path: Vec<&'a str>,
    critical_path_len: u64,
    cycles: Vec<Vec<&'a str>>,
    bottlenecks: Vec<&'a str>,
    orphans: Vec<&'a str>,
    unknown_dependencies: Vec<UnknownJson<'a>>,
    plan_file: String,
    plan_source: &'static str,
}

#[derive(Serialize)]
struct NodeJson<'a> {
    id: &'a str,
    dependencies: Vec<&'a str>,
    dependents: Vec<&'a str>,
    depth: Option<u32>,
    priority: &'static str,
    status: &'a str,
}

#[derive(Serialize)]
struct UnknownJson<'a> {
    id: &'a str,
    dependency: &'a str,
}

pub fn deps(_g: &Global, a: DepsArgs) -> CliResult {
    let (loaded, found) = load_either(a.prd, a.mega)?;
    if !a.no_check {
        if let Err(e) = loaded.validate() {
            let hint = if a.json {
                ""
            } else {
                " (or see the graph anyway with --no-check)"
            };
            return Err(Failure::usage(anyhow!(
                "{}: {e}\nfix these and run `cascade validate` again{hint}",
                loaded.path().display()
            )));
        }
    }
    let graph = loaded.graph();
    let analysis = Analysis::of(&graph);
    let mut out = std::io::BufWriter::new(super::out::stdout());
    let result = if a.json {
        let json = deps_json(&loaded, &graph, &analysis, &found);
        serde_json::to_writer(&mut out, &json)
            .map_err(std::io::Error::from)
            .and_then(|()| out.write_all(b"\n"))
    } else {
        write_deps_text(&mut out, &loaded, &graph, &analysis)
    };
    output_result(result.and_then(|()| out.flush()))
}

fn deps_json<'a>(
    loaded: &'a Loaded,
    g: &'a DepGraph,
    a: &'a Analysis,
    found: &Plan,
) -> DepsJson<'a> {
    let ids = |v: &[u32]| v.iter().map(|&p| g.id(p as usize)).collect::<Vec<_>>();
    let names = |v: &[usize]| v.iter().map(|&p| g.id(p)).collect::<Vec<_>>();
    DepsJson {
        nodes: (0..g.len())
            .map(|p| NodeJson {
                id: g.id(p),
                dependencies: ids(g.dependencies(p)),
                dependents: ids(g.dependents(p)),
                depth: a.depth[p],
                priority: g.priority(p).as_str(),
                status: loaded.status(p),
            })
            .collect(),
        roots: names(&a.roots),
        critical_path: names(&a.critical_path),
        critical_path_len: a.critical_path_len,
        cycles: a.cycles.iter().map(|c| names(&c.path)).collect(),
        bottlenecks: names(&a.bottlenecks),
        orphans: names(&a.orphans),
        unknown_dependencies: g
            .unknown_dependencies()
            .map(|(p, d)| UnknownJson {
                id: g.id(p),
                dependency: d,
            })
            .collect(),
        plan_file: found.path.display().to_string(),
        plan_source: found.source.as_str(),
    }
}

fn write_deps_text(
    out: &mut impl Write,
    loaded: &Loaded,
    g: &DepGraph,
    a: &Analysis,
) -> std::io::Result<()> {
    let st = Style::detect();
    let (noun, nouns) = loaded.nouns();
    let list = |v: &[usize]| -> String {
        let names: Vec<&str> = v.iter().map(|&p| g.id(p)).collect();
        if names.is_empty() {
            "none".into()
        } else {
            abbreviate(&names, 30)
        }
    };
    writeln!(
        out,
        "{}: {}, {}{}",
        loaded.path().display(),
        plural(g.len(), noun, nouns),
        plural(g.edge_count(), "dependency", "dependencies"),
        match a.max_depth() {
            Some(d) => format!(", depth {d}"),
            None => String::new(),
        }
    )?;
    if g.is_empty() {
        writeln!(out, "nothing to analyze: the plan has no {nouns}")?;
        return Ok(());
    }
    writeln!(out)?;
    let cp: Vec<&str> = a.critical_path.iter().map(|&p| g.id(p)).collect();
    writeln!(
        out,
        "{} {}",
        st.bold("critical path:"),
        if cp.is_empty() {
            "none".to_owned()
        } else {
            format!(
                "{}  ({} {})",
                cp.join(" -> "),
                a.critical_path_len,
                if a.critical_path_len == 1 {
                    "step"
                } else {
                    "steps"
                }
            )
        }
    )?;
    writeln!(out, "{} {}", st.bold("roots:"), list(&a.roots))?;
    let bottlenecks: Vec<String> = a
        .bottlenecks
        .iter()
        .take(30)
        .map(|&p| format!("{} ({} dependents)", g.id(p), g.dependents(p).len()))
        .collect();
    writeln!(
        out,
        "{} {}{}",
        st.bold("bottlenecks:"),
        if bottlenecks.is_empty() {
            "none".to_owned()
        } else {
            bottlenecks.join(", ")
        },
        if a.bottlenecks.len() > 30 {
            format!(" and {} more", a.bottlenecks.len() - 30)
        } else {
            String::new()
        }
    )?;
    writeln!(out, "{} {}", st.bold("orphans:"), list(&a.orphans))?;
    if a.cycles.is_empty() {
        writeln!(out, "{} none", st.bold("cycles:"))?;
    } else {
        writeln!(out, "{} {}", st.bold("cycles:"), a.cycles.len())?;
        for c in &a.cycles {
            let path: Vec<&str> = c.path.iter().map(|&p| g.id(p)).collect();
            writeln!(out, "  {}", st.accent(&path.join(" -> ")))?;
        }
    }
    let unknown: Vec<String> = g
        .unknown_dependencies()
        .map(|(p, d)| format!("{} -> {d}", g.id(p)))
        .collect();
    if !unknown.is_empty() {
        writeln!(
            out,
            "{} {}",
            st.bold("unknown dependencies:"),
            unknown.join(", ")
        )?;
    }

    writeln!(out)?;
    let on_path: std::collections::HashSet<usize> = a.critical_path.iter().copied().collect();
    let names = |v: &[u32]| -> String {
        let v: Vec<&str> = v.iter().map(|&d| g.id(d as usize)).collect();
        if v.is_empty() {
            "-".to_owned()
        } else {
            abbreviate(&v, 8)
        }
    };
    let width = (0..g.len())
        .map(|p| g.id(p).len())
        .max()
        .unwrap_or(0)
        .max(noun.len());
    let status_width = (0..g.len())
        .map(|p| loaded.status(p).len())
        .max()
        .unwrap_or(0)
        .max(6);
    let needs_width = (0..g.len())
        .map(|p| names(g.dependencies(p)).len())
        .max()
        .unwrap_or(0)
        .clamp(5, 48);
    writeln!(
        out,
        "  {:<width$}  {:>5}  {:<status_width$}  {:<needs_width$}  needed by",
        noun, "depth", "status", "needs"
    )?;
    for p in 0..g.len() {
        let mark = if on_path.contains(&p) { "*" } else { " " };
        let depth = a.depth[p].map_or("-".to_owned(), |d| d.to_string());
        writeln!(
            out,
            "{} {:<width$}  {:>5}  {:<status_width$}  {:<needs_width$}  {}",
            st.accent(mark),
            g.id(p),
            depth,
            loaded.status(p),
            names(g.dependencies(p)),
            names(g.dependents(p)),
        )?;
    }
    writeln!(
        out,
        "\n{} on the critical path; depth = longest chain of dependencies below",
        st.accent("*")
    )?;
    Ok(())
}

// ---------------------------------------------------------------- validate

pub fn validate(g: &Global, a: ValidateArgs) -> CliResult {
    let project = Project::current()?;
    let found = project.find_either(a.prd.as_deref(), a.mega.as_deref())?;
    let path = found.path.clone();
    // The plan: a file that cannot be read is one problem (an unknown story
    // status is one per story); a readable one is validated.
    let loaded = match found.kind {
        PlanKind::Mega => load_mega(&path).map(|m| Loaded::Mega(path.clone(), m)),
        PlanKind::Prd => load_prd(&path).map(|p| Loaded::Prd(path.clone(), p)),
    };
    let (plan, plan_error, mut warnings) = match &loaded {
        Ok(l) => {
            let warnings = l.warnings().iter().map(ToString::to_string).collect();
            match l.validate() {
                Ok(plan) => (Some(plan), None, warnings),
                Err(e) => (None, Some((e.messages(), invalid(&path, &e))), warnings),
            }
        }
        Err(e) => {
            let (messages, warnings) = match e {
                cascade_plan::PlanError::Vocabulary {
                    problems, warnings, ..
                } => (
                    problems.clone(),
                    warnings.iter().map(ToString::to_string).collect(),
                ),
                other => (vec![other.to_string()], Vec::new()),
            };
            let text = super::render_error(&anyhow!("{e}"));
            (
                None,
                Some((messages, Failure::usage(anyhow!(text)))),
                warnings,
            )
        }
    };
    // The other files a run reads, as a run reads them.
    // A PRD that could not be loaded (an unknown status) still has its
    // `quality_gates` checked, taken from the file's JSON as it is.
    let raw_gates = match (&loaded, &found.kind) {
        (Err(_), PlanKind::Prd) => std::fs::read(&path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
            .and_then(|mut v| v.get_mut("quality_gates").map(serde_json::Value::take)),
        _ => None,
    };
    let quality_gates = match &loaded {
        Ok(Loaded::Prd(_, prd)) => prd.quality_gates.as_ref(),
        _ => raw_gates.as_ref(),
    };
    let mut others = super::config_check::check(g.agents.as_deref(), &project.cwd, quality_gates);
    // A plan and files that pass on their own: the rest a run would refuse.
    if let (Ok(Loaded::Prd(prd, _)), None, true) = (&loaded, &plan_error, others.errors.is_empty())
    {
        if let Some(e) = super::config_check::check_run_inputs(g, &project.cwd, prd) {
            others.errors.push(e);
        }
    }
    warnings.extend(others.warnings);
    for w in &warnings {
        errln!("warning: {w}");
    }
    let mut problems: Vec<String> = plan_error
        .as_ref()
        .map(|(m, _)| m.clone())
        .unwrap_or_default();
    problems.extend(others.errors.iter().cloned());
    if a.json {
        let mut v = serde_json::json!({"valid": problems.is_empty(), "problems": problems,
            "warnings": warnings});
        if let (Some(plan), Ok(l)) = (&plan, &loaded) {
            let (_, nouns) = l.nouns();
            merge_fields(
                &mut v,
                serde_json::json!({nouns: plan.len(), "pending": plan.pending_len(),
                    "dependencies": plan.graph().edge_count(), "batches": plan.batch_count()}),
            );
        }
        merge_fields(&mut v, plan_fields(&found));
        // On failure the error below is what matters; a closed stdout is no
        // reason to hide it.
        let shown = writeln!(super::out::stdout(), "{v}");
        if problems.is_empty() {
            return output_result(shown);
        }
    }
    match (plan_error, others.errors.is_empty()) {
        (None, true) => {
            if a.json {
                return Ok(EXIT_OK);
            }
            let (Some(plan), Ok(l)) = (plan, loaded) else {
                return Ok(EXIT_OK);
            };
            let (noun, nouns) = l.nouns();
            let line = format!(
                "{} is valid: {} ({} to do), {}, {}",
                l.path().display(),
                plural(plan.len(), noun, nouns),
                plan.pending_len(),
                plural(plan.graph().edge_count(), "dependency", "dependencies"),
                plural(plan.batch_count(), "batch", "batches"),
            );
            output_result(writeln!(super::out::stdout(), "{line}"))
        }
        (Some((_, failure)), true) => Err(failure),
        (plan_error, false) => {
            let mut text = plan_error
                .map(|(_, f)| format!("{}\n", super::render_error(&f.error)))
                .unwrap_or_default();
            text.push_str(&others.errors.join("\n"));
            Err(Failure::usage(anyhow!(text)))
        }
    }
}

/// Adds the fields of object `extra` to object `v`.
fn merge_fields(v: &mut serde_json::Value, extra: serde_json::Value) {
    if let (Some(v), serde_json::Value::Object(extra)) = (v.as_object_mut(), extra) {
        v.extend(extra);
    }
}
