//! End-to-end tests: `cascade gates run` and `cascade gates cache ...`.

use std::path::Path;

use crate::common::{cascade, git, init_repo, script, write_json};

/// Writes `.cascade/gates.json` with the given gates.
pub(crate) fn gates_json(repo: &Path, gates: serde_json::Value) {
    write_json(
        &repo.join(".cascade/gates.json"),
        &serde_json::json!({ "gates": gates }),
    );
}

/// `cascade gates run --json <extra>` in `repo`: exit code and the JSON.
pub(crate) fn run_json(repo: &Path, extra: &[&str]) -> (i32, serde_json::Value) {
    let mut args = vec!["gates", "run", "--json"];
    args.extend_from_slice(extra);
    let out = cascade(repo).args(&args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "bad json ({e}): {stdout} / {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap(), v)
}

#[test]
fn second_run_is_cached_and_edits_miss() {
    let dir = init_repo();
    let repo = dir.path();
    let bin = tempfile::tempdir().unwrap();
    let ok = script(&bin.path().join("ok.sh"), "echo fine");
    gates_json(
        repo,
        serde_json::json!([{"name": "unit", "type": "test", "command": ok}]),
    );

    let (code, v) = run_json(repo, &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["passed"], true);
    assert_eq!(v["gates"][0]["name"], "unit");
    assert_eq!(v["gates"][0]["cached"], false);
    for field in ["required", "skipped", "duration_ms", "errors"] {
        assert!(v["gates"][0].get(field).is_some(), "missing {field}");
    }
    let (_, v) = run_json(repo, &[]);
    assert_eq!(v["gates"][0]["cached"], true);
    let (_, v) = run_json(repo, &["--no-cache"]);
    assert_eq!(v["gates"][0]["cached"], false);

    std::fs::write(repo.join("README.md"), "# edited\n").unwrap();
    let (_, v) = run_json(repo, &[]);
    assert_eq!(v["gates"][0]["cached"], false);

    let out = cascade(repo)
        .args(["gates", "cache", "explain", "--json"])
        .output()
        .unwrap();
    let ex: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ex["misses"][0]["gate"], "unit");
    assert_eq!(ex["misses"][0]["files_modified"][0], "README.md");
    cascade(repo)
        .args(["gates", "cache", "explain"])
        .assert()
        .success()
        .stdout(predicates::str::contains("modified: README.md"));

    let out = cascade(repo)
        .args(["gates", "cache", "stats", "--json"])
        .output()
        .unwrap();
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["entries"], 2);
    assert_eq!(st["hits"], 1);
    assert_eq!(st["misses"], 2);

    cascade(repo)
        .args(["gates", "cache", "clear"])
        .assert()
        .success();
    let out = cascade(repo)
        .args(["gates", "cache", "stats", "--json"])
        .output()
        .unwrap();
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["entries"], 0);
    // .cascade/ is kept out of git.
    let status = git(repo, &["status", "--porcelain"]);
    assert!(!status.contains(".cascade"), "{status}");
}

#[test]
fn same_size_rewrites_in_quick_succession_never_give_a_stale_hit() {
    // The gate passes only on "good" content. Each rewrite keeps the size
    // and follows the previous run at once (often within the same second,
    // sometimes the same timestamp tick): git's index, the only stat cache,
    // must never answer with the other content's verdict.
    let dir = init_repo();
    let repo = dir.path();
    let bin = tempfile::tempdir().unwrap();
    let check = script(&bin.path().join("check.sh"), "grep -q good state.txt");
    gates_json(
        repo,
        serde_json::json!([{"name": "check", "type": "test", "command": check}]),
    );
    for round in 0..6 {
        for (body, passes) in [("good\n", true), ("bad!\n", false)] {
            std::fs::write(repo.join("state.txt"), body).unwrap();
            let (code, v) = run_json(repo, &[]);
            assert_eq!(v["passed"], passes, "round {round}, {body:?}: {v}");
            assert_eq!(code, if passes { 0 } else { 1 }, "{v}");
            // Passing content is stored, so it is a hit after the first round.
            if passes {
                assert_eq!(v["gates"][0]["cached"], round > 0, "round {round}: {v}");
            } else {
                assert_eq!(v["gates"][0]["cached"], false, "{v}");
            }
        }
    }
    // No stat cache of cascade's own beside git's index.
    assert!(!repo.join(".cascade/gate-cache/stat").exists());
    let status = git(repo, &["status", "--porcelain"]);
    assert!(!status.contains(".cascade"), "{status}");
}

#[test]
fn failing_gate_exits_1_with_errors_and_missing_tool_is_reported() {
    let dir = init_repo();
    let repo = dir.path();
    let bin = tempfile::tempdir().unwrap();
    let bad = script(
        &bin.path().join("bad.sh"),
        "echo 'src/lib.rs:4:2: error: nope'; exit 2",
    );
    gates_json(
        repo,
        serde_json::json!([
            {"name": "lint", "type": "lint", "command": bad},
            {"name": "tool", "type": "lint", "required": false, "command": "definitely-not-installed-xyz"}
        ]),
    );
    let (code, v) = run_json(repo, &[]);
    assert_eq!(code, 1);
    assert_eq!(v["passed"], false);
    let lint = &v["gates"][0];
    assert_eq!(lint["errors"][0]["file"], "src/lib.rs");
    assert_eq!(lint["errors"][0]["line"], 4);
    let tool = &v["gates"][1];
    assert_eq!(tool["passed"], false);
    assert_eq!(tool["tool_missing"], true);

    cascade(repo)
        .args(["gates", "run"])
        .assert()
        .code(1)
        .stdout(predicates::str::contains("FAIL  lint"))
        .stdout(predicates::str::contains("not installed"))
        .stdout(predicates::str::contains("gates failed"));
}

#[test]
fn prd_quality_gates_are_used_and_bad_config_is_exit_2() {
    let dir = init_repo();
    let repo = dir.path();
    let bin = tempfile::tempdir().unwrap();
    let ok = script(&bin.path().join("ok.sh"), "exit 0");
    write_json(
        &repo.join("prd.json"),
        &serde_json::json!({"stories": [], "quality_gates": {"enabled": true, "gates": [
            {"name": "from-prd", "type": "test", "command": ok}
        ]}}),
    );
    let (code, v) = run_json(repo, &[]);
    assert_eq!(code, 0);
    assert_eq!(v["gates"][0]["name"], "from-prd");

    std::fs::create_dir_all(repo.join(".cascade")).unwrap();
    std::fs::write(repo.join(".cascade/gates.json"), "{ not json").unwrap();
    cascade(repo)
        .args(["gates", "run"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("error:"))
        .stderr(predicates::str::contains("gates.json"));
}
