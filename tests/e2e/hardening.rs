//! End-to-end tests of issue 23, each with the exact case the issue names:
//! secrets and setup output never committed, strict input (statuses,
//! priorities, unknown fields, gate types, `cascade validate` listing every
//! kind), escape sequences from plans and agents shown rather than obeyed,
//! prompts too long for argv handed over by file and stdin, non-UTF-8
//! answers, and `--no-fallback` with an agent that is not installed. The
//! dashboard's part is in `ui.rs`, the remote cache's in `remote_cache.rs`,
//! the interrupted attempt in `engine.rs`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{cascade, code, events, explain, git, init_repo, of_kind, script, write_json};

/// A repository with a committed prd.json, and a tools directory outside
/// it with the agent script and agents.json.
struct Repo {
    dir: tempfile::TempDir,
    tools: tempfile::TempDir,
}

impl Repo {
    /// `stories` in prd.json (committed); the agent runs `agent` (a shell
    /// body; `$CASCADE_STORY_ID` says which story).
    fn new(stories: Value, agent: &str) -> Repo {
        let r = Repo {
            dir: init_repo(),
            tools: tempfile::tempdir().expect("tools"),
        };
        write_json(
            &r.path().join("prd.json"),
            &json!({"goal": "harden", "objectives": [], "stories": stories}),
        );
        git(r.path(), &["add", "-A"]);
        git(r.path(), &["commit", "-q", "-m", "plan"]);
        let cmd = script(&r.t("agent.sh"), agent);
        r.agents(json!({"default_agent": "scripted", "agents": {"scripted": {
            "type": "cli", "command": cmd, "args": [], "timeout": 60}}}));
        r
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn t(&self, name: &str) -> PathBuf {
        self.tools.path().join(name)
    }

    fn agents(&self, config: Value) {
        write_json(&self.t("agents.json"), &config);
    }

    /// `cascade <args> --agents <tools>/agents.json`.
    fn cascade(&self, args: &[&str]) -> std::process::Output {
        cascade(self.path())
            .args(args)
            .arg("--agents")
            .arg(self.t("agents.json"))
            .timeout(Duration::from_secs(120))
            .output()
            .expect("cascade runs")
    }

    /// Every path any commit of any branch ever held.
    fn ever_committed(&self) -> String {
        git(self.path(), &["log", "--all", "--format=", "--name-only"])
    }
}

fn story(id: &str) -> Value {
    json!({"id": id, "title": format!("Story {id}"), "description": "d", "priority": "medium",
        "dependencies": [], "status": "pending", "acceptance_criteria": []})
}

/// Asserts that `text` holds each of `expected`.
fn assert_lists(text: &str, expected: &[&str]) {
    for e in expected {
        assert!(text.contains(e), "missing {e:?} in {text}");
    }
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

// ------------------------------------------------------------ 1. secrets

/// `.env` copied in by `worktree.copy` and the files `worktree.setup`
/// leaves behind never reach a story's commits, its branch or main.
#[test]
fn copied_secrets_and_setup_output_are_never_committed() {
    let r = Repo::new(
        json!([story("story-001")]),
        r#"test -f .env || exit 7
printf 'work\n' > "$CASCADE_STORY_ID.txt""#,
    );
    // The project does not ignore them.
    std::fs::write(r.path().join(".env"), "SECRET=hunter2\n").unwrap();
    let setup = script(
        &r.t("setup.sh"),
        "echo built > setup-output.txt; mkdir -p build; echo obj > build/gen.o",
    );
    write_json(
        &r.path().join(".cascade/config.json"),
        &json!({"worktree": {"copy": [".env"], "setup": [[setup]]}}),
    );
    let out = r.cascade(&["approve", "--auto-run", "--allow-dirty", "--json"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let merged = of_kind(&events(&out), "story_merged").len();
    assert_eq!(merged, 1, "{}", explain(&out));
    let ever = r.ever_committed();
    assert!(ever.contains("story-001.txt"), "{ever}");
    for never in [".env", "setup-output.txt", "build/gen.o"] {
        assert!(
            !ever.lines().any(|l| l == never),
            "{never} was committed: {ever}"
        );
    }
    let tree = git(r.path(), &["ls-tree", "-r", "--name-only", "main"]);
    assert!(
        !tree.contains(".env") && !tree.contains("setup-output"),
        "{tree}"
    );
}

/// A credential-looking file the agent adds fails the attempt, clearly,
/// with nothing committed; a story that allows it commits it.
#[test]
fn credential_files_fail_the_attempt_unless_the_story_allows_them() {
    let mut allowed = story("story-002");
    allowed["allow_secrets"] = json!(["certs/*.pem"]);
    let r = Repo::new(
        json!([story("story-001"), allowed]),
        r#"printf 'work\n' > "$CASCADE_STORY_ID.txt"
case "$CASCADE_STORY_ID" in
story-001) printf 'PRIVATE KEY\n' > id_rsa ;;
story-002) mkdir -p certs; printf 'CERT\n' > certs/dev.pem ;;
esac"#,
    );
    let out = r.cascade(&["approve", "--auto-run", "--max-retries", "0", "--json"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let evs = events(&out);
    let failed = of_kind(&evs, "story_failed");
    assert_eq!(failed.len(), 1, "{}", explain(&out));
    assert_eq!(failed[0]["story"], "story-001");
    assert_eq!(failed[0]["error_type"], "verification", "{}", failed[0]);
    let msg = failed[0]["error"].as_str().unwrap_or_default();
    assert!(
        msg.contains("refused to commit files that look like credentials: id_rsa")
            && msg.contains("allow_secrets"),
        "{msg}"
    );
    assert_eq!(of_kind(&evs, "story_merged").len(), 1);
    let ever = r.ever_committed();
    assert!(!ever.lines().any(|l| l == "id_rsa"), "{ever}");
    assert!(
        !ever.contains("story-001.txt"),
        "nothing of story-001: {ever}"
    );
    let tree = git(r.path(), &["ls-tree", "-r", "--name-only", "main"]);
    assert!(
        tree.contains("certs/dev.pem") && tree.contains("story-002.txt"),
        "{tree}"
    );
    let progress = std::fs::read_to_string(r.path().join("progress.txt")).unwrap();
    assert!(
        progress.contains("[FAILED] via scripted: refused to commit"),
        "{progress}"
    );
}

/// Each kind of credential the content rules know, written where an agent
/// would write it (fake values of the right shape), and the new name rules:
/// the attempt fails naming every file with the rule it matched, and
/// nothing of the story is committed.
#[test]
fn credentials_by_content_and_the_wider_name_rules_fail_the_attempt() {
    // One case a line: rule | path | content, where `{aN}` is N letters and
    // digits and `{bN}` N base64 characters, filled in here so that no
    // whole token is written out in this source.
    const CASES: &str = r#"private-key | deploy/key.txt | -----BEGIN EC PRIVATE KEY-----\n{b64}
aws-access-key-id | config/aws.py | KEY_ID = 'AKIAQWERTYUIOPASDFGH'
aws-secret-access-key | scripts/s3.sh | aws_secret_access_key={b40}
gcp-service-account | infra/gcp.json | {"type": "service_account", "project_id": "p"}
azure-storage-key | app/storage.yaml | conn: DefaultEndpointsProtocol=https;AccountName=a;AccountKey={b86}==
github-pat | tools/release.py | TOKEN = 'ghp_{a36}'
github-oauth | tools/oauth.txt | gho_{a36}
github-app-token | ci/app.sh | X=ghs_{a36}
github-fine-grained-pat | ci/fine.txt | github_pat_{a82}
gitlab-pat | ci/clone.sh | git clone https://oauth2:glpat-{a20}@gitlab.com/a/b
npm-access-token | web/publish.js | const t = 'npm_{l36}';
npm-auth-token | web/npmrc.ci | //registry.npmjs.org/:_authToken={a24}
pypi-upload-token | publish.cfg | token = pypi-AgEIcHlwaS5vcmc{a60}
slack-token | bot/slack.py | T = 'xoxb-1234567890-9876543210-{a24}'
slack-webhook | bot/hook.sh | curl https://hooks.slack.com/services/TABCDEFGH/BABCDEFGH/{a24}
login-password | home/netrc.txt | machine example.com login me password hunter22
generic-secret | src/pay.rs | const STRIPE_SECRET_KEY: &str = "sk_live_{a28}";
env-file | config/PROD.ENV | DEBUG=0
registry-credentials-file | .npmrc | registry=https://registry.npmjs.org/
cloud-credentials-file | .aws/credentials | [default]
cloud-credentials-file | gcp/ci-service-account.json | {}
private-key-file | ssh/deploy_key | x"#;
    let alnum = "a1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuVwXyZ".repeat(4);
    let b64 = "Zm9vYmFyK2Jhei8xMjM0NTY3ODkwQUJDREVGR0hJSktMTU5PUA".repeat(4);
    let mut fill: Vec<(String, String)> = Vec::new();
    for n in [20, 24, 28, 36, 60, 82] {
        fill.push((format!("{{a{n}}}"), alnum[..n].to_string()));
    }
    fill.push(("{l36}".into(), alnum[..36].to_lowercase()));
    for n in [40, 64, 86] {
        fill.push((format!("{{b{n}}}"), b64[..n].to_string()));
    }
    fill.push(("\\n".into(), "\n".into()));
    let files: Vec<(&str, String, &str)> = CASES
        .lines()
        .map(|line| {
            let mut parts = line.splitn(3, " | ");
            let (rule, path) = (parts.next().unwrap(), parts.next().unwrap());
            let body = fill
                .iter()
                .fold(parts.next().unwrap().to_string(), |b, (k, v)| {
                    b.replace(k, v)
                });
            (path, format!("{body}\n"), rule)
        })
        .collect();
    let tools = tempfile::tempdir().unwrap();
    for (path, body, _) in &files {
        let p = tools.path().join("leak").join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    let r = Repo::new(
        json!([story("story-001")]),
        &format!(
            "printf 'work\\n' > \"$CASCADE_STORY_ID.txt\"\ncp -R '{}/leak/.' .",
            tools.path().display()
        ),
    );
    let out = r.cascade(&["approve", "--auto-run", "--max-retries", "0", "--json"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let evs = events(&out);
    let failed = of_kind(&evs, "story_failed");
    assert_eq!(failed.len(), 1, "{}", explain(&out));
    assert_eq!(failed[0]["error_type"], "verification", "{}", failed[0]);
    let msg = failed[0]["error"].as_str().unwrap_or_default();
    assert!(
        msg.contains("refused to commit files that look like credentials"),
        "{msg}"
    );
    for (path, _, rule) in &files {
        assert!(
            msg.contains(&format!("{path} (")) && msg.contains(&format!("rule {rule}")),
            "{path} with {rule}: {msg}"
        );
    }
    // Each is a `credential-content` finding of the attempt's verification.
    let checked = of_kind(&evs, "verification_finished");
    assert_eq!(checked.len(), 1, "{}", explain(&out));
    assert_eq!(checked[0]["passed"], false);
    let found: Vec<(&str, &str)> = checked[0]["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            (
                f["rule"].as_str().unwrap_or(""),
                f["file"].as_str().unwrap_or(""),
            )
        })
        .collect();
    for (path, _, _) in &files {
        assert!(
            found.contains(&("credential-content", *path)),
            "{path}: {found:?}"
        );
    }
    let ever = r.ever_committed();
    assert!(!ever.contains("story-001.txt"), "nothing committed: {ever}");
}

/// A story that installs dependencies and builds commits only its real
/// files: `node_modules/`, `.venv/` and a 6 MB `build/app.bin` are left out
/// (a `commit_left_out` event names them); a base that tracks `dist/`
/// still commits the story's changes there; a large file outside them is
/// refused with the limit; a story that wrote only build output fails as
/// `no_changes`, saying so.
#[test]
fn build_output_stays_out_and_large_files_are_refused() {
    let r = Repo::new(
        json!([
            story("story-001"),
            story("story-002"),
            story("story-003"),
            story("story-004")
        ]),
        r#"case "$CASCADE_STORY_ID" in
story-001)
  mkdir -p src node_modules/left-pad .venv/bin build
  printf 'print("hi")\n' > src/app.py
  for i in 1 2 3; do printf 'module.exports = %s;\n' "$i" > "node_modules/left-pad/f$i.js"; done
  printf '#!/bin/sh\n' > .venv/bin/python
  head -c 6291456 /dev/zero > build/app.bin ;;
story-002)
  printf 'bundle v2\n' > dist/bundle.js
  printf 'chunk\n' > dist/chunk.js ;;
story-003)
  mkdir -p data
  head -c 6291456 /dev/zero | tr '\0' 'a' > data/huge.txt ;;
story-004)
  mkdir -p target/debug
  printf 'obj\n' > target/debug/app.o ;;
esac"#,
    );
    std::fs::create_dir_all(r.path().join("dist")).unwrap();
    std::fs::write(r.path().join("dist/bundle.js"), "bundle v1\n").unwrap();
    git(r.path(), &["add", "-A"]);
    git(r.path(), &["commit", "-q", "-m", "dist is tracked"]);
    let out = r.cascade(&["approve", "--auto-run", "--max-retries", "0", "--json"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let evs = events(&out);
    let mut merged: Vec<&str> = of_kind(&evs, "story_merged")
        .into_iter()
        .filter_map(|e| e["story"].as_str())
        .collect();
    merged.sort_unstable();
    assert_eq!(merged, ["story-001", "story-002"], "{}", explain(&out));
    let left = of_kind(&evs, "commit_left_out");
    assert_eq!(left.len(), 2, "{}", explain(&out));
    let left: Vec<&Value> = left
        .into_iter()
        .filter(|e| e["story"] == "story-001")
        .collect();
    assert_eq!(
        left[0]["left_out"],
        json!([
            {"dir": ".venv", "files": 1, "reason": "dependency or build output"},
            {"dir": "build", "files": 1, "reason": "dependency or build output"},
            {"dir": "node_modules", "files": 3, "reason": "dependency or build output"}
        ])
    );
    let ever = r.ever_committed();
    for never in ["node_modules", ".venv", "build/app.bin", "data/huge.txt"] {
        assert!(!ever.contains(never), "{never} was committed: {ever}");
    }
    let tree = git(r.path(), &["ls-tree", "-r", "--name-only", "main"]);
    assert_lists(&tree, &["src/app.py", "dist/bundle.js", "dist/chunk.js"]);
    assert_eq!(
        git(r.path(), &["show", "main:dist/bundle.js"]),
        "bundle v2\n"
    );
    let failed = of_kind(&evs, "story_failed");
    let error_of = |id: &str| {
        let f = failed.iter().find(|e| e["story"] == id);
        f.and_then(|e| e["error"].as_str()).unwrap_or_default()
    };
    assert_eq!(failed.len(), 2, "{}", explain(&out));
    let msg = error_of("story-003");
    assert!(
        msg.contains("refused to commit files too large or binary: data/huge.txt (")
            && msg.contains("over the 5 MB limit"),
        "{msg}"
    );
    // Build output alone is no work, and the failure says why.
    let msg = error_of("story-004");
    assert!(
        msg.contains("changed no file (only dependency or build output, which is left out of commits: target/)"),
        "{msg}"
    );
}

// ------------------------------------------------------- 2. strict input

/// `"status": "done"` is not counted as complete and `"finished"` not as
/// pending: both are errors at file:line:column listing the accepted
/// values, and nothing runs.
#[test]
fn an_unknown_status_is_an_error_at_its_position_and_nothing_runs() {
    let mut done = story("s1");
    done["status"] = json!("done");
    let mut finished = story("s2");
    finished["status"] = json!("finished");
    let r = Repo::new(json!([done, finished]), "touch \"$0.ran\"; echo x > x.txt");
    let text = std::fs::read_to_string(r.path().join("prd.json")).unwrap();
    let at = |needle: &str| {
        let line = text.lines().position(|l| l.contains(needle)).unwrap();
        let col = text.lines().nth(line).unwrap().find(needle).unwrap() + "\"status\": ".len();
        format!("prd.json:{}:{}", line + 1, col + 1)
    };
    let accepted =
        "accepted: pending, in_progress, inprogress, complete, completed, failed, skipped";
    for args in [
        &["batches"][..],
        &["batches", "--json"][..],
        &["validate"][..],
        &["approve", "--auto-run"][..],
        &["approve", "--dry-run"][..],
    ] {
        let out = r.cascade(args);
        assert_eq!(code(&out), 2, "{args:?}: {}", explain(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!(
                "{}: story 's1' has unknown status 'done'; {accepted}",
                at("\"status\": \"done\"")
            )),
            "{args:?}: {err}"
        );
        assert!(
            err.contains(&format!(
                "{}: story 's2' has unknown status 'finished'",
                at("\"status\": \"finished\"")
            )),
            "{args:?}: {err}"
        );
    }
    assert!(!r.t("agent.sh.ran").exists(), "no agent ran");
    // Plan Cascade's own words are accepted: `failed` and `skipped` are
    // still to do, `completed` is done.
    let stories = json!([
        {"id": "a", "title": "A", "status": "completed"},
        {"id": "b", "title": "B", "status": "failed"},
        {"id": "c", "title": "C", "status": "skipped", "dependencies": ["a"]}]);
    write_json(&r.path().join("prd.json"), &json!({"stories": stories}));
    let out = r.cascade(&["batches", "--json"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["batches"], json!([["b", "c"]]), "{v}");
}

/// Unknown priorities and unknown fields of agents.json, gates.json and
/// config.json are warnings naming the closest known word; the run goes on.
#[test]
fn unknown_priorities_and_fields_are_warnings_naming_the_closest() {
    let mut urgent = story("s1");
    urgent["priority"] = json!("urgent");
    let r = Repo::new(json!([urgent]), "echo x > \"$CASCADE_STORY_ID.txt\"");
    let cmd = r.t("agent.sh");
    r.agents(json!({"default_agent": "scripted",
        "agents": {"scripted": {"type": "cli", "command": cmd, "args": [], "timeout": 60}},
        "phase_defaults": {"implementation": {"default_agent": "scripted",
                                              "fallback_chian": ["scripted"]}}}));
    write_json(
        &r.path().join(".cascade/gates.json"),
        &json!({"gates": [{"name": "ok", "type": "test", "command": "true", "requierd": true}]}),
    );
    write_json(
        &r.path().join(".cascade/config.json"),
        &json!({"worktree": {"cpoy": [".env"]}}),
    );
    let out = r.cascade(&["batches"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let err = stderr(&out);
    assert!(
        err.contains("warning: prd.json:") && err.contains("story 's1' has unknown priority 'urgent' (known: high, medium, low); it counts as medium"),
        "{err}"
    );
    let out = r.cascade(&["approve", "--auto-run", "--json"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let notices: Vec<String> = of_kind(&events(&out), "notice")
        .iter()
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect();
    let all = notices.join("\n");
    assert_lists(
        &all,
        &[
            "unknown priority 'urgent'",
            "phase_defaults.implementation.fallback_chian: unknown field (did you mean 'fallback_chain'?)",
            "gates[0].requierd: unknown field (did you mean 'required'?)",
            "worktree.cpoy: unknown field (did you mean 'copy'?)",
        ],
    );
}

/// `cascade validate` on files with every kind of unknown value lists each
/// one: the errors (unknown status, unknown gate type) and the warnings
/// (unknown priority, unknown fields in agents.json, gates.json and
/// config.json).
#[test]
fn validate_lists_every_kind_of_unknown_value() {
    let mut done = story("s1");
    done["status"] = json!("done");
    let mut urgent = story("s2");
    urgent["priority"] = json!("urgent");
    let r = Repo::new(json!([done, urgent]), "true");
    let cmd = r.t("agent.sh");
    r.agents(json!({"default_agent": "scripted",
        "agents": {"scripted": {"type": "cli", "command": cmd, "args": [], "timout": 60}},
        "phase_defaults": {"retry": {"fallback_chian": ["scripted"]}}}));
    write_json(
        &r.path().join(".cascade/gates.json"),
        &json!({"fail_fats": true, "gates": [{"name": "unit", "type": "tset", "command": "true"}]}),
    );
    write_json(
        &r.path().join(".cascade/config.json"),
        &json!({"worktree": {"setup": []}, "resoucres": {}}),
    );
    let out = r.cascade(&["validate"]);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    let err = stderr(&out);
    assert_lists(
        &err,
        &[
            "error: prd.json:",
            "story 's1' has unknown status 'done'",
            "warning: prd.json:",
            "story 's2' has unknown priority 'urgent'",
            "agents.scripted.timout: unknown field (did you mean 'timeout'?)",
            "phase_defaults.retry.fallback_chian: unknown field (did you mean 'fallback_chain'?)",
            "fail_fats: unknown field (did you mean 'fail_fast'?)",
            "gate 'unit'",
            "unknown gate type 'tset' (did you mean 'test'?)",
            "resoucres: unknown field (did you mean 'resources'?)",
        ],
    );
    let out = r.cascade(&["validate", "--json"]);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["valid"], false);
    assert_eq!(v["problems"].as_array().map(Vec::len), Some(2), "{v}");
    assert_eq!(v["warnings"].as_array().map(Vec::len), Some(5), "{v}");
    // An agents.json that is also invalid still has its typos listed
    // (often the typo is why it is invalid).
    r.agents(json!({"default_agent": "scripted",
        "agents": {"scripted": {"type": "cli", "comand": cmd, "args": []}}}));
    let out = r.cascade(&["validate"]);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    let err = stderr(&out);
    assert_lists(
        &err,
        &[
            "agents.scripted.command: missing command",
            "agents.scripted.comand: unknown field (did you mean 'command'?)",
        ],
    );
    // A prd.json with an unknown status still has its own quality_gates
    // checked.
    std::fs::remove_file(r.path().join(".cascade/gates.json")).unwrap();
    write_json(
        &r.path().join("prd.json"),
        &json!({"goal": "g", "stories": [done],
            "quality_gates": {"fail_fats": true, "gates": [
                {"name": "unit", "type": "tset", "command": "true"}]}}),
    );
    let out = r.cascade(&["validate"]);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    let err = stderr(&out);
    assert_lists(
        &err,
        &[
            "story 's1' has unknown status 'done'",
            "fail_fats: unknown field (did you mean 'fail_fast'?)",
            "unknown gate type 'tset' (did you mean 'test'?)",
        ],
    );
}

// -------------------------------------------------- 4. safe output

/// A story title with `ESC]0;title BEL` and `ESC[2J`, and an agent whose
/// output holds escape sequences, are shown as escapes in `batches`,
/// `approve --dry-run`, the live view, `status` and progress.txt.
#[test]
fn escape_sequences_from_plans_and_agents_are_shown_not_obeyed() {
    let mut s = story("s1");
    s["title"] = json!("\u{1b}]0;owned\u{7}Add login\u{1b}[2J");
    let r = Repo::new(
        json!([s]),
        r#"printf '\033]0;pwned\007\033[2Jagent says \033[31mred\033[0m\n'; exit 3"#,
    );
    let outputs = [
        r.cascade(&["batches"]),
        r.cascade(&["approve", "--dry-run"]),
        r.cascade(&["approve", "--auto-run", "--max-retries", "0"]),
        r.cascade(&["status"]),
    ];
    let progress = std::fs::read_to_string(r.path().join("progress.txt")).unwrap();
    let mut shown = String::new();
    for out in &outputs {
        shown.push_str(&String::from_utf8_lossy(&out.stdout));
        shown.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    shown.push_str(&progress);
    assert!(
        !shown.contains('\u{1b}') && !shown.contains('\u{7}'),
        "raw control characters reached the output: {shown:?}"
    );
    assert!(
        shown.contains(r"\u{1b}]0;owned\u{7}Add login\u{1b}[2J"),
        "the title is shown escaped: {shown}"
    );
    assert!(
        shown.contains(r"\u{1b}[31mred"),
        "the agent's output is shown escaped: {shown}"
    );
    assert!(progress.contains("s1: [FAILED]"), "{progress}");
}

/// A planning question with escape sequences is shown escaped when the
/// session pauses for it.
#[test]
fn a_planning_question_with_escape_sequences_is_shown_escaped() {
    let r = Repo::new(json!([]), "true");
    let planner = script(
        &r.t("planner.sh"),
        r#"case "$CASCADE_PLAN_STEP" in
strategy) printf '{"task_analysis": {}, "strategy_decision": {"strategy": "HYBRID_AUTO", "confidence": 0.9, "reasoning": "r"}}' > "$CASCADE_OUTPUT" ;;
discovery) printf '{"questions": [{"id": "q-1", "type": "scope", "question": "\\u001b]0;owned\\u0007Which \\u001b[2Jproviders?", "context": "c", "options": ["a"]}]}' > "$CASCADE_OUTPUT" ;;
*) exit 9 ;;
esac"#,
    );
    r.agents(json!({"default_agent": "p", "agents": {"p": {"type": "cli", "command": planner, "args": [], "timeout": 60}}}));
    let out = r.cascade(&["plan", "Add OAuth login"]);
    assert_eq!(code(&out), 3, "{}", explain(&out));
    let text = explain(&out);
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "{text:?}"
    );
    assert!(
        text.contains(r"\u{1b}]0;owned\u{7}Which \u{1b}[2Jproviders?"),
        "{text}"
    );
    // A non-UTF-8 answers file is bad input: exit 2.
    std::fs::write(r.t("answers.json"), b"{\"q-1\": \"\xff\xfe\"}").unwrap();
    let answers = r.t("answers.json").display().to_string();
    let out = r.cascade(&["plan", "Add OAuth login", "--answers", &answers]);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    assert!(stderr(&out).contains("not UTF-8"), "{}", explain(&out));
}

// ------------------------------------------------ 5. long prompts

/// A prompt longer than the OS passes as one argument reaches an agent
/// whose args say `{prompt}`: as a pointer to the prompt file, and whole on
/// stdin.
#[test]
fn a_prompt_longer_than_the_argument_limit_goes_by_file_and_stdin() {
    let mut s = story("s1");
    s["description"] = json!("x".repeat(300 * 1024));
    let r = Repo::new(
        json!([s]),
        r#"case "$1" in "Your task is in the file "*) ;; *) echo "got the prompt in argv"; exit 4 ;; esac
n=$(wc -c)
[ "$n" -gt 300000 ] || { echo "stdin had $n bytes"; exit 5; }
[ -s "$CASCADE_PROMPT_FILE" ] || exit 6
echo done > s1.txt"#,
    );
    let cmd = r.t("agent.sh");
    r.agents(json!({"default_agent": "scripted",
        "agents": {"scripted": {"type": "cli", "command": cmd, "args": ["{prompt}"], "timeout": 60}}}));
    let out = r.cascade(&["approve", "--auto-run", "--max-retries", "0", "--json"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(of_kind(&events(&out), "story_merged").len(), 1);
}

// ---------------------------------------------- 7. contract breaks

/// `--no-fallback` with an agent that is not installed refuses before
/// anything: exit 2, no worktree, no story started.
#[test]
fn no_fallback_with_an_agent_that_is_not_installed_refuses_up_front() {
    let r = Repo::new(json!([story("s1")]), "echo x > s1.txt");
    let cmd = r.t("agent.sh");
    r.agents(json!({"default_agent": "scripted", "agents": {
        "scripted": {"type": "cli", "command": cmd, "args": [], "timeout": 60},
        "ghost": {"type": "cli", "command": "cascade-test-no-such-agent", "args": []}}}));
    let out = r.cascade(&[
        "approve",
        "--auto-run",
        "--no-fallback",
        "--agent",
        "ghost",
        "--json",
    ]);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    let err = stderr(&out);
    assert!(
        err.contains("no agent available for s1")
            && err.contains("CLI 'cascade-test-no-such-agent' not found")
            && err.contains("--no-fallback was given"),
        "{err}"
    );
    assert!(of_kind(&events(&out), "story_started").is_empty());
    let worktrees = r.path().join(".cascade/worktrees");
    assert!(
        !worktrees.exists() || std::fs::read_dir(&worktrees).unwrap().next().is_none(),
        "a worktree was created"
    );
    let branches = git(r.path(), &["branch", "--list", "cascade/*"]);
    assert!(branches.trim().is_empty(), "{branches}");
}

// ------------------------------------- 3. refused commands write nothing

/// What a refused command could have written: `.git/info/exclude` and
/// whether `.cascade/` exists.
fn traces(repo: &Path) -> (String, bool) {
    let exclude = std::fs::read_to_string(repo.join(".git/info/exclude")).unwrap_or_default();
    (exclude, repo.join(".cascade").exists())
}

/// approve, resume and mega approve refused for bad input (unknown agent,
/// bad JSON, missing plan, detached HEAD, no commits) write nothing, and
/// `approve --dry-run` writes no agent-detection.json; the exclude block
/// written once a run starts lists each entry once, however often it runs.
#[test]
fn a_refused_command_writes_nothing() {
    let r = Repo::new(json!([story("s1")]), "echo x > \"$CASCADE_STORY_ID.txt\"");
    let before = traces(r.path());
    assert!(!before.1, "fresh repository");
    let mega = json!({"goal": "g", "features": [
        {"id": "f1", "name": "one", "title": "One", "dependencies": []}]});
    write_json(&r.t("mega-plan.json"), &mega);
    let mega_path = r.t("mega-plan.json").display().to_string();
    let mut refused: Vec<(&str, Vec<&str>)> = vec![
        (
            "unknown agent",
            vec!["approve", "--auto-run", "--agent", "nope"],
        ),
        (
            "missing plan",
            vec!["approve", "--auto-run", "--prd", "nope.json"],
        ),
        ("nothing to resume", vec!["resume", "--auto-run"]),
        (
            "mega: unknown agent",
            vec![
                "mega",
                "approve",
                "--auto-run",
                "--mega",
                &mega_path,
                "--agent",
                "nope",
            ],
        ),
    ];
    for (what, args) in &refused {
        let out = r.cascade(args);
        assert_eq!(code(&out), 2, "{what}: {}", explain(&out));
        assert_eq!(traces(r.path()), before, "{what} wrote something");
    }
    // Bad JSON.
    std::fs::write(r.path().join("prd.json"), "{\"stories\": [").unwrap();
    let out = r.cascade(&["approve", "--auto-run"]);
    assert_eq!(code(&out), 2, "bad JSON: {}", explain(&out));
    assert_eq!(traces(r.path()), before, "bad JSON wrote something");
    git(r.path(), &["checkout", "-q", "prd.json"]);
    // Detached HEAD.
    git(r.path(), &["checkout", "-q", "--detach"]);
    refused = vec![
        ("detached HEAD", vec!["approve", "--auto-run"]),
        (
            "mega: detached HEAD",
            vec!["mega", "approve", "--auto-run", "--mega", &mega_path],
        ),
    ];
    for (what, args) in &refused {
        let out = r.cascade(args);
        assert_eq!(code(&out), 2, "{what}: {}", explain(&out));
        assert!(
            stderr(&out).contains("detached"),
            "{what}: {}",
            explain(&out)
        );
        assert_eq!(traces(r.path()), before, "{what} wrote something");
    }
    git(r.path(), &["checkout", "-q", "main"]);
    // A dry run reads, never writes.
    let out = r.cascade(&["approve", "--dry-run"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(traces(r.path()), before, "the dry run wrote something");
    assert!(!r.path().join(".cascade/agent-detection.json").exists());
    // No commits yet.
    let empty = tempfile::tempdir().unwrap();
    git(empty.path(), &["init", "-q", "-b", "main"]);
    std::fs::copy(r.path().join("prd.json"), empty.path().join("prd.json")).unwrap();
    let before_empty = traces(empty.path());
    let out = cascade(empty.path())
        .args(["approve", "--auto-run", "--allow-dirty", "--agents"])
        .arg(r.t("agents.json"))
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "no commits: {}", explain(&out));
    assert_eq!(
        traces(empty.path()),
        before_empty,
        "no commits: wrote something"
    );
    // A run writes its block once; a second run adds nothing to it.
    let out = r.cascade(&["approve", "--auto-run"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let (first, _) = traces(r.path());
    let mut lines: Vec<&str> = first.lines().filter(|l| l.starts_with('/')).collect();
    let n = lines.len();
    assert!(n >= 3, "{first}");
    lines.sort_unstable();
    lines.dedup();
    assert_eq!(lines.len(), n, "an entry twice: {first}");
    let mut again = story("s2");
    again["dependencies"] = json!([]);
    write_json(
        &r.path().join("prd.json"),
        &json!({"goal": "harden", "stories": [again]}),
    );
    git(r.path(), &["commit", "-qam", "more"]);
    let out = r.cascade(&["approve", "--auto-run"]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(traces(r.path()).0, first, "the block changed");
}

/// The `--notify` example of docs/control.md, run as written (its script
/// replaced by one that records what it got): the command receives its
/// arguments, `-` and all, and the run's flags after them still apply.
#[test]
fn the_documented_notify_form_works() {
    let docs = include_str!("../../docs/control.md");
    let example = docs
        .lines()
        .find(|l| l.starts_with("cascade approve") && l.contains("--notify"))
        .expect("docs/control.md has a --notify example");
    let r = Repo::new(json!([story("s1")]), "echo x > \"$CASCADE_STORY_ID.txt\"");
    let got = r.t("notified");
    let post = script(
        &r.t("post-to-chat.sh"),
        &format!(
            "printf '%s|' \"$CASCADE_EVENT\" \"$@\" >> '{}'",
            got.display()
        ),
    );
    let post = post.display().to_string();
    let mut args: Vec<&str> = example.split_whitespace().skip(1).collect();
    for a in args.iter_mut() {
        if *a == "./scripts/post-to-chat.sh" {
            *a = &post;
        }
    }
    args.push("--retry-delay");
    args.push("0");
    let out = r.cascade(&args);
    assert_eq!(code(&out), 0, "{example}: {}", explain(&out));
    let got = std::fs::read_to_string(&got).expect("the command ran");
    assert_eq!(got, "run_finished|--channel|builds|", "{example}");
}
