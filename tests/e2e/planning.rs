//! `cascade plan`: scripted planning and review agents (sh scripts reading
//! CASCADE_PLAN_STEP and writing CASCADE_OUTPUT / the plan paths) drive every
//! exit of the planning contract: happy path, revision loop, rejection,
//! unparsable verdict, invalid plan fixed / never fixed, three rejections,
//! pause and resume without a terminal, kill -9 mid-step, session lookup
//! failures, --auto and --run to merged code.

use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{cascade, git, init_repo, script, write_json};

/// The planning agent: one behaviour per step; marker files in the tools
/// dir change it (invalid-once, invalid-always, hang-STEP, list-fail, ...).
const PLANNER: &str = r#"T="$TOOLS"
step="$CASCADE_PLAN_STEP"
if [ "$1" = "--list" ]; then
  echo "list $*" >> "$T/calls"
  if [ -f "$T/list-fail" ]; then echo "boom: cannot read sessions"; exit 4; fi
  if [ -f "$T/listing" ]; then cat "$T/listing"; else printf 'Sessions:\n  1. other (1 day ago) [sess-old]\n  2. plan (now) [sess-gen-1]\n'; fi
  exit 0
fi
if [ -z "$step" ] && [ -n "$CASCADE_PRD_PATH" ]; then
  # A mega-plan feature's PRD (cascade mega approve), one story.
  echo "feature-prd" >> "$T/calls"
  printf '{"goal": "feature", "stories": [{"id": "s%s", "title": "Feature work", "description": "d", "priority": "high", "dependencies": [], "status": "pending", "acceptance_criteria": ["done"]}]}' "$$" > "$CASCADE_PRD_PATH"
  printf '{"metadata": {"level": "feature"}, "inherited_context": {"decisions": ["ADR-001"], "patterns": ["Layers"]}, "architecture": {"components": [{"name": "FeatureComp", "description": "the feature part"}]}, "story_mappings": {"s%s": {"components": ["FeatureComp"]}}}' "$$" > "$CASCADE_DESIGN_DOC_PATH"
  exit 0
fi
echo "$step phase=$CASCADE_PHASE plan=$CASCADE_PLAN_ID args=$*" >> "$T/calls"
cp "$CASCADE_PROMPT_FILE" "$T/prompt-$step.md"
if [ -f "$T/hang-$step" ]; then rm "$T/hang-$step"; echo $$ > "$T/pid-$step"; exec sleep 60; fi
if [ -f "$T/fail-$step" ]; then echo "planner crashed in $step"; exit 7; fi
if [ -f "$T/chatty" ]; then yes 'the planner thinks aloud' | head -c 3000000; echo "$step: the last line"; fi
strategy=HYBRID_AUTO; [ -f "$T/strategy" ] && strategy=$(cat "$T/strategy")
result=done
case "$step" in
strategy)
  printf '{"task_analysis": {"functional_areas": ["auth"], "estimated_stories": 2}, "strategy_decision": {"strategy": "%s", "confidence": 0.9, "reasoning": "two small stories"}}' "$strategy" > "$CASCADE_OUTPUT" ;;
discovery)
  cat > "$CASCADE_OUTPUT" <<'EOF'
{"questions": [
 {"id": "q-1", "type": "scope", "question": "Which providers?", "context": "decides the stories", "options": ["Google", "GitHub"], "assumption": "Google only"},
 {"id": "q-2", "type": "technical", "question": "Where do tokens live?", "context": "security", "options": ["cookie", "header"], "assumption": "cookie"}]}
EOF
  ;;
design)
  cat > "$CASCADE_OUTPUT" <<'EOF'
{"decisions": [{"id": "d-1", "topic": "Session storage", "context": "login state",
  "options": [{"id": "opt-a", "name": "JWT", "description": "stateless", "tradeoffs": {"pros": ["no store"], "cons": ["revocation"]}},
              {"id": "opt-b", "name": "Server sessions", "tradeoffs": {"pros": ["revocable"], "cons": ["a store"]}}],
  "recommendation": "opt-a"}], "summary": "OAuth with JWT sessions"}
EOF
  ;;
generate|fix|revise)
  dep='"story-001"'
  if [ -f "$T/invalid-always" ] || { [ -f "$T/invalid-once" ] && [ "$step" = generate ]; }; then dep='"story-999"'; fi
  if [ "$strategy" = MEGA_PLAN ]; then
    cat > "$CASCADE_MEGA_PATH" <<'EOF'
{"goal": "oauth", "execution_mode": "auto", "target_branch": "main", "features": [
 {"id": "feature-001", "name": "auth-core", "title": "Core", "description": "d", "priority": "high", "dependencies": [], "status": "pending"},
 {"id": "feature-002", "name": "auth-ui", "title": "UI", "description": "d", "priority": "medium", "dependencies": ["feature-001"], "status": "pending"}]}
EOF
    cat > "$CASCADE_DESIGN_DOC_PATH" <<'EOF'
{"metadata": {"level": "project"}, "architecture": {"components": [{"name": "Auth"}], "patterns": [{"name": "Layers"}]},
 "decisions": [{"id": "ADR-001", "title": "JWT"}],
 "feature_mappings": {"feature-001": {"components": ["Auth"], "decisions": ["ADR-001"]}, "feature-002": {"patterns": ["Layers"]}}}
EOF
  else
    cat > "$CASCADE_PRD_PATH" <<EOF
{"goal": "oauth", "objectives": ["login"], "stories": [
 {"id": "story-001", "title": "Provider config", "description": "add providers", "priority": "high", "dependencies": [], "status": "pending", "acceptance_criteria": ["config loads"]},
 {"id": "story-002", "title": "Login endpoint", "description": "add /login", "priority": "medium", "dependencies": [$dep], "status": "pending", "acceptance_criteria": ["login works"]}]}
EOF
    cat > "$CASCADE_DESIGN_DOC_PATH" <<'EOF'
{"metadata": {"source": "ai-generated"}, "overview": {"title": "OAuth"},
 "architecture": {"components": [{"name": "AuthConfig"}, {"name": "LoginHandler"}], "patterns": [{"name": "Middleware"}]},
 "decisions": [{"id": "ADR-001", "title": "JWT sessions", "decision": "JWT"}],
 "story_mappings": {"story-001": {"components": ["AuthConfig"], "decisions": ["ADR-001"]},
                    "story-002": {"components": ["LoginHandler"], "patterns": ["Middleware"]}}}
EOF
  fi ;;
self-review)
  result='checked it all <review>PASS</review>'
  [ -f "$T/no-marker" ] && result='looked fine' ;;
challenge)
  v=APPROVED
  if [ -s "$T/own-verdicts" ]; then v=$(head -n 1 "$T/own-verdicts"); sed -i 1d "$T/own-verdicts"; fi
  printf '# Own challenge\n\nVerdict: %s\n' "$v" > "$CASCADE_OUTPUT" ;;
esac
# With `own-challenge-session`, the challenge is a conversation of its own.
sid=sess-gen-1
if [ "$step" = challenge ] && [ -f "$T/own-challenge-session" ]; then sid=sess-challenge-1; fi
echo '{"type": "system", "subtype": "init", "session_id": "'"$sid"'", "model": "scripted-1"}'
printf '{"type": "result", "subtype": "success", "is_error": false, "result": "%s", "session_id": "%s", "usage": {"input_tokens": 100, "output_tokens": 20}, "total_cost_usd": 0.01}\n' "$result" "$sid"
"#;

/// The review agent: writes CHALLENGE.md with the next verdict of
/// `verdicts` (one per line; APPROVED when none; NONE: no verdict line).
const REVIEWER: &str = r##"T="$TOOLS"
echo "reviewer $CASCADE_PLAN_STEP phase=$CASCADE_PHASE" >> "$T/calls"
if [ -f "$T/hang-challenge" ]; then rm "$T/hang-challenge"; echo $$ > "$T/pid-challenge"; exec sleep 60; fi
v=APPROVED
if [ -s "$T/verdicts" ]; then v=$(head -n 1 "$T/verdicts"); sed -i 1d "$T/verdicts"; fi
{ echo "# Challenge"; echo; echo "- story-002 should say which provider"; echo; } > "$CASCADE_OUTPUT"
[ "$v" != NONE ] && echo "Verdict: $v" >> "$CASCADE_OUTPUT"
printf '{"type": "result", "subtype": "success", "is_error": false, "result": "written", "session_id": "sess-rev-1", "usage": {"input_tokens": 50, "output_tokens": 10}, "total_cost_usd": 0.02}\n'
"##;

/// The implementation agent of `--run`: one file per story.
const IMPL: &str = r#"cp "$CASCADE_PROMPT_FILE" "$TOOLS/impl-$CASCADE_STORY_ID.md"
printf '%s\n' "$CASCADE_STORY_ID" > "$CASCADE_STORY_ID.txt""#;

pub(crate) struct Plan {
    repo: tempfile::TempDir,
    tools: tempfile::TempDir,
    /// HOME of every cascade run: empty (no Plan Cascade data directory)
    /// until [`Plan::data_dir`] makes one.
    home: tempfile::TempDir,
}

impl Plan {
    pub(crate) fn new() -> Plan {
        Plan::with_planner_extra(json!({}))
    }

    /// `extra`: more fields of the planner's agents.json entry.
    fn with_planner_extra(extra: Value) -> Plan {
        let p = Plan {
            repo: init_repo(),
            tools: tempfile::tempdir().expect("tools"),
            home: tempfile::tempdir().expect("home"),
        };
        let t = p.tools().display().to_string();
        script(&p.t("planner.sh"), PLANNER);
        script(&p.t("reviewer.sh"), REVIEWER);
        script(&p.t("impl.sh"), IMPL);
        let mut planner = json!({"type": "cli", "command": p.t("planner.sh"), "args": [],
            "timeout": 120, "env": {"TOOLS": t},
            "resume_args": ["--resume", "{session_id}"]});
        if let (Some(m), Some(e)) = (planner.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                m.insert(k.clone(), v.clone());
            }
        }
        write_json(
            &p.t("agents.json"),
            &json!({
                "default_agent": "planner",
                "agents": {
                    "planner": planner,
                    "reviewer": {"type": "cli", "command": p.t("reviewer.sh"), "args": [], "timeout": 120, "env": {"TOOLS": t}},
                    "impl": {"type": "cli", "command": p.t("impl.sh"), "args": [], "timeout": 120, "env": {"TOOLS": t}}
                },
                "phase_defaults": {
                    "planning": {"default_agent": "planner"},
                    "review": {"default_agent": "reviewer"},
                    "implementation": {"default_agent": "impl"}
                }
            }),
        );
        write_json(
            &p.t("answers.json"),
            &json!({"q-1": "GitHub", "q-2": "header", "d-1": {"option": "opt-b", "rationale": "we must revoke"}}),
        );
        p
    }

    fn repo(&self) -> &Path {
        self.repo.path()
    }

    fn tools(&self) -> &Path {
        self.tools.path()
    }

    pub(crate) fn t(&self, name: &str) -> PathBuf {
        self.tools().join(name)
    }

    fn mark(&self, name: &str, content: &str) {
        std::fs::write(self.t(name), content).expect("marker");
    }

    fn cmd(&self, args: &[&str]) -> assert_cmd::Command {
        let mut c = cascade(self.repo());
        c.env("HOME", self.home.path())
            .env_remove("APPDATA")
            .args(args)
            .arg("--agents")
            .arg(self.t("agents.json"))
            .timeout(Duration::from_secs(180));
        c
    }

    fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.cmd(args).output().expect("cascade runs");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `cascade plan GOAL --answers <tools>/answers.json <extra>`.
    pub(crate) fn plan(&self, extra: &[&str]) -> (i32, String, String) {
        let answers = self.t("answers.json").display().to_string();
        let mut args = vec!["plan", "Add OAuth login", "--answers", &answers];
        args.extend_from_slice(extra);
        self.run(&args)
    }

    pub(crate) fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.t("calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// How many calls of `step` (first word of the calls log line) ran.
    pub(crate) fn count(&self, step: &str) -> usize {
        self.calls()
            .iter()
            .filter(|l| l.split_whitespace().next() == Some(step))
            .count()
    }

    fn session_id(&self) -> String {
        let dir = self.repo().join(".cascade/plans");
        let ids: Vec<String> = std::fs::read_dir(&dir)
            .expect("plans dir")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("planning-"))
            .collect();
        assert_eq!(ids.len(), 1, "sessions: {ids:?}");
        ids[0].clone()
    }

    /// `name` in the (one) session's directory.
    fn in_session(&self, name: &str) -> PathBuf {
        self.repo()
            .join(".cascade/plans")
            .join(self.session_id())
            .join(name)
    }

    pub(crate) fn session(&self) -> Value {
        let p = self.in_session("session.json");
        serde_json::from_str(&std::fs::read_to_string(p).expect("session.json")).expect("json")
    }

    /// Starts `cascade plan ...` in the background.
    fn background(&self, args: &[&str]) -> std::process::Child {
        StdCommand::new(assert_cmd::cargo::cargo_bin("cascade"))
            .current_dir(self.repo())
            .env("NO_COLOR", "1")
            .env("HOME", self.home.path())
            .args(args)
            .arg("--agents")
            .arg(self.t("agents.json"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn cascade")
    }

    /// Waits for `name` in the tools dir (the agent hanging in a step).
    fn wait_for(&self, name: &str) -> String {
        let start = Instant::now();
        loop {
            if let Ok(text) = std::fs::read_to_string(self.t(name)) {
                if !text.trim().is_empty() {
                    return text.trim().to_string();
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{name} never appeared; calls: {:?}",
                self.calls()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts planning, waits until the agent hangs in `step`, then kills
    /// cascade with SIGKILL (and the orphaned agent).
    fn kill_during(&self, step: &str) {
        self.kill_during_with(step, |_| {});
    }

    /// Like [`Plan::kill_during`], running `meanwhile` (with the session id)
    /// while the agent hangs.
    fn kill_during_with(&self, step: &str, meanwhile: impl FnOnce(&str)) {
        self.mark(&format!("hang-{step}"), "");
        let answers = self.t("answers.json").display().to_string();
        let mut child =
            self.background(&["plan", "Add OAuth login", "--answers", &answers, "--yes"]);
        let agent_pid = self.wait_for(&format!("pid-{step}"));
        meanwhile(&self.session_id());
        child.kill().expect("SIGKILL cascade");
        let _ = child.wait();
        let _ = StdCommand::new("kill").args(["-9", &agent_pid]).status();
    }
}

#[test]
fn happy_path_writes_the_plan_records_usage_and_continues_the_planner_session() {
    let p = Plan::new();
    let (code, out, err) = p.plan(&["--yes"]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("plan approved"), "{out}");
    // The approved plan is in the repository.
    let prd: Value =
        serde_json::from_str(&std::fs::read_to_string(p.repo().join("prd.json")).unwrap()).unwrap();
    assert_eq!(prd["stories"].as_array().unwrap().len(), 2);
    assert!(p.repo().join("design_doc.json").is_file());
    // One call per step, each in the environment of CLI.md.
    for step in ["strategy", "discovery", "design", "generate", "self-review"] {
        assert_eq!(p.count(step), 1, "{step}: {:?}", p.calls());
    }
    let calls = p.calls();
    let sid = p.session_id();
    assert!(calls
        .iter()
        .all(|l| !l.starts_with("strategy") || l.contains("phase=planning")));
    assert!(calls[0].contains(&format!("plan={sid}")), "{calls:?}");
    assert!(
        calls.contains(&"reviewer challenge phase=review".to_string()),
        "{calls:?}"
    );
    // Self-review continues the generator's session through resume_args.
    let review = calls.iter().find(|l| l.starts_with("self-review")).unwrap();
    assert!(review.contains("args=--resume sess-gen-1"), "{review}");
    let generate = calls.iter().find(|l| l.starts_with("generate")).unwrap();
    assert!(generate.ends_with("args="), "{generate}");
    // Answers and decisions reached the generation prompt.
    let prompt = std::fs::read_to_string(p.t("prompt-generate.md")).unwrap();
    assert!(prompt.contains("Which providers? -> GitHub"), "{prompt}");
    assert!(
        prompt.contains("Session storage: **Server sessions** (rationale: we must revoke)"),
        "{prompt}"
    );
    // session.json: the contract's fields, usage and cost per call and totals.
    let s = p.session();
    assert_eq!(s["status"], "approved");
    assert_eq!(s["strategy"], "HYBRID_AUTO");
    assert_eq!(s["questions"][0]["answer"], "GitHub");
    assert_eq!(s["questions"][1]["type"], "technical");
    assert_eq!(s["decisions"][0]["selected_option_id"], "opt-b");
    assert_eq!(s["decisions"][0]["rationale"], "we must revoke");
    assert_eq!(s["agent_sessions"]["planner"], "sess-gen-1");
    assert_eq!(s["agent_sessions"]["reviewer"], "sess-rev-1");
    let llm = s["llm_calls"].as_array().unwrap();
    assert_eq!(llm.len(), 6, "{llm:?}");
    assert_eq!(llm[0]["step"], "strategy");
    assert_eq!(llm[0]["model"], "scripted-1");
    assert_eq!(llm[0]["tokens_in"], 100);
    assert_eq!(llm[0]["tokens_out"], 20);
    assert_eq!(llm[5]["step"], "challenge");
    assert_eq!(llm[5]["agent"], "reviewer");
    let total = s["total_cost"].as_f64().unwrap();
    assert!((total - 0.07).abs() < 1e-9, "{total}");
    assert_eq!(
        s["outputs"]["prd"],
        p.repo().join("prd.json").display().to_string()
    );
    // plan show and plan list read it back.
    let (code, out, _) = p.run(&["plan", "show", &sid]);
    assert_eq!(code, 0);
    assert!(
        out.contains("6 calls, 550 tokens in, 110 out, $0.0700"),
        "{out}"
    );
    let (code, out, _) = p.run(&["plan", "list", "--json"]);
    assert_eq!(code, 0);
    let list: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(list["sessions"][0]["status"], "approved");
    // The approved plan is what `cascade validate` accepts.
    let (code, _, err) = p.run(&["validate"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn the_planning_agents_logs_keep_to_the_projects_log_limit() {
    let p = Plan::new();
    p.mark("chatty", "");
    write_json(
        &p.repo().join(".cascade/config.json"),
        &json!({"resources": {"max_log_mb": 1}}),
    );
    let (code, out, err) = p.plan(&["--yes"]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let logs = p.in_session("logs");
    let mut steps = Vec::new();
    for entry in std::fs::read_dir(&logs).expect("the steps' logs") {
        let path = entry.expect("a log").path();
        let log = std::fs::read(&path).expect("readable");
        let text = String::from_utf8_lossy(&log);
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        // The planner's steps printed 3 MB each: 1 MiB kept, head and tail.
        if text.contains("the planner thinks aloud") {
            assert_eq!(log.len(), 1024 * 1024, "{name}");
            assert!(text.contains("bytes of output dropped here"), "{name}");
            // What the step printed after it (a self-review's marker) too.
            let tail = &text[text.len() - 2048..];
            assert!(
                tail.contains(": the last line\n"),
                "{name}: the tail is kept"
            );
            steps.push(name);
        }
    }
    assert!(
        steps.iter().any(|n| n.starts_with("generate-")),
        "the generation's log among {steps:?}"
    );
    // A config that does not read stops planning before any agent runs.
    let q = Plan::new();
    std::fs::create_dir_all(q.repo().join(".cascade")).unwrap();
    std::fs::write(q.repo().join(".cascade/config.json"), "{\"resources\": ").unwrap();
    let (code, _, err) = q.plan(&["--yes"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("config.json"), "{err}");
    assert!(q.calls().is_empty(), "{:?}", q.calls());
}

#[test]
fn json_prints_the_event_stream() {
    let p = Plan::new();
    let (code, out, err) = p.plan(&["--yes", "--json"]);
    assert_eq!(code, 0, "{err}");
    let events: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    for want in [
        "plan_started",
        "step_started",
        "step_finished",
        "question",
        "decision",
        "verdict",
        "plan_finished",
    ] {
        assert!(names.contains(&want), "{want} missing in {names:?}");
    }
    let finished = events
        .iter()
        .find(|e| e["event"] == "step_finished")
        .unwrap();
    assert_eq!(finished["tokens_in"], 100);
    assert_eq!(finished["cost"], 0.01);
    let last = events.last().unwrap();
    assert_eq!(last["event"], "plan_finished");
    assert_eq!(last["status"], "approved");
}

/// One agent writes and challenges the plan (common when only one agent CLI
/// is installed): the revise continues the writer's conversation, never the
/// challenger's, and each role's session is kept apart.
#[test]
fn one_agent_as_planner_and_challenger_revises_in_the_planners_session() {
    let p = Plan::new();
    let path = p.t("agents.json");
    let mut agents: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    agents["phase_defaults"]["review"]["default_agent"] = json!("planner");
    write_json(&path, &agents);
    p.mark("own-challenge-session", "");
    p.mark("own-verdicts", "NEEDS_REVISION\nAPPROVED\n");
    let (code, out, err) = p.plan(&["--yes", "--review-agent", "planner"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(p.count("challenge"), 2, "{:?}", p.calls());
    let revise = p
        .calls()
        .into_iter()
        .find(|l| l.starts_with("revise"))
        .unwrap_or_else(|| panic!("no revise in {:?}", p.calls()));
    assert!(revise.contains("--resume sess-gen-1"), "{revise}");
    assert!(!revise.contains("sess-challenge-1"), "{revise}");
    let s = p.session();
    assert_eq!(
        s["role_sessions"]["generator"]["session_id"], "sess-gen-1",
        "{s}"
    );
    assert_eq!(s["role_sessions"]["generator"]["agent"], "planner", "{s}");
    assert_eq!(
        s["role_sessions"]["reviewer"]["session_id"], "sess-challenge-1",
        "{s}"
    );
    // What the agent printed last is still said per agent.
    assert_eq!(s["agent_sessions"]["planner"], "sess-challenge-1", "{s}");
}

#[test]
fn needs_revision_revises_with_the_challenge_then_rechallenges() {
    let p = Plan::new();
    p.mark("verdicts", "NEEDS_REVISION\nAPPROVED\n");
    let (code, out, err) = p.plan(&["--yes"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(p.count("revise"), 1, "{:?}", p.calls());
    assert_eq!(
        p.calls()
            .iter()
            .filter(|l| l.starts_with("reviewer"))
            .count(),
        2
    );
    let revise = p
        .calls()
        .into_iter()
        .find(|l| l.starts_with("revise"))
        .unwrap();
    assert!(revise.contains("--resume sess-gen-1"), "{revise}");
    let prompt = std::fs::read_to_string(p.t("prompt-revise.md")).unwrap();
    assert!(
        prompt.contains("story-002 should say which provider"),
        "{prompt}"
    );
    assert!(
        out.contains("challenge 1 by reviewer: NEEDS_REVISION"),
        "{out}"
    );
    assert!(out.contains("challenge 2 by reviewer: APPROVED"), "{out}");
    assert_eq!(p.session()["progress"]["challenges"], 2);
}

#[test]
fn needs_revision_beyond_the_limit_fails_under_auto() {
    let p = Plan::new();
    p.mark("verdicts", "NEEDS_REVISION\nNEEDS_REVISION\n");
    let (code, _, err) = p.plan(&["--auto", "--planning-iterations", "1"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("still says NEEDS_REVISION after 1 revision round"),
        "{err}"
    );
    assert_eq!(p.count("revise"), 1);
}

#[test]
fn rejected_challenge_exits_1_at_once() {
    let p = Plan::new();
    p.mark("verdicts", "REJECTED\n");
    let (code, _, err) = p.plan(&["--yes"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("rejected the plan"), "{err}");
    assert_eq!(p.count("revise"), 0);
    assert!(!p.repo().join("prd.json").exists());
    let s = p.session();
    assert_eq!(s["status"], "failed");
    assert!(s["error_message"].as_str().unwrap().contains("rejected"));
}

#[test]
fn a_challenge_without_a_verdict_exits_1() {
    let p = Plan::new();
    p.mark("verdicts", "NONE\n");
    let (code, _, err) = p.plan(&["--yes"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("could not parse challenge verdict"), "{err}");
}

#[test]
fn an_invalid_plan_is_fixed_with_the_exact_problems() {
    let p = Plan::new();
    p.mark("invalid-once", "");
    let (code, out, err) = p.plan(&["--yes"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(p.count("fix"), 1, "{:?}", p.calls());
    let fix = p
        .calls()
        .into_iter()
        .find(|l| l.starts_with("fix"))
        .unwrap();
    assert!(fix.contains("--resume sess-gen-1"), "{fix}");
    let prompt = std::fs::read_to_string(p.t("prompt-fix.md")).unwrap();
    assert!(prompt.contains("story-999"), "{prompt}");
    assert!(out.contains("plan is invalid"), "{out}");
}

#[test]
fn a_plan_never_fixed_exits_1_listing_the_problems() {
    let p = Plan::new();
    p.mark("invalid-always", "");
    let (code, _, err) = p.plan(&["--yes", "--format-iterations", "2"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(p.count("fix"), 2, "{:?}", p.calls());
    assert!(err.contains("still invalid after 2 fix round"), "{err}");
    assert!(err.contains("story-999"), "{err}");
    assert_eq!(p.count("reviewer"), 0);
}

#[test]
fn a_missing_self_review_marker_warns_and_passes() {
    let p = Plan::new();
    p.mark("no-marker", "");
    let (code, _, err) = p.plan(&["--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("printed no <review>PASS</review>"), "{err}");
}

#[test]
fn three_rejections_cancel_the_session() {
    let p = Plan::new();
    let (code, _, err) = p.plan(&[]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("waits for review"), "{err}");
    let id = p.session_id();
    assert!(err.contains(&format!("cascade plan approve {id}")), "{err}");
    // Each rejection goes back to design; the decisions are answered again
    // from the session's answers.json, which kept what --answers gave.
    for round in 1..=2 {
        let (code, _, err) = p.run(&["plan", "reject", &id, "--reason", "too coarse"]);
        assert_eq!(code, 3, "round {round}: {err}");
        assert_eq!(p.session()["reject_count"], round);
    }
    // The reason reaches the next design.
    let prompt = std::fs::read_to_string(p.t("prompt-design.md")).unwrap();
    assert!(prompt.contains("too coarse"), "{prompt}");
    assert_eq!(p.count("design"), 3);
    assert_eq!(p.count("discovery"), 1);
    let (code, _, err) = p.run(&["plan", "reject", &id, "--reason", "still no"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("rejected 3 times"), "{err}");
    let s = p.session();
    assert_eq!(s["status"], "cancelled");
    assert_eq!(s["reject_count"], 3);
}

#[test]
fn pauses_without_a_terminal_and_resumes_from_answers() {
    let p = Plan::new();
    let (code, _, err) = p.run(&["plan", "Add OAuth login"]);
    assert_eq!(code, 3, "{err}");
    let id = p.session_id();
    assert!(err.contains("waits for q-1, q-2"), "{err}");
    assert!(
        err.contains(&format!("cascade plan answer {id} q-1")),
        "{err}"
    );
    assert!(err.contains("answers.json"), "{err}");
    assert_eq!(p.session()["status"], "discovery");
    // One answer: the next question waits, the answered one is not asked again.
    let (code, _, err) = p.run(&["plan", "answer", &id, "q-1", "GitHub"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("waits for q-2"), "{err}");
    assert!(!err.contains("waits for q-1"), "{err}");
    assert_eq!(p.session()["current_question_index"], 1);
    // The rest through the session's answers.json.
    write_json(
        &p.repo()
            .join(".cascade/plans")
            .join(&id)
            .join("answers.json"),
        &json!({"q-1": "GitHub", "q-2": "cookie", "d-1": "opt-a: simplest"}),
    );
    let (code, _, err) = p.run(&["plan", "resume", &id]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("waits for review"), "{err}");
    assert!(err.contains("challenge verdict: APPROVED"), "{err}");
    let (code, out, err) = p.run(&["plan", "approve", &id]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(p.repo().join("prd.json").is_file());
    for step in ["strategy", "discovery", "design", "generate"] {
        assert_eq!(p.count(step), 1, "{step}: {:?}", p.calls());
    }
    let s = p.session();
    assert_eq!(s["decisions"][0]["selected_option_id"], "opt-a");
    assert_eq!(s["decisions"][0]["rationale"], "simplest");
    // Approved: nothing left to continue.
    let (code, _, err) = p.run(&["plan", "resume", &id]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn resume_without_an_id_lists_sessions_and_exits_2() {
    let p = Plan::new();
    let (code, _, _) = p.run(&["plan", "Add OAuth login"]);
    assert_eq!(code, 3);
    let (code, out, err) = p.run(&["plan", "resume"]);
    assert_eq!(code, 2, "{err}");
    assert!(out.contains(&p.session_id()), "{out}");
    assert!(err.contains("cascade plan resume ID"), "{err}");
    let (code, _, err) = p.run(&["plan", "show", "planning-0000"]);
    assert_eq!(code, 2);
    assert!(err.contains("no planning session 'planning-0000'"), "{err}");
    // Only finished sessions: nothing to continue, and it says so.
    let (code, _, err) = p.run(&["plan", "cancel", &p.session_id()]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = p.run(&["plan", "resume"]);
    assert_eq!(code, 2, "{err}");
    assert!(out.contains(&p.session_id()), "{out}");
    assert!(err.contains("every session here is finished"), "{err}");
}

#[test]
fn an_agent_failure_marks_the_session_failed_and_resume_retries_the_step() {
    let p = Plan::new();
    p.mark("fail-design", "");
    let (code, _, err) = p.plan(&["--yes"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("planner crashed in design"), "{err}");
    let s = p.session();
    assert_eq!(s["status"], "failed");
    assert!(s["error_message"].as_str().unwrap().contains("design"));
    std::fs::remove_file(p.t("fail-design")).unwrap();
    let id = p.session_id();
    let answers = p.t("answers.json").display().to_string();
    let (code, _, err) = p.run(&["plan", "resume", &id, "--answers", &answers, "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(p.count("design"), 2);
    assert_eq!(p.count("discovery"), 1);
}

/// No planning agent installed is a usage problem (exit 2, what was tried),
/// and the session is kept as failed so `plan resume` goes on once one is.
#[test]
fn no_planning_agent_installed_exits_2_and_resume_goes_on_after_install() {
    let p = Plan::new();
    let agents_path = p.t("agents.json");
    let installed = std::fs::read_to_string(&agents_path).unwrap();
    let mut missing: Value = serde_json::from_str(&installed).unwrap();
    missing["agents"]["planner"]["command"] = json!(p.t("not-installed").display().to_string());
    write_json(&agents_path, &missing);
    let (code, _, err) = p.plan(&["--yes"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("error: no agent available"), "{err}");
    assert!(err.contains("planner"), "{err}");
    assert!(err.contains("cascade plan resume"), "{err}");
    let s = p.session();
    assert_eq!(s["status"], "failed", "{s}");
    // Installed now: resume runs the plan to approval.
    std::fs::write(&agents_path, installed).unwrap();
    let id = p.session_id();
    let answers = p.t("answers.json").display().to_string();
    let (code, _, err) = p.run(&["plan", "resume", &id, "--answers", &answers, "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(p.session()["status"], "approved");
}

#[test]
fn kill_9_during_discovery_resumes_at_discovery() {
    let p = Plan::new();
    p.kill_during("discovery");
    let id = p.session_id();
    let s = p.session();
    assert_eq!(s["status"], "discovery");
    assert_eq!(s["strategy"], "HYBRID_AUTO");
    let answers = p.t("answers.json").display().to_string();
    let (code, out, err) = p.run(&["plan", "resume", &id, "--answers", &answers, "--yes"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(p.count("strategy"), 1, "{:?}", p.calls());
    assert_eq!(p.count("discovery"), 2, "{:?}", p.calls());
    assert_eq!(p.session()["status"], "approved");
}

#[test]
fn kill_9_during_generation_resumes_at_generation() {
    let p = Plan::new();
    p.kill_during("generate");
    let id = p.session_id();
    let s = p.session();
    assert_eq!(s["status"], "design");
    assert_eq!(s["decisions"][0]["selected_option_id"], "opt-b");
    let (code, out, err) = p.run(&["plan", "resume", &id, "--yes"]);
    assert_eq!(code, 0, "{out}\n{err}");
    for (step, n) in [
        ("strategy", 1),
        ("discovery", 1),
        ("design", 1),
        ("generate", 2),
    ] {
        assert_eq!(p.count(step), n, "{step}: {:?}", p.calls());
    }
    assert!(p.repo().join("prd.json").is_file());
}

#[test]
fn session_index_lookup_resumes_by_index() {
    let p = Plan::with_planner_extra(json!({
        "resume_args": ["--resume", "{session_index}"],
        "list_sessions_args": ["--list"]
    }));
    let (code, _, err) = p.plan(&["--yes"]);
    assert_eq!(code, 0, "{err}");
    let review = p
        .calls()
        .into_iter()
        .find(|l| l.starts_with("self-review"))
        .unwrap();
    assert!(review.contains("args=--resume 2"), "{review}");
}

#[test]
fn a_session_the_list_does_not_hold_exits_1() {
    let p = Plan::with_planner_extra(json!({
        "resume_args": ["--resume", "{session_index}"],
        "list_sessions_args": ["--list"]
    }));
    p.mark("listing", "  1. other (1 day ago) [sess-old]\n");
    let (code, _, err) = p.plan(&["--yes"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("session not found, re-run the plan"), "{err}");
    assert_eq!(p.count("self-review"), 0);
}

#[test]
fn a_failing_list_command_exits_1_with_its_output() {
    let p = Plan::with_planner_extra(json!({
        "resume_args": ["--resume", "{session_index}"],
        "list_sessions_args": ["--list"]
    }));
    p.mark("list-fail", "");
    let (code, _, err) = p.plan(&["--yes"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("boom: cannot read sessions"), "{err}");
    assert!(err.contains("exit code 4"), "{err}");
}

#[test]
fn auto_asks_nobody() {
    let p = Plan::new();
    let (code, out, err) = p.run(&["plan", "Add OAuth login", "--auto"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let s = p.session();
    assert_eq!(s["status"], "approved");
    assert_eq!(s["questions"][0]["answer"], "Google only");
    assert_eq!(s["decisions"][0]["selected_option_id"], "opt-a");
    assert!(out.contains("[auto]"), "{out}");
}

#[test]
fn forced_strategy_skips_the_assessment_and_mega_writes_a_mega_plan() {
    let p = Plan::new();
    p.mark("strategy", "MEGA_PLAN");
    let (code, out, err) = p.plan(&["--yes", "--strategy", "mega"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(p.count("strategy"), 0);
    assert!(p.repo().join("mega-plan.json").is_file());
    let (code, _, err) = p.run(&["validate", "--mega", "mega-plan.json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(p.session()["strategy"], "MEGA_PLAN");
}

#[test]
fn direct_strategy_insists_on_one_story() {
    let p = Plan::new();
    let (code, _, err) = p.plan(&["--yes", "--strategy", "direct", "--format-iterations", "1"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("one-story plan, but it has 2 stories"),
        "{err}"
    );
}

#[test]
fn a_json_design_doc_is_imported_as_is() {
    let p = Plan::new();
    let doc = p.t("design.json");
    write_json(&doc, &json!({"overview": {"title": "mine"}}));
    let (code, _, err) = p.plan(&["--yes", "--design-doc", doc.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let prompt = std::fs::read_to_string(p.t("prompt-generate.md")).unwrap();
    assert!(prompt.contains("provided by the person"), "{prompt}");
    let bad = p.t("bad.json");
    std::fs::write(&bad, "{\n  \"a\": }").unwrap();
    let (code, _, err) = p.plan(&["--design-doc", bad.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bad.json:2:"), "{err}");
}

#[test]
fn run_goes_from_goal_to_merged_code() {
    let p = Plan::new();
    let (code, out, err) = p.run(&["plan", "Add OAuth login", "--auto", "--run"]);
    assert_eq!(code, 0, "{out}\n{err}");
    // Both stories were implemented and merged into main.
    let files = git(p.repo(), &["ls-tree", "-r", "--name-only", "main"]);
    assert!(files.lines().any(|f| f == "story-001.txt"), "{files}");
    assert!(files.lines().any(|f| f == "story-002.txt"), "{files}");
    let prd: Value =
        serde_json::from_str(&std::fs::read_to_string(p.repo().join("prd.json")).unwrap()).unwrap();
    for s in prd["stories"].as_array().unwrap() {
        assert_eq!(s["status"], "complete", "{s}");
    }
    // Each story's agent got only the design its story_mappings name.
    let one = std::fs::read_to_string(p.t("impl-story-001.md")).unwrap();
    assert!(
        one.contains("AuthConfig") && one.contains("ADR-001"),
        "{one}"
    );
    assert!(
        !one.contains("LoginHandler") && !one.contains("Middleware"),
        "{one}"
    );
    let two = std::fs::read_to_string(p.t("impl-story-002.md")).unwrap();
    assert!(
        two.contains("LoginHandler") && two.contains("Middleware"),
        "{two}"
    );
    assert!(!two.contains("AuthConfig"), "{two}");
}

/// `plan --run` takes `approve`'s run options and they reach the run it
/// starts: `--review` has every story reviewed; a bad one is refused
/// before any agent plans.
#[test]
fn run_options_of_plan_run_reach_the_run() {
    let p = Plan::new();
    let (code, _, err) = p.run(&[
        "plan",
        "Add OAuth login",
        "--auto",
        "--run",
        "--max-cost",
        "-1",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--max-cost"), "{err}");
    assert!(p.calls().is_empty(), "{:?}", p.calls());

    let (code, out, err) = p.run(&[
        "plan",
        "Add OAuth login",
        "--auto",
        "--run",
        "--review",
        "--max-retries",
        "0",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    // The story reviews ran (the reviewer outside a planning step).
    let reviews: Vec<String> = p
        .calls()
        .into_iter()
        .filter(|l| l.starts_with("reviewer ") && l.ends_with("phase=review"))
        .filter(|l| l.split_whitespace().count() == 2)
        .collect();
    assert_eq!(reviews.len(), 2, "{:?}\n{out}\n{err}", p.calls());
}

#[test]
fn worktree_strategy_builds_on_its_own_branch_and_merges_it() {
    let p = Plan::new();
    let (code, out, err) = p.run(&[
        "plan",
        "Add OAuth login",
        "--auto",
        "--strategy",
        "worktree",
        "--run",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("it is built on branch cascade/plan-"), "{out}");
    let files = git(p.repo(), &["ls-tree", "-r", "--name-only", "main"]);
    assert!(files.lines().any(|f| f == "story-001.txt"), "{files}");
    assert!(files.lines().any(|f| f == "story-002.txt"), "{files}");
    // The repository root did not get the plan files: they lived in the worktree.
    assert!(!p.repo().join("prd.json").exists());
}

#[test]
fn a_markdown_design_doc_is_converted_by_the_agent() {
    let p = Plan::new();
    let doc = p.t("design.md");
    std::fs::write(&doc, "# Auth design\n\nUse JWT with a 15 minute expiry.\n").unwrap();
    let (code, _, err) = p.plan(&["--yes", "--design-doc", doc.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let prompt = std::fs::read_to_string(p.t("prompt-generate.md")).unwrap();
    assert!(
        prompt.contains("Use JWT with a 15 minute expiry."),
        "{prompt}"
    );
    assert!(prompt.contains("\"source\": \"converted\""), "{prompt}");
    let dd: Value =
        serde_json::from_str(&std::fs::read_to_string(p.repo().join("design_doc.json")).unwrap())
            .unwrap();
    assert_eq!(dd["metadata"]["source"], "converted");
}

#[test]
fn json_pause_is_one_event_with_the_command_that_continues() {
    let p = Plan::new();
    let (code, out, _) = p.run(&["plan", "Add OAuth login", "--json"]);
    assert_eq!(code, 3);
    let paused: Vec<Value> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "paused")
        .collect();
    assert_eq!(paused.len(), 1, "{out}");
    assert_eq!(paused[0]["waiting_for"], json!(["q-1", "q-2"]));
    let how = paused[0]["continue_with"].as_str().unwrap();
    assert!(
        how.contains(&format!("cascade plan answer {} q-1", p.session_id())),
        "{how}"
    );
    // The pending question itself is an event too.
    assert!(out.contains("\"event\":\"question\""), "{out}");
}

/// Runs `cascade <args>` on a pseudo-terminal (util-linux `script`) with
/// `input` typed in; `None` when `script` is not installed.
fn on_a_terminal(p: &Plan, args: &[&str], input: &str) -> Option<(i32, String)> {
    use std::io::Write;
    if StdCommand::new("script").arg("--version").output().is_err() {
        eprintln!("skipping: util-linux `script` is not installed (needed for a pseudo-terminal)");
        return None;
    }
    let quote = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
    let mut line = quote(
        &assert_cmd::cargo::cargo_bin("cascade")
            .display()
            .to_string(),
    );
    for a in args {
        line.push(' ');
        line.push_str(&quote(a));
    }
    line.push_str(" --agents ");
    line.push_str(&quote(&p.t("agents.json").display().to_string()));
    let mut child = StdCommand::new("script")
        .args(["-qec", &line, "/dev/null"])
        .current_dir(p.repo())
        .env("NO_COLOR", "1")
        .env("HOME", p.home.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("type the answers");
    let out = child.wait_with_output().expect("script finishes");
    Some((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    ))
}

#[test]
fn on_a_terminal_questions_decisions_and_review_are_asked_one_at_a_time() {
    let p = Plan::new();
    // q-1: option 2; q-2: free text; d-1: Enter (recommended) + rationale;
    // review: approve; run now: no.
    let Some((code, out)) = on_a_terminal(
        &p,
        &["plan", "Add OAuth login"],
        "2\nin a header\n\nfewest moving parts\na\nn\n",
    ) else {
        return;
    };
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("question 1 of 2 (scope): Which providers?"),
        "{out}"
    );
    assert!(out.contains("1) Google"), "{out}");
    assert!(out.contains("(recommended)"), "{out}");
    assert!(out.contains("approve, reject or cancel?"), "{out}");
    assert!(
        out.contains("critical path: story-001 -> story-002"),
        "{out}"
    );
    assert!(out.contains("run the plan now?"), "{out}");
    let s = p.session();
    assert_eq!(s["questions"][0]["answer"], "GitHub");
    assert_eq!(s["questions"][1]["answer"], "in a header");
    assert_eq!(s["decisions"][0]["selected_option_id"], "opt-a");
    assert_eq!(s["decisions"][0]["rationale"], "fewest moving parts");
    assert_eq!(s["status"], "approved");
    assert!(p.repo().join("prd.json").is_file());
}

#[test]
fn mega_strategy_runs_the_mega_plan_with_run() {
    let p = Plan::new();
    p.mark("strategy", "MEGA_PLAN");
    let (code, out, err) = p.plan(&["--yes", "--run"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(p.count("feature-prd"), 2, "{:?}", p.calls());
    let log = git(p.repo(), &["log", "--format=%s", "main"]);
    assert!(
        log.contains("auth-core") && log.contains("auth-ui"),
        "{log}"
    );
    // Feature stories get their feature design doc and what it inherits
    // from the project design doc (parent_design_doc).
    let prompts: Vec<String> = std::fs::read_dir(p.tools())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("impl-s"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    assert_eq!(prompts.len(), 2);
    for prompt in &prompts {
        assert!(prompt.contains("FeatureComp"), "{prompt}");
        assert!(
            prompt.contains("ADR-001") && prompt.contains("JWT"),
            "{prompt}"
        );
        assert!(prompt.contains("Layers"), "{prompt}");
    }
}

#[test]
fn kill_9_during_design_and_challenge_resume_there() {
    for (step, status) in [("design", "design"), ("challenge", "design")] {
        let p = Plan::new();
        p.kill_during(step);
        let id = p.session_id();
        assert_eq!(p.session()["status"], status, "{step}");
        let answers = p.t("answers.json").display().to_string();
        let (code, out, err) = p.run(&["plan", "resume", &id, "--yes", "--answers", &answers]);
        assert_eq!(code, 0, "{step}: {out}\n{err}");
        let n = if step == "challenge" {
            p.count("reviewer")
        } else {
            p.count(step)
        };
        assert_eq!(n, 2, "{step}: {:?}", p.calls());
        assert_eq!(p.count("generate"), 1, "{step}: {:?}", p.calls());
        assert_eq!(p.session()["status"], "approved");
    }
}

#[test]
fn a_session_in_use_is_refused() {
    let p = Plan::new();
    p.kill_during_with("generate", |id| {
        let (code, _, err) = p.run(&["plan", "resume", id]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("in use by another cascade"), "{err}");
    });
    // The killed holder's lock is stale: resuming works.
    let (code, _, err) = p.run(&["plan", "resume", &p.session_id(), "--yes"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn with_one_agent_the_planner_challenges_itself_and_says_so() {
    let p = Plan::new();
    let t = p.tools().display().to_string();
    write_json(
        &p.t("agents.json"),
        &json!({"default_agent": "planner", "agents": {
            "planner": {"type": "cli", "command": p.t("planner.sh"), "args": [], "env": {"TOOLS": t}}}}),
    );
    let (code, _, err) = p.plan(&["--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("no other agent is available, so 'planner' challenges its own plan"),
        "{err}"
    );
    assert_eq!(p.count("challenge"), 1, "{:?}", p.calls());
    assert!(p.session()["warnings"][0]
        .as_str()
        .unwrap()
        .contains("challenges its own plan"));
}

#[test]
fn ctrl_c_stops_the_agent_saves_the_session_and_exits_130() {
    let p = Plan::new();
    p.mark("hang-generate", "");
    let answers = p.t("answers.json").display().to_string();
    let child = StdCommand::new(assert_cmd::cargo::cargo_bin("cascade"))
        .current_dir(p.repo())
        .env("NO_COLOR", "1")
        .env("HOME", p.home.path())
        .args(["plan", "Add OAuth login", "--answers", &answers, "--yes"])
        .arg("--agents")
        .arg(p.t("agents.json"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cascade");
    let agent_pid = p.wait_for("pid-generate");
    let status = StdCommand::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let out = child.wait_with_output().expect("cascade exits");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    let id = p.session_id();
    assert!(err.contains(&format!("cascade plan resume {id}")), "{err}");
    // The agent's process group was stopped with it.
    let alive = StdCommand::new("kill")
        .args(["-0", &agent_pid])
        .status()
        .is_ok_and(|s| s.success());
    assert!(!alive, "agent {agent_pid} still runs");
    assert_eq!(p.session()["status"], "design");
    let (code, _, err) = p.run(&["plan", "resume", &id, "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(p.count("generate"), 2);
}

#[test]
fn resume_without_an_id_on_a_terminal_offers_the_open_sessions() {
    let p = Plan::new();
    let (code, _, _) = p.run(&["plan", "Add OAuth login"]);
    assert_eq!(code, 3);
    // Pick session 1, then answer q-1, q-2, d-1 (Enter: recommended), no
    // rationale, approve, do not run.
    let Some((code, out)) = on_a_terminal(&p, &["plan", "resume"], "1\nGoogle\ncookie\n\n\na\nn\n")
    else {
        return;
    };
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("continue which one? [1-1]"), "{out}");
    assert!(out.contains(&p.session_id()), "{out}");
    assert_eq!(p.session()["status"], "approved");
    assert_eq!(p.session()["questions"][1]["answer"], "cookie");
}

// Where the approved plan files go (issue 17): the project's Plan Cascade
// data directory when it has one, else the project; `--out DIR` overrides;
// the choice is made once per session.

impl Plan {
    /// Lays out this project's Plan Cascade data directory in HOME the way
    /// Plan Cascade does (`manifest.json` naming the project root).
    fn data_dir(&self) -> PathBuf {
        let root = self.repo().canonicalize().expect("repo path");
        let id = cascade_plan::paths::project_id(&root);
        let dir = self.home.path().join(".plan-cascade").join(&id);
        write_json(
            &dir.join("manifest.json"),
            &json!({"project_root": root.display().to_string(), "project_id": id,
                "created_at": "2026-01-28T10:00:00Z", "platform": "linux"}),
        );
        dir.canonicalize().expect("data dir")
    }

    fn root(&self) -> PathBuf {
        self.repo().canonicalize().expect("repo path")
    }
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("json")
}

fn same_file(a: &str, b: &Path) -> bool {
    Path::new(a).canonicalize().ok().as_deref() == b.canonicalize().ok().as_deref()
}

fn all_complete(prd: &Value) {
    let stories = prd["stories"].as_array().expect("stories");
    assert!(!stories.is_empty());
    for s in stories {
        assert_eq!(s["status"], "complete", "{s}");
    }
}

#[test]
fn with_a_data_directory_the_prd_goes_there_and_the_run_updates_it() {
    let p = Plan::new();
    let data = p.data_dir();
    let (code, out, err) = p.run(&["plan", "Add OAuth login", "--auto", "--run"]);
    assert_eq!(code, 0, "{out}\n{err}");
    // The choice is printed before anything runs.
    assert!(
        out.contains(&format!(
            "plan files: writing the plan to {} (this project's Plan Cascade data directory) and design_doc.json to {}",
            data.display(),
            p.root().display()
        )),
        "{out}"
    );
    // prd.json in the data directory, design_doc.json in the project, no
    // prd.json in the project.
    assert!(!p.repo().join("prd.json").exists());
    assert!(p.repo().join("design_doc.json").is_file());
    all_complete(&read_json(&data.join("prd.json")));
    // The run read that file and merged both stories.
    assert!(
        out.contains(&format!("running {}", data.join("prd.json").display())),
        "{out}"
    );
    let files = git(p.repo(), &["ls-tree", "-r", "--name-only", "main"]);
    assert!(files.lines().any(|f| f == "story-001.txt"), "{files}");
    assert!(files.lines().any(|f| f == "story-002.txt"), "{files}");
    // The design doc in the project reached the stories' agents.
    let one = std::fs::read_to_string(p.t("impl-story-001.md")).unwrap();
    assert!(one.contains("AuthConfig"), "{one}");
    // session.json records the choice and the written paths.
    let s = p.session();
    assert_eq!(s["options"]["output"]["place"], "data_dir", "{s}");
    assert!(
        same_file(
            s["outputs"]["prd"].as_str().unwrap(),
            &data.join("prd.json")
        ),
        "{s}"
    );
    assert!(
        same_file(
            s["outputs"]["design_doc"].as_str().unwrap(),
            &p.repo().join("design_doc.json")
        ),
        "{s}"
    );
    // The design doc stays out of git like the rest of cascade's files.
    assert_eq!(git(p.repo(), &["status", "--porcelain"]).trim(), "");
}

#[test]
fn without_a_data_directory_the_plan_goes_to_the_project_and_json_says_so() {
    let p = Plan::new();
    let (code, out, err) = p.run(&["plan", "Add OAuth login", "--auto", "--json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let started: Value = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["event"] == "plan_started")
        .expect("plan_started");
    let o = &started["plan_output"];
    assert_eq!(o["place"], "project", "{started}");
    assert!(
        same_file(o["plan_dir"].as_str().unwrap(), &p.root()),
        "{started}"
    );
    assert!(
        same_file(o["design_doc_dir"].as_str().unwrap(), &p.root()),
        "{started}"
    );
    assert!(
        o["description"]
            .as_str()
            .unwrap()
            .contains("no Plan Cascade data directory"),
        "{started}"
    );
    assert!(p.repo().join("prd.json").is_file());
    assert!(p.repo().join("design_doc.json").is_file());
    assert!(!p.home.path().join(".plan-cascade").exists());
    // plan_finished comes last and names the installed files.
    let last: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(last["event"], "plan_finished", "{out}");
    assert_eq!(last["status"], "approved", "{last}");
    let installed = &last["installed"];
    assert_eq!(installed["place"], "project", "{last}");
    assert!(
        same_file(
            installed["plan"].as_str().unwrap(),
            &p.repo().join("prd.json")
        ),
        "{last}"
    );
    assert!(
        same_file(
            installed["design_doc"].as_str().unwrap(),
            &p.repo().join("design_doc.json")
        ),
        "{last}"
    );
    assert_eq!(last["outputs"]["prd"], installed["plan"], "{last}");
    assert_eq!(
        last["outputs"]["design_doc"], installed["design_doc"],
        "{last}"
    );
}

#[test]
fn without_run_the_hint_names_a_plan_discovery_would_not_pick() {
    // In the project: the plain command finds it.
    let p = Plan::new();
    let (code, out, err) = p.run(&["plan", "Add OAuth login", "--auto"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("run it with `cascade approve --auto-run`"),
        "{out}"
    );
    // Under --out: the hint passes the file.
    let p = Plan::new();
    let (code, out, err) = p.run(&["plan", "Add OAuth login", "--auto", "--out", "plans"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let prd = p.root().join("plans/prd.json");
    assert!(
        out.contains(&format!(
            "run it with `cascade approve --auto-run --prd {}`",
            prd.display()
        )),
        "{out}"
    );
    // And that command runs it.
    let (code, out, err) = p.run(&["approve", "--auto-run", "--prd", prd.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}\n{err}");
    all_complete(&read_json(&prd));
}

#[test]
fn out_overrides_the_data_directory_and_the_run_uses_that_file() {
    let p = Plan::new();
    let data = p.data_dir();
    let (code, out, err) = p.run(&[
        "plan",
        "Add OAuth login",
        "--auto",
        "--out",
        "plans/oauth",
        "--run",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let dir = p.root().join("plans/oauth");
    assert!(
        out.contains(&format!(
            "plan files: writing plan files to {} (--out)",
            dir.display()
        )),
        "{out}"
    );
    all_complete(&read_json(&dir.join("prd.json")));
    assert!(dir.join("design_doc.json").is_file());
    assert!(!data.join("prd.json").exists());
    assert!(!p.repo().join("prd.json").exists());
    assert!(!p.repo().join("design_doc.json").exists());
    // The design doc beside the plan is the one the stories got.
    let one = std::fs::read_to_string(p.t("impl-story-001.md")).unwrap();
    assert!(one.contains("AuthConfig"), "{one}");
    let s = p.session();
    assert_eq!(s["options"]["output"]["place"], "flag", "{s}");
    assert!(
        same_file(s["outputs"]["prd"].as_str().unwrap(), &dir.join("prd.json")),
        "{s}"
    );
    // Plan files inside the checkout are kept out of git.
    assert_eq!(git(p.repo(), &["status", "--porcelain"]).trim(), "");
}

#[test]
fn out_must_be_a_directory() {
    let p = Plan::new();
    std::fs::write(p.repo().join("afile"), "x").unwrap();
    let (code, _, err) = p.run(&["plan", "Add OAuth login", "--auto", "--out", "afile"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--out 'afile' is a file"), "{err}");
    assert!(!p.repo().join(".cascade/plans").exists() || p.count("strategy") == 0);
}

#[test]
fn resume_keeps_the_choice_the_session_started_with() {
    let p = Plan::new();
    // Paused at discovery without answers: the choice is the project.
    let (code, out, err) = p.run(&["plan", "Add OAuth login"]);
    assert_eq!(code, 3, "{out}\n{err}");
    // A data directory appears meanwhile; the session keeps its choice.
    let data = p.data_dir();
    let id = p.session_id();
    let answers = p.t("answers.json").display().to_string();
    let (code, out, err) = p.run(&["plan", "resume", &id, "--answers", &answers, "--yes"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("no Plan Cascade data directory for this project"),
        "{out}"
    );
    assert!(p.repo().join("prd.json").is_file());
    assert!(!data.join("prd.json").exists());
    // `plan approve ID --run` later runs the file where it was written and
    // does not reinstall the draft over it.
    let (code, out, err) = p.run(&["plan", "resume", &id, "--run"]);
    assert_eq!(code, 0, "{out}\n{err}");
    all_complete(&read_json(&p.repo().join("prd.json")));
    assert!(!p
        .repo()
        .join(format!(".cascade/plans/{id}/replaced-prd.json"))
        .exists());
}

#[test]
fn worktree_strategy_keeps_its_plan_in_its_worktree_even_with_a_data_directory() {
    let p = Plan::new();
    let data = p.data_dir();
    let (code, out, err) = p.run(&[
        "plan",
        "Add OAuth login",
        "--auto",
        "--strategy",
        "worktree",
        "--run",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("HYBRID_WORKTREE: the plan files go into the plan's own worktree"),
        "{out}"
    );
    assert!(!data.join("prd.json").exists());
    assert!(!p.repo().join("prd.json").exists());
    let files = git(p.repo(), &["ls-tree", "-r", "--name-only", "main"]);
    assert!(files.lines().any(|f| f == "story-002.txt"), "{files}");
}

#[test]
fn mega_strategy_writes_the_mega_plan_to_the_data_directory() {
    let p = Plan::new();
    let data = p.data_dir();
    p.mark("strategy", "MEGA_PLAN");
    let (code, out, err) = p.plan(&["--yes", "--run"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(data.join("mega-plan.json").is_file());
    assert!(!p.repo().join("mega-plan.json").exists());
    assert!(p.repo().join("design_doc.json").is_file());
    let log = git(p.repo(), &["log", "--format=%s", "main"]);
    assert!(
        log.contains("auth-core") && log.contains("auth-ui"),
        "{log}"
    );
    // The project design doc (in the project) is the features' parent.
    let prompts: Vec<String> = std::fs::read_dir(p.tools())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("impl-s"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    assert_eq!(prompts.len(), 2);
    for prompt in &prompts {
        assert!(prompt.contains("ADR-001"), "{prompt}");
    }
    // The mega run worked on that file (its feature statuses live in the
    // run database, as for any mega-plan).
    let state = crate::common::mega_state(p.repo());
    assert!(
        same_file(
            state["plan"].as_str().unwrap(),
            &data.join("mega-plan.json")
        ),
        "{state}"
    );
}

// Bad answers are refused before they are kept (a bad answer in the
// session's answers.json would stop every later resume).

#[test]
fn plan_answer_with_an_unknown_option_is_refused_and_not_kept() {
    let p = Plan::new();
    write_json(
        &p.t("answers.json"),
        &json!({"q-1": "GitHub", "q-2": "header"}),
    );
    let (code, out, err) = p.plan(&[]);
    assert_eq!(code, 3, "{out}\n{err}");
    let id = p.session_id();
    let kept = p.repo().join(format!(".cascade/plans/{id}/answers.json"));
    let before = std::fs::read_to_string(&kept).unwrap();
    let (code, _, err) = p.run(&["plan", "answer", &id, "d-1", "opt-z: because"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("d-1 (\"Session storage\") has no option 'opt-z' (options: opt-a = JWT, opt-b = Server sessions)"),
        "{err}"
    );
    let (code, _, err) = p.run(&["plan", "answer", &id, "d-1", ""]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("the answer to d-1 is empty"), "{err}");
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), before);
    // The session is not stuck: resume still pauses at d-1, and a good
    // answer continues it to the review.
    let (code, _, err) = p.run(&["plan", "resume", &id]);
    assert_eq!(code, 3, "{err}");
    let (code, out, err) = p.run(&["plan", "answer", &id, "d-1", "opt-b: revocable"]);
    assert_eq!(code, 3, "{out}\n{err}");
    assert_eq!(p.session()["status"], "review");
    // Answered ones cannot be changed behind the plan's back.
    let (code, _, err) = p.run(&["plan", "answer", &id, "q-1", "Google"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("q-1 of session"), "{err}");
    assert!(err.contains("is answered already (GitHub)"), "{err}");
    let (code, _, err) = p.run(&["plan", "answer", &id, "d-1", "opt-a"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is answered already (opt-b)"), "{err}");
}

#[test]
fn an_answers_file_with_an_unknown_key_exits_2_at_its_line_and_column() {
    let p = Plan::new();
    let bad = p.t("typo.json");
    std::fs::write(&bad, "{\"q-1\": \"GitHub\",\n  \"q1\": \"header\"}\n").unwrap();
    let (code, out, err) = p.run(&[
        "plan",
        "Add OAuth login",
        "--answers",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains(&format!("{}:2:3: \"q1\": not an answer key", bad.display())),
        "{err}"
    );
    // Nothing started.
    assert_eq!(p.count("strategy"), 0);
}

#[test]
fn a_rejection_without_a_reason_is_refused() {
    let p = Plan::new();
    let (code, out, err) = p.plan(&[]);
    assert_eq!(code, 3, "{out}\n{err}");
    assert_eq!(p.session()["status"], "review");
    let id = p.session_id();
    let designs = p.count("design");
    let (code, _, err) = p.run(&["plan", "reject", &id, "--reason", "  "]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--reason is empty"), "{err}");
    let (code, _, err) = p.run(&["plan", "answer", &id, "review", "reject"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is not a review answer"), "{err}");
    // Nothing was used up: still at review, no rejection counted, no new design.
    assert_eq!(p.session()["status"], "review");
    assert_eq!(p.session()["reject_count"], 0);
    assert_eq!(p.count("design"), designs);
}

#[test]
fn a_missing_design_doc_or_no_repository_is_bad_input() {
    let p = Plan::new();
    let missing = p.t("nope.md");
    let (code, _, err) = p.plan(&["--design-doc", missing.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "--design-doc '{}': no such file",
            missing.display()
        )),
        "{err}"
    );
    assert_eq!(p.count("strategy"), 0);
    // Outside a repository: exit 2, saying once how to fix it.
    let (code, _, err) = {
        let out = cascade(p.tools())
            .env("HOME", p.home.path())
            .args(["plan", "list"])
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("git init"), "{err}");
    assert_eq!(err.matches("git init").count(), 1, "{err}");
}

#[test]
fn a_plan_already_in_the_data_directory_is_replaced_with_a_warning_and_kept() {
    let p = Plan::new();
    let data = p.data_dir();
    let old = r#"{"goal": "an older plan", "stories": []}"#;
    std::fs::write(data.join("prd.json"), old).unwrap();
    let (code, out, err) = p.run(&["plan", "Add OAuth login", "--auto"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let kept = p.in_session("replaced-prd.json");
    assert!(
        err.contains(&format!(
            "warning: '{}' existed and was replaced; the old one is kept in '{}'",
            data.join("prd.json").display(),
            kept.display()
        )),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), old);
    assert_eq!(read_json(&data.join("prd.json"))["goal"], "oauth");
}

#[test]
fn worktree_strategy_with_out_writes_there_and_still_builds_in_its_worktree() {
    let p = Plan::new();
    let out_dir = p.tools().join("plan-out");
    let (code, out, err) = p.run(&[
        "plan",
        "Add OAuth login",
        "--auto",
        "--strategy",
        "worktree",
        "--out",
        out_dir.to_str().unwrap(),
        "--run",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("it is built on branch cascade/plan-"), "{out}");
    assert!(
        !out.contains("HYBRID_WORKTREE: the plan files go into"),
        "{out}"
    );
    all_complete(&read_json(&out_dir.join("prd.json")));
    assert!(out_dir.join("design_doc.json").is_file());
    let files = git(p.repo(), &["ls-tree", "-r", "--name-only", "main"]);
    assert!(files.lines().any(|f| f == "story-002.txt"), "{files}");
}

#[test]
fn on_a_terminal_a_rejection_asks_again_for_an_empty_reason() {
    let p = Plan::new();
    // q-1, q-2, d-1 as above; review: reject, an empty reason (asked
    // again), a real one; then the second review: cancel.
    let Some((code, out)) = on_a_terminal(
        &p,
        &["plan", "Add OAuth login"],
        "2\nin a header\n\nfewest moving parts\nr\n\nsplit the login story\n\nagain\nc\n",
    ) else {
        return;
    };
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out.matches("reason (it goes into the next design) >")
            .count(),
        2,
        "{out}"
    );
    let s = p.session();
    assert_eq!(s["reject_count"], 1, "{s}");
    assert!(
        s["rejections"]
            .to_string()
            .contains("split the login story"),
        "{s}"
    );
    assert_eq!(s["status"], "cancelled", "{s}");
}
