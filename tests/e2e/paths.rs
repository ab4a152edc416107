//! End-to-end tests of plan discovery through Plan Cascade's user data
//! directory (`$HOME/.plan-cascade/<project-id>/`) and of `cascade paths`.
//!
//! Every test sets HOME to its own temporary directory, lays out a data
//! directory the way Plan Cascade does (`manifest.json` + `prd.json`), and
//! checks which file each command reads and writes: legacy mode (`./prd.json`),
//! new mode (only in the data directory; also from a subdirectory and a
//! linked worktree), both (the project's wins, with a warning), none, and a
//! manifest naming another project. A full `approve --auto-run` with a
//! scripted agent updates the statuses in the data directory's file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{cascade, git, init_repo, script, write_json};

/// A repository, a HOME of its own and a tools dir (agent script, agents.json).
struct Env {
    repo: tempfile::TempDir,
    home: tempfile::TempDir,
    tools: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let env = Env {
            repo: init_repo(),
            home: tempfile::tempdir().expect("home"),
            tools: tempfile::tempdir().expect("tools"),
        };
        let t = env.tools.path().display().to_string();
        // Writes `<story>.txt`, records the prompt, and says where it ran.
        script(
            &env.tools.path().join("agent.sh"),
            &format!(
                r#"id="$CASCADE_STORY_ID"
cp "$CASCADE_PROMPT_FILE" '{t}'/"prompt-$id.md"
printf '%s\n' "$id" > "$id.txt""#
            ),
        );
        write_json(
            &env.tools.path().join("agents.json"),
            // With phase_defaults: the checks below expect no warning at
            // all (one without it gets a notice saying what that means).
            &json!({"default_agent": "scripted", "agents": {"scripted": {
                "type": "cli", "command": env.tools.path().join("agent.sh").display().to_string(),
                "args": [], "timeout": 60}},
                "phase_defaults": {"implementation": {"default_agent": "scripted"}}}),
        );
        env
    }

    fn repo(&self) -> PathBuf {
        self.repo.path().canonicalize().expect("repo path")
    }

    /// `cascade` in `dir` with HOME set to this test's home.
    fn cascade_in(&self, dir: &Path) -> assert_cmd::Command {
        let mut cmd = cascade(dir);
        cmd.env("HOME", self.home.path())
            .env_remove("APPDATA")
            .timeout(Duration::from_secs(120));
        cmd
    }

    fn cascade(&self) -> assert_cmd::Command {
        self.cascade_in(&self.repo())
    }

    /// This project's data directory, created like Plan Cascade does
    /// (`manifest.json` naming `manifest_root`).
    fn data_dir(&self, manifest_root: &Path) -> PathBuf {
        let id = cascade_plan::paths::project_id(&self.repo());
        let dir = self.home.path().join(".plan-cascade").join(&id);
        write_json(
            &dir.join("manifest.json"),
            &json!({"project_root": manifest_root.display().to_string(), "project_id": id,
                "created_at": "2026-01-28T10:00:00Z", "platform": "linux"}),
        );
        dir
    }
}

/// A PRD of stories `a` and `b` (b after a), with one gate that passes.
fn prd(goal: &str) -> Value {
    json!({
        "metadata": {"version": "1.0"},
        "goal": goal,
        "stories": [
            {"id": "a", "title": "A", "priority": "high", "dependencies": [], "status": "pending"},
            {"id": "b", "title": "B", "priority": "medium", "dependencies": ["a"], "status": "pending"}
        ],
        "quality_gates": {"enabled": true, "gates": [
            {"name": "readme", "type": "test", "command": "test", "args": ["-f", "README.md"], "required": true}
        ]}
    })
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json_of(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", stdout(out), stderr(out)))
}

#[test]
fn new_mode_plan_only_in_the_data_directory() {
    let env = Env::new();
    let repo = env.repo();
    let data = env.data_dir(&repo);
    let prd_path = data.join("prd.json");
    write_json(&prd_path, &prd("from the data dir"));
    let shown = prd_path.display().to_string();

    // The first line names the file, and so does the JSON.
    let out = env.cascade().arg("batches").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let first = stdout(&out).lines().next().unwrap_or_default().to_string();
    assert!(first.starts_with(&format!("{shown}: 2 stories")), "{first}");
    let v = json_of(&env.cascade().args(["batches", "--json"]).output().unwrap());
    assert_eq!(v["batches"], json!([["a"], ["b"]]));
    assert_eq!(v["plan_file"], json!(shown));
    assert_eq!(v["plan_source"], "data_dir");

    // From a subdirectory of the project: the same file.
    let sub = repo.join("src/deep");
    std::fs::create_dir_all(&sub).unwrap();
    let v = json_of(
        &env.cascade_in(&sub)
            .args(["batches", "--json"])
            .output()
            .unwrap(),
    );
    assert_eq!(v["plan_file"], json!(shown));

    // From a linked worktree of the repository: the same file.
    let wt = env.home.path().join("linked-wt");
    git(
        &repo,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "side",
            &wt.display().to_string(),
        ],
    );
    let v = json_of(
        &env.cascade_in(&wt)
            .args(["validate", "--json"])
            .output()
            .unwrap(),
    );
    assert_eq!(v["valid"], true);
    assert_eq!(v["plan_file"], json!(shown));
    assert_eq!(v["plan_source"], "data_dir");

    // deps and agents resolve read it too.
    let v = json_of(&env.cascade().args(["deps", "--json"]).output().unwrap());
    assert_eq!(v["plan_source"], "data_dir");
    assert_eq!(v["critical_path"], json!(["a", "b"]));
    let out = env
        .cascade()
        .args(["agents", "resolve", "--json", "--agents"])
        .arg(env.tools.path().join("agents.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json_of(&out);
    assert_eq!(v["plan_file"], json!(shown));
    assert_eq!(v["assignments"][0]["agent"], "scripted");
    // No warnings, and nothing was written to the data directory.
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));

    // No run yet: status says which file approve would run.
    let v = json_of(&env.cascade().args(["status", "--json"]).output().unwrap());
    assert_eq!(v["status"], "none");
    assert_eq!(v["prd"], json!(shown));

    // cascade paths: new mode, the manifest confirms the project.
    let v = json_of(&env.cascade().args(["paths", "--json"]).output().unwrap());
    assert_eq!(v["mode"], "new");
    assert_eq!(v["data_dir"], json!(data.display().to_string()));
    assert_eq!(v["data_dir_state"], "ours");
    assert_eq!(v["project_root"], json!(repo.display().to_string()));
    assert_eq!(v["manifest"]["platform"], "linux");
    let files = v["files"].as_array().unwrap();
    let prd_row = files.iter().find(|f| f["name"] == "prd.json").unwrap();
    assert_eq!(prd_row["path"], json!(shown));
    assert_eq!(prd_row["location"], "data_dir");
    assert_eq!(prd_row["exists"], true);
    let state_row = files.iter().find(|f| f["name"] == "run state").unwrap();
    assert_eq!(
        state_row["path"],
        json!(repo.join(".cascade/cascade.db").display().to_string())
    );
    let progress = files.iter().find(|f| f["name"] == "progress.txt").unwrap();
    assert_eq!(
        progress["path"],
        json!(repo.join("progress.txt").display().to_string())
    );
    // `cascade plan` would write plan files to the data directory, the design doc to the project.
    assert_eq!(v["plan_output"]["place"], "data_dir");
    assert_eq!(
        v["plan_output"]["plan_dir"],
        json!(data.display().to_string())
    );
    assert_eq!(
        v["plan_output"]["design_doc_dir"],
        json!(repo.display().to_string())
    );
    let text = stdout(&env.cascade().arg("paths").output().unwrap());
    assert!(text.contains("mode:           new"), "{text}");
    assert!(text.contains(&shown), "{text}");
}

#[test]
fn legacy_mode_uses_the_project_file() {
    let env = Env::new();
    let repo = env.repo();
    write_json(&repo.join("prd.json"), &prd("legacy"));
    let v = json_of(&env.cascade().args(["batches", "--json"]).output().unwrap());
    assert_eq!(v["plan_file"], "prd.json");
    assert_eq!(v["plan_source"], "project");
    let v = json_of(&env.cascade().args(["paths", "--json"]).output().unwrap());
    assert_eq!(v["mode"], "legacy");
    assert_eq!(v["data_dir_state"], "missing");
    assert_eq!(v["plan_output"]["place"], "project");
    // Without a home there is no data directory: legacy mode still works.
    let v = json_of(
        &env.cascade()
            .env_remove("HOME")
            .args(["paths", "--json"])
            .output()
            .unwrap(),
    );
    assert_eq!(v["data_dir"], Value::Null);
    assert_eq!(v["data_dir_state"], "no_home");
    assert_eq!(v["mode"], "legacy");
    // --prd wins over everything.
    write_json(&repo.join("other.json"), &prd("other"));
    let v = json_of(
        &env.cascade()
            .args(["batches", "--json", "--prd", "other.json"])
            .output()
            .unwrap(),
    );
    assert_eq!(v["plan_file"], "other.json");
    assert_eq!(v["plan_source"], "flag");
}

#[test]
fn both_places_project_wins_and_the_warning_names_both() {
    let env = Env::new();
    let repo = env.repo();
    let data = env.data_dir(&repo);
    write_json(&repo.join("prd.json"), &prd("project copy"));
    write_json(&data.join("prd.json"), &prd("data dir copy"));
    let out = env.cascade().args(["batches", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json_of(&out)["plan_source"], "project");
    let err = stderr(&out);
    assert!(err.starts_with("warning: "), "{err}");
    assert!(
        err.contains(&repo.join("prd.json").display().to_string()),
        "{err}"
    );
    assert!(
        err.contains(&data.join("prd.json").display().to_string()),
        "{err}"
    );
    // The same contents: no warning.
    std::fs::copy(repo.join("prd.json"), data.join("prd.json")).unwrap();
    let out = env.cascade().args(["batches", "--json"]).output().unwrap();
    assert_eq!(stderr(&out), "");
}

#[test]
fn no_plan_anywhere_names_both_places() {
    let env = Env::new();
    let repo = env.repo();
    let out = env.cascade().arg("batches").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.starts_with("error: prd.json not found in "), "{err}");
    assert!(err.contains(".plan-cascade"), "{err}");
    assert!(err.contains("--prd PATH"), "{err}");
    let v = json_of(&env.cascade().args(["paths", "--json"]).output().unwrap());
    assert_eq!(v["mode"], "none");
    let id = v["project_id"].as_str().unwrap();
    // Temp dirs are named `.tmpXXXXXX`: the dot goes, the rest is lowercased.
    let name = repo.file_name().unwrap().to_string_lossy().replace('.', "");
    assert!(id.starts_with(&format!("{}-", name.to_lowercase())), "{id}");
    // The hash, computed by coreutils where it is installed.
    let lowered = repo.display().to_string().to_lowercase();
    let sum = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            if let Some(mut stdin) = child.stdin.take() {
                stdin.write_all(lowered.as_bytes())?;
            }
            child.wait_with_output()
        });
    if let Ok(sum) = sum {
        let text = String::from_utf8_lossy(&sum.stdout);
        if sum.status.success() && text.len() >= 8 {
            assert!(id.ends_with(&format!("-{}", &text[..8])), "{id} vs {text}");
        } else {
            eprintln!("sha256sum not available: hash not cross-checked");
        }
    }
    // A data directory without a plan file: new mode, and a clear error.
    let data = env.data_dir(&repo);
    let out = env.cascade().arg("validate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("no prd.json or mega-plan.json in"), "{err}");
    assert!(err.contains(&data.display().to_string()), "{err}");
    let v = json_of(&env.cascade().args(["paths", "--json"]).output().unwrap());
    assert_eq!(v["mode"], "new");
}

#[test]
fn a_manifest_naming_another_root_is_not_used() {
    let env = Env::new();
    let data = env.data_dir(Path::new("/somewhere/else"));
    write_json(&data.join("prd.json"), &prd("someone else's"));
    let out = env.cascade().arg("batches").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("warning: "), "{err}");
    assert!(err.contains("/somewhere/else"), "{err}");
    assert!(err.contains("prd.json not found"), "{err}");
    let v = json_of(&env.cascade().args(["paths", "--json"]).output().unwrap());
    assert_eq!(v["data_dir_state"], "foreign");
    assert_eq!(v["mode"], "none");
    assert_eq!(v["plan_output"]["place"], "project");
}

#[test]
fn mega_plan_in_the_data_directory_is_found() {
    let env = Env::new();
    let repo = env.repo();
    let data = env.data_dir(&repo);
    write_json(
        &data.join("mega-plan.json"),
        &json!({"goal": "g", "features": [
            {"id": "f1", "name": "one", "title": "One", "dependencies": []},
            {"id": "f2", "name": "two", "title": "Two", "dependencies": ["f1"]}]}),
    );
    let v = json_of(&env.cascade().args(["deps", "--json"]).output().unwrap());
    assert_eq!(
        v["plan_file"],
        json!(data.join("mega-plan.json").display().to_string())
    );
    assert_eq!(v["critical_path"], json!(["f1", "f2"]));
    // Before any run, mega status says which plan `mega approve` would run.
    let out = env.cascade().args(["mega", "status"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(
        text.contains(&data.join("mega-plan.json").display().to_string()),
        "{text}"
    );
}

#[test]
fn approve_updates_statuses_in_the_data_directory() {
    let env = Env::new();
    let repo = env.repo();
    let data = env.data_dir(&repo);
    let prd_path = data.join("prd.json");
    write_json(&prd_path, &prd("run from the data dir"));
    // Plan Cascade keeps design_doc.json in the project in its default mode.
    write_json(
        &repo.join("design_doc.json"),
        &json!({"architecture": {"components": [
            {"name": "Widget", "description": "WIDGET-MARKER component"}]},
            "story_mappings": {"a": {"components": ["Widget"]}}}),
    );
    let manifest_before = std::fs::read(data.join("manifest.json")).unwrap();
    let agents = env.tools.path().join("agents.json");

    let v = json_of(
        &env.cascade()
            .args(["approve", "--dry-run", "--json", "--agents"])
            .arg(&agents)
            .output()
            .unwrap(),
    );
    assert_eq!(v["prd"], json!(prd_path.display().to_string()));
    assert_eq!(v["batches"].as_array().map(Vec::len), Some(2));

    let out = env
        .cascade()
        .args(["approve", "--auto-run", "--retry-delay", "0", "--agents"])
        .arg(&agents)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let first = stdout(&out).lines().next().unwrap_or_default().to_string();
    assert!(first.contains(&prd_path.display().to_string()), "{first}");

    // Statuses were written where the file was found; nothing in the project.
    let after: Value = serde_json::from_slice(&std::fs::read(&prd_path).unwrap()).unwrap();
    let statuses: Vec<&str> = after["stories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["status"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(statuses, ["complete", "complete"], "{after}");
    assert!(!repo.join("prd.json").exists());
    assert!(repo.join("progress.txt").is_file());
    assert_eq!(
        std::fs::read(data.join("manifest.json")).unwrap(),
        manifest_before,
        "manifest.json is never rewritten"
    );
    // The work was merged.
    assert!(repo.join("a.txt").is_file() && repo.join("b.txt").is_file());
    // cascade's own state stays under .cascade/ and records the file.
    let state: Value = crate::common::run_state(&repo);
    assert_eq!(state["prd"], json!(prd_path.display().to_string()));
    let v = json_of(&env.cascade().args(["status", "--json"]).output().unwrap());
    assert_eq!(v["status"], "completed");
    assert_eq!(v["prd"], json!(prd_path.display().to_string()));
    // The design document came from the project.
    let prompt = std::fs::read_to_string(env.tools.path().join("prompt-a.md")).unwrap();
    assert!(prompt.contains("WIDGET-MARKER"), "{prompt}");
}

#[test]
fn resume_keeps_working_on_the_file_the_run_started_with() {
    let env = Env::new();
    let repo = env.repo();
    let data = env.data_dir(&repo);
    let prd_path = data.join("prd.json");
    write_json(&prd_path, &prd("paused run"));
    let agents = env.tools.path().join("agents.json");
    // No terminal and no --yes: one batch, then the run pauses.
    let out = env
        .cascade()
        .args(["approve", "--retry-delay", "0", "--agents"])
        .arg(&agents)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mid: Value = serde_json::from_slice(&std::fs::read(&prd_path).unwrap()).unwrap();
    assert_eq!(mid["stories"][0]["status"], "complete");
    assert_eq!(mid["stories"][1]["status"], "pending");

    // A prd.json appears in the project meanwhile: resume stays on its own file.
    let other = json!({"goal": "unrelated", "stories": [
        {"id": "z", "title": "Z", "dependencies": [], "status": "pending"}]});
    write_json(&repo.join("prd.json"), &other);
    let out = env
        .cascade()
        .args(["resume", "--yes", "--json", "--agents"])
        .arg(&agents)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let started = stdout(&out)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["event"] == "run_started")
        .expect("run_started event");
    assert_eq!(started["prd"], json!(prd_path.display().to_string()));
    let done: Value = serde_json::from_slice(&std::fs::read(&prd_path).unwrap()).unwrap();
    assert_eq!(done["stories"][1]["status"], "complete");
    let untouched: Value =
        serde_json::from_slice(&std::fs::read(repo.join("prd.json")).unwrap()).unwrap();
    assert_eq!(untouched, other);
}

#[test]
fn mega_approve_runs_a_mega_plan_kept_in_the_data_directory() {
    let env = Env::new();
    let repo = env.repo();
    let data = env.data_dir(&repo);
    let plan = data.join("mega-plan.json");
    write_json(
        &plan,
        &json!({"goal": "g", "execution_mode": "auto", "target_branch": "main", "features": [
            {"id": "f1", "name": "one", "title": "One", "description": "Build one.",
             "priority": "high", "dependencies": [], "status": "pending"}]}),
    );
    let t = env.tools.path();
    // The PRD agent writes one story; the story agent writes `<story>.txt`.
    script(
        &t.join("prd.sh"),
        r#"cat > "$CASCADE_PRD_PATH" <<JSON
{"goal": "one", "stories": [{"id": "one-1", "title": "build one", "description": "d", "priority": "high", "dependencies": [], "status": "pending"}]}
JSON"#,
    );
    let agent = |cmd: &Path| json!({"type": "cli", "command": cmd.display().to_string(), "args": [], "timeout": 60});
    write_json(
        &t.join("mega-agents.json"),
        &json!({"default_agent": "scripted", "agents": {
            "scripted": agent(&t.join("agent.sh")), "prd": agent(&t.join("prd.sh"))},
            "phase_defaults": {"planning": {"default_agent": "prd", "fallback_chain": []}}}),
    );
    let out = env
        .cascade()
        .arg("--agents")
        .arg(t.join("mega-agents.json"))
        .args(["mega", "approve", "--auto-run", "--retry-delay", "0"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    let first = stdout(&out).lines().next().unwrap_or_default().to_string();
    assert!(first.contains(&plan.display().to_string()), "{first}");
    assert!(repo.join("one-1.txt").is_file(), "the feature landed");
    assert!(!repo.join("mega-plan.json").exists());
    let v = json_of(
        &env.cascade()
            .args(["mega", "status", "--json"])
            .output()
            .unwrap(),
    );
    assert_eq!(v["status"], "completed");
    assert_eq!(v["plan"], json!(plan.display().to_string()));
}
