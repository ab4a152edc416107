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
  printf '# Own challenge\n\nVerdict: APPROVED\n' > "$CASCADE_OUTPUT" ;;
esac
echo '{"type": "system", "subtype": "init", "session_id": "sess-gen-1", "model": "scripted-1"}'
printf '{"type": "result", "subtype": "success", "is_error": false, "result": "%s", "session_id": "sess-gen-1", "usage": {"input_tokens": 100, "output_tokens": 20}, "total_cost_usd": 0.01}\n' "$result"
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

struct Plan {
    repo: tempfile::TempDir,
    tools: tempfile::TempDir,
}

impl Plan {
    fn new() -> Plan {
        Plan::with_planner_extra(json!({}))
    }

    /// `extra`: more fields of the planner's agents.json entry.
    fn with_planner_extra(extra: Value) -> Plan {
        let p = Plan {
            repo: init_repo(),
            tools: tempfile::tempdir().expect("tools"),
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

    fn t(&self, name: &str) -> PathBuf {
        self.tools().join(name)
    }

    fn mark(&self, name: &str, content: &str) {
        std::fs::write(self.t(name), content).expect("marker");
    }

    fn cmd(&self, args: &[&str]) -> assert_cmd::Command {
        let mut c = cascade(self.repo());
        c.args(args)
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
    fn plan(&self, extra: &[&str]) -> (i32, String, String) {
        let answers = self.t("answers.json").display().to_string();
        let mut args = vec!["plan", "Add OAuth login", "--answers", &answers];
        args.extend_from_slice(extra);
        self.run(&args)
    }

    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.t("calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// How many calls of `step` (first word of the calls log line) ran.
    fn count(&self, step: &str) -> usize {
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

    fn session(&self) -> Value {
        let p = self
            .repo()
            .join(".cascade/plans")
            .join(self.session_id())
            .join("session.json");
        serde_json::from_str(&std::fs::read_to_string(p).expect("session.json")).expect("json")
    }

    /// Starts `cascade plan ...` in the background.
    fn background(&self, args: &[&str]) -> std::process::Child {
        StdCommand::new(assert_cmd::cargo::cargo_bin("cascade"))
            .current_dir(self.repo())
            .env("NO_COLOR", "1")
            .env("HOME", self.repo())
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
        .env("HOME", p.repo())
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
        .env("HOME", p.repo())
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
