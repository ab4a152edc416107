//! End-to-end tests of confinement: scripted agents and gates that try to
//! leave their worktree (a write outside, into another story's worktree,
//! into the main checkout, into `$HOME`; a read of a hidden credential; a
//! connect to a port their definition does not name) while their own edits
//! go through, the `--notify` command held to its temp directory,
//! `--sandbox off` letting all of it through, and `--sandbox required`
//! refusing a kernel without Landlock (`CASCADE_LANDLOCK_ABI=0`, the test
//! hook).
//!
//! These runs drop the temp directory the other modules' tests may write
//! (see `common::cascade_command`) and point `$HOME` at a temp directory
//! holding `.ssh/id_x`. A kernel without Landlock skips the confined checks.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{cascade, code, events, explain, git, init_repo, of_kind, script, write_json};

/// A repository, a `$HOME` with a secret, a tools directory (scripts and
/// agents.json, only read) and a directory outside all of them.
struct Fixture {
    repo: tempfile::TempDir,
    home: tempfile::TempDir,
    tools: tempfile::TempDir,
    outside: tempfile::TempDir,
}

const SECRET: &str = "very secret key";

impl Fixture {
    fn new() -> Fixture {
        let f = Fixture {
            repo: init_repo(),
            home: tempfile::tempdir().expect("home"),
            tools: tempfile::tempdir().expect("tools"),
            outside: tempfile::tempdir().expect("outside"),
        };
        std::fs::create_dir_all(f.home().join(".ssh")).expect("mkdir");
        std::fs::write(f.home().join(".ssh/id_x"), SECRET).expect("secret");
        f
    }

    fn repo(&self) -> &Path {
        self.repo.path()
    }

    fn home(&self) -> &Path {
        self.home.path()
    }

    fn t(&self, name: &str) -> PathBuf {
        self.tools.path().join(name)
    }

    /// prd.json with `stories` (independent) and `gates`.
    fn write_prd(&self, stories: &[&str], gates: Value) {
        let stories: Vec<Value> = stories
            .iter()
            .map(|id| {
                json!({"id": id, "title": format!("story {id}"), "description": "d",
                       "priority": "high", "dependencies": [], "status": "pending",
                       "acceptance_criteria": ["done"]})
            })
            .collect();
        write_json(
            &self.repo().join("prd.json"),
            &json!({"metadata": {"version": "1.0"}, "goal": "g", "objectives": [],
                    "stories": stories,
                    "quality_gates": {"enabled": true, "fail_fast": false, "use_cache": false, "gates": gates}}),
        );
    }

    /// The agent: waits until `peers` worktrees exist beside its own, then
    /// tries each escape and writes what happened to `<story>.txt` in its
    /// worktree (merged, so main shows it).
    fn write_agent(&self, peers: usize) {
        let body = format!(
            r#"r="$CASCADE_STORY_ID.txt"
try() {{ if sh -c "$2" 2>/dev/null; then echo "$1 allowed" >> "$r"; else echo "$1 denied" >> "$r"; fi; }}
i=0; while [ "$(ls .. | wc -l)" -lt {peers} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
own="$(basename "$PWD")"
try outside "echo x > '{outside}/from-$CASCADE_STORY_ID'"
for d in ../*; do [ "$d" = "../$own" ] || try sibling "echo x > '$d/from-$CASCADE_STORY_ID'"; done
try main "echo x > '{repo}/from-$CASCADE_STORY_ID'"
try home "echo x > '$HOME/from-$CASCADE_STORY_ID'"
try secret "cat '$HOME/.ssh/id_x'"
try tmp 'echo x > "$TMPDIR/t" && [ "$TMPDIR" != /tmp ]'
echo done >> "$r""#,
            outside = self.outside.path().display(),
            repo = self.repo().display(),
        );
        self.set_agent(&body);
    }

    /// agents.json with one agent running `body` (sh).
    fn set_agent(&self, body: &str) {
        self.set_agent_with(body, Value::Null);
    }

    /// agents.json with one agent running `body` (sh) whose definition
    /// has `sandbox` (null: none).
    fn set_agent_with(&self, body: &str, sandbox: Value) {
        script(&self.t("agent.sh"), body);
        write_json(
            &self.t("agents.json"),
            &json!({"default_agent": "escape", "agents": {"escape": {
                "type": "cli", "command": self.t("agent.sh").display().to_string(),
                "args": [], "timeout": 60, "sandbox": sandbox}}}),
        );
    }

    /// `cascade <args> --agents <the fixture's> <extra>` with `env`, `$HOME`
    /// at the fixture's home and nothing but the sandbox's own rules.
    fn run(&self, args: &[&str], extra: &[&str], env: &[(&str, &str)]) -> std::process::Output {
        let mut cmd = cascade(self.repo());
        // A proxy in the environment would add its port to the agents'.
        for var in cascade_agents::config::PROXY_VARS {
            cmd.env_remove(var);
        }
        cmd.env_remove(cascade_engine::confine::WRITE_VAR)
            .env("HOME", self.home())
            .args(args)
            .arg("--agents")
            .arg(self.t("agents.json"))
            .args(extra)
            .timeout(Duration::from_secs(120));
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("cascade runs")
    }

    /// `cascade approve` with `extra` (see [`Fixture::run`]).
    fn approve(&self, extra: &[&str], env: &[(&str, &str)]) -> (std::process::Output, Vec<Value>) {
        let approve = ["approve", "--auto-run", "--json", "--retry-delay", "0"];
        let out = self.run(
            &[&approve[..], &["--max-retries", "0"]].concat(),
            extra,
            env,
        );
        let evs = events(&out);
        (out, evs)
    }

    /// `cascade sandbox check --json` with `extra`: its exit code and report.
    fn sandbox_check(&self, extra: &[&str], env: &[(&str, &str)]) -> (i32, Value, String) {
        let out = self.run(&["sandbox", "check", "--json"], extra, env);
        let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        (code(&out), report, explain(&out))
    }

    /// `.cascade/config.json` with `sandbox.mode` `required`, committed on main.
    fn require_the_sandbox(&self) {
        write_json(
            &self.repo().join(".cascade/config.json"),
            &json!({"sandbox": {"mode": "required"}}),
        );
        git(self.repo(), &["add", "-f", ".cascade/config.json"]);
        git(self.repo(), &["commit", "-q", "-m", "require the sandbox"]);
    }

    /// What story `id` recorded, as merged into main.
    fn recorded(&self, id: &str) -> String {
        git(self.repo(), &["show", &format!("main:{id}.txt")])
    }
}

/// Whether this kernel confines (else the test says why it skips).
fn landlock() -> bool {
    let abi = cascade_process::sandbox::kernel_abi();
    if abi == 0 {
        eprintln!("skipped: this kernel enforces no Landlock");
    }
    abi > 0
}

#[test]
fn an_agent_edits_its_worktree_but_cannot_write_outside_it_nor_read_a_hidden_key() {
    if !landlock() {
        return;
    }
    let f = Fixture::new();
    f.write_prd(&["s1", "s2"], json!([]));
    f.write_agent(2);
    let (out, evs) = f.approve(&["--parallel", "2"], &[]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    for id in ["s1", "s2"] {
        let seen = f.recorded(id);
        for line in [
            "outside denied",
            "sibling denied",
            "main denied",
            "home denied",
            "secret denied",
            "tmp allowed",
            "done",
        ] {
            assert!(
                seen.lines().any(|l| l == line),
                "{id}: no '{line}' in:\n{seen}"
            );
        }
        assert_eq!(
            seen.matches(" allowed").count(),
            1,
            "{id}: only tmp:\n{seen}"
        );
        assert!(!f.outside.path().join(format!("from-{id}")).exists());
        assert!(!f.repo().join(format!("from-{id}")).exists());
        assert!(!f.home().join(format!("from-{id}")).exists());
    }
    // Neither story's commit holds what the other tried to put in it.
    let files = git(f.repo(), &["ls-tree", "--name-only", "main"]);
    assert!(!files.contains("from-"), "{files}");
    let abi = format!("landlock abi {}", cascade_process::sandbox::kernel_abi());
    for e in of_kind(&evs, "story_started") {
        assert_eq!(e["confinement"], abi.as_str(), "{e}");
    }
    // The summary and `status` say so too.
    let finished = of_kind(&evs, "run_finished");
    assert_eq!(finished[0]["summary"][0]["confinement"], abi.as_str());
    let out = cascade(f.repo())
        .args(["status", "--json"])
        .output()
        .expect("status runs");
    let status: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    assert_eq!(
        status["stories"]["s1"]["confinement"],
        abi.as_str(),
        "{status}"
    );
    let out = cascade(f.repo())
        .arg("status")
        .output()
        .expect("status runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("Confinement: {abi}")), "{text}");
}

#[test]
fn sandbox_off_lets_the_same_agent_through() {
    let f = Fixture::new();
    f.write_prd(&["s1"], json!([]));
    f.write_agent(1);
    let (out, evs) = f.approve(&["--sandbox", "off"], &[]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let seen = f.recorded("s1");
    for line in [
        "outside allowed",
        "main allowed",
        "home allowed",
        "secret allowed",
    ] {
        assert!(seen.lines().any(|l| l == line), "no '{line}' in:\n{seen}");
    }
    assert!(f.outside.path().join("from-s1").exists());
    for e in of_kind(&evs, "story_started") {
        assert_eq!(e["confinement"], "none", "{e}");
    }
}

/// A required gate that reads the hidden key (and one that writes its
/// own worktree and the temp dir, which must pass).
fn gate_fixture() -> Fixture {
    let f = Fixture::new();
    script(&f.t("read-key.sh"), r#"cat "$HOME/.ssh/id_x""#);
    script(
        &f.t("write-own.sh"),
        r#"echo built > gate-output.txt && echo x > "$TMPDIR/scratch""#,
    );
    let gate = |name: &str| {
        json!({"name": name, "type": "test", "required": true,
               "command": f.t(&format!("{name}.sh")).display().to_string(), "args": []})
    };
    f.write_prd(&["s1"], json!([gate("read-key"), gate("write-own")]));
    f.write_agent(1);
    f
}

#[test]
fn a_gate_cannot_read_a_hidden_key_and_sandbox_off_lets_it() {
    if !landlock() {
        return;
    }
    // The base's gates run first, confined as a story's are: reading the
    // key fails there already, so the run stops before any agent (exit 2)
    // naming that gate, while the gate writing its own copy and temp dir
    // passes.
    let f = gate_fixture();
    let (out, evs) = f.approve(&[], &[]);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    let judged = of_kind(&evs, "base_judged");
    assert_eq!(judged.len(), 1, "{evs:?}");
    let failed = judged[0]["failed"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = failed.iter().filter_map(|g| g["gate"].as_str()).collect();
    assert_eq!(names, ["read-key"], "{evs:?}");
    let errors = failed[0]["errors"].to_string();
    assert!(errors.contains("Permission denied"), "{errors}");
    assert!(of_kind(&evs, "story_started").is_empty(), "{evs:?}");

    let f = gate_fixture();
    let (out, _) = f.approve(&["--sandbox", "off"], &[]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
}

#[test]
fn required_on_a_kernel_without_landlock_exits_2_and_best_effort_warns_once() {
    let f = Fixture::new();
    f.write_prd(&["s1", "s2"], json!([]));
    // Unconfined, an escaping agent would dirty the main checkout.
    f.set_agent(r#"echo ok > "$CASCADE_STORY_ID.txt""#);
    let none = [(cascade_process::sandbox::ABI_OVERRIDE_VAR, "0")];
    let (out, _) = f.approve(&["--sandbox", "required"], &none);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--sandbox required") && err.contains("Landlock"),
        "{err}"
    );
    assert!(
        git(f.repo(), &["branch", "--list", "cascade/*"])
            .trim()
            .is_empty(),
        "nothing ran"
    );

    // The same from the project's config, committed on the base.
    f.require_the_sandbox();
    let (out, _) = f.approve(&[], &none);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("sandbox.mode"),
        "{}",
        explain(&out)
    );

    let (out, evs) = f.approve(&["--sandbox", "best-effort"], &none);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let warnings: Vec<_> = of_kind(&evs, "notice")
        .into_iter()
        .filter(|e| e["message"].as_str().unwrap_or("").contains("unconfined"))
        .collect();
    assert_eq!(warnings.len(), 1, "{evs:?}");
    for e in of_kind(&evs, "story_started") {
        assert_eq!(e["confinement"], "none", "{e}");
    }
}

/// The findings of the run's `verification_finished` events, as `rule`
/// and `text`.
fn findings(evs: &[Value]) -> Vec<(String, String)> {
    of_kind(evs, "verification_finished")
        .into_iter()
        .flat_map(|e| e["findings"].as_array().cloned().unwrap_or_default())
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or("").to_string();
            (s("rule"), s("text"))
        })
        .collect()
}

#[test]
fn a_story_adding_a_link_to_etc_passwd_fails_verification_and_is_not_merged() {
    let f = Fixture::new();
    f.write_prd(&["s1"], json!([]));
    f.set_agent(r#"ln -s /etc/passwd escape_link && echo ok > "$CASCADE_STORY_ID.txt""#);
    let (out, evs) = f.approve(&[], &[]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    assert_eq!(
        findings(&evs),
        [("outward-symlink".to_string(), "-> /etc/passwd".to_string())],
        "{}",
        explain(&out)
    );
    let failed = of_kind(&evs, "attempt_failed");
    assert_eq!(failed[0]["error_type"], "verification", "{failed:?}");
    let files = git(f.repo(), &["ls-tree", "--name-only", "main"]);
    assert!(!files.contains("escape_link"), "{files}");
}

/// `git config` in the repository at `dir`, its output when it exits 0.
fn git_config_get(dir: &Path, key: &str) -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["config", "--get", key])
        .current_dir(dir)
        .output()
        .expect("git runs");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
fn an_agent_setting_core_hooks_path_is_a_finding_and_the_config_is_put_back() {
    // Unconfined (the agent could not write .git/config otherwise), as on
    // a kernel without Landlock.
    let f = Fixture::new();
    f.write_prd(&["s1"], json!([]));
    f.set_agent(
        r#"git config core.hooksPath "$PWD/.hooks" && git config user.name changed && echo ok > "$CASCADE_STORY_ID.txt""#,
    );
    let (out, evs) = f.approve(&["--sandbox", "off"], &[]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    let found = findings(&evs);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "git-config-changed");
    assert!(found[0].1.starts_with("core.hookspath = "), "{found:?}");
    assert_eq!(git_config_get(f.repo(), "core.hooksPath"), None);
    // What runs no program stays as the agent left it.
    assert_eq!(
        git_config_get(f.repo(), "user.name").as_deref(),
        Some("changed")
    );
    let files = git(f.repo(), &["ls-tree", "--name-only", "main"]);
    assert!(!files.contains("s1.txt"), "not merged: {files}");
}

#[test]
fn a_confined_agent_cannot_set_core_hooks_path_at_all() {
    if !landlock() {
        return;
    }
    let f = Fixture::new();
    f.write_prd(&["s1"], json!([]));
    f.set_agent(
        r#"if git config core.hooksPath /tmp/h 2>/dev/null; then r=allowed; else r=denied; fi; echo "$r" > "$CASCADE_STORY_ID.txt""#,
    );
    let (out, evs) = f.approve(&[], &[]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(f.recorded("s1").trim(), "denied");
    assert!(findings(&evs).is_empty(), "{evs:?}");
    assert_eq!(git_config_get(f.repo(), "core.hooksPath"), None);
}

/// The probe of a `sandbox check` report named `name`.
fn probe<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["probes"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == name))
        .unwrap_or_else(|| panic!("no probe '{name}' in {report}"))
}

#[test]
fn sandbox_check_prints_the_policy_and_its_probes_come_out_as_it_says() {
    let f = Fixture::new();
    f.write_prd(&["s1"], json!([]));
    f.set_agent("exit 0");
    // The agent's own additions, as agents.json declares them.
    write_json(
        &f.t("agents.json"),
        &json!({"default_agent": "escape", "agents": {"escape": {
            "type": "cli", "command": f.t("agent.sh").display().to_string(), "args": [],
            "sandbox": {"write": ["~/.agent-state"], "net_ports": [8443]}}}}),
    );
    let (code, report, explain) = f.sandbox_check(&["--story", "s1"], &[]);
    assert_eq!(code, 0, "{explain}");
    let abi = cascade_process::sandbox::kernel_abi();
    assert_eq!(report["mode"], "best-effort", "{report}");
    assert_eq!(report["landlock_abi"], abi);
    assert_eq!(report["story"], "s1");
    assert_eq!(report["agent"], "escape");
    assert_eq!(report["agent_ports"], json!([8443]));
    let state = f.home().join(".agent-state").display().to_string();
    assert!(
        report["writable"]
            .as_array()
            .unwrap()
            .contains(&json!(state)),
        "{report}"
    );
    let ssh = f.home().join(".ssh").display().to_string();
    assert!(
        report["hidden"].as_array().unwrap().contains(&json!(ssh)),
        "{report}"
    );
    assert_eq!(report["enforced"], true);
    let inside = probe(&report, "write inside the worktree");
    assert_eq!(inside["result"], "allowed", "{inside}");
    let read = probe(&report, "read a hidden path");
    assert_eq!(read["target"], format!("{ssh}/id_x"));
    // The agent reaches the port it names (nothing need listen there) and,
    // where the kernel has TCP rules, no other.
    let ports = abi >= cascade_process::sandbox::NET_ABI;
    assert_eq!(report["agent_ports_enforced"], ports, "{report}");
    let named = probe(&report, "connect from the agent to a port it names");
    assert_eq!(named["target"], "127.0.0.1:8443", "{named}");
    assert_eq!(named["result"], "allowed", "{named}");
    let other = probe(&report, "connect from the agent to a port it does not name");
    let reached = if ports { "blocked" } else { "allowed" };
    assert_eq!(other["result"], reached, "{other}");
    let connect = probe(&report, "connect from a gate to the host's 127.0.0.1");
    let isolated = abi > 0 && cascade_process::sandbox::own_network_available();
    assert_eq!(report["gate_network_isolated"], isolated);
    let reached = if isolated { "blocked" } else { "allowed" };
    assert_eq!(connect["result"], reached, "{connect}");
    let escapes = [
        "write outside: the main checkout",
        "write outside: $HOME",
        "read a hidden path",
    ];
    let expected = if abi > 0 { "blocked" } else { "allowed" };
    for name in escapes {
        assert_eq!(probe(&report, name)["result"], expected, "{report}");
    }
    // The probes leave nothing behind.
    let left: Vec<_> = std::fs::read_dir(f.home())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left, [std::ffi::OsString::from(".ssh")], "{left:?}");

    let (code, _, explain) = f.sandbox_check(&["--story", "nope"], &[]);
    assert_eq!(code, 2, "{explain}");
    assert!(explain.contains("unknown story 'nope'"), "{explain}");
}

#[test]
fn sandbox_check_exits_1_when_a_required_sandbox_is_not_enforced() {
    let f = Fixture::new();
    f.write_prd(&["s1"], json!([]));
    f.set_agent("exit 0");
    f.require_the_sandbox();
    let none = [(cascade_process::sandbox::ABI_OVERRIDE_VAR, "0")];
    let (code, report, explain) = f.sandbox_check(&[], &none);
    assert_eq!(code, 1, "{explain}");
    assert_eq!(report["mode"], "required", "{report}");
    assert_eq!(report["mode_from"], "sandbox.mode in .cascade/config.json");
    assert_eq!(report["enforced"], false);
    let home = probe(&report, "write outside: $HOME");
    assert_eq!(
        (&home["expected"], &home["result"]),
        (&json!("blocked"), &json!("allowed")),
        "{home}"
    );
}

/// A required gate that must not reach the listener on the host's `port`
/// but must use a listener of its own on 127.0.0.1.
fn net_gate_fixture(port: u16) -> Fixture {
    let f = Fixture::new();
    script(
        &f.t("net.sh"),
        &format!(
            r#"python3 - <<'EOF'
import socket, sys
try:
    socket.create_connection(("127.0.0.1", {port}), 2)
    print("reached the host's listener")
    sys.exit(1)
except OSError as e:
    print("the host is out of reach:", e)
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
socket.create_connection(s.getsockname(), 2)
print("its own loopback works")
EOF"#
        ),
    );
    let gate = json!({"name": "net", "type": "test", "required": true,
                      "command": f.t("net.sh").display().to_string(), "args": []});
    f.write_prd(&["s1"], json!([gate]));
    f.set_agent(r#"echo ok > "$CASCADE_STORY_ID.txt""#);
    f
}

#[test]
fn a_gate_uses_its_own_loopback_but_cannot_reach_a_listener_on_the_hosts() {
    if !landlock() || !crate::common::have("python3", &["-V"]) {
        return;
    }
    if !cascade_process::sandbox::own_network_available() {
        eprintln!("skipped: this kernel allows no user namespaces");
        return;
    }
    let (_host, port) = listen();
    let f = net_gate_fixture(port);
    let (out, evs) = f.approve(&[], &[]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let gates = of_kind(&evs, "gate_finished");
    assert!(
        !gates.is_empty() && gates.iter().all(|g| g["passed"] == true),
        "{gates:?}"
    );
    assert_eq!(f.recorded("s1").trim(), "ok");

    // Unconfined, the same gate reaches the host: the base's run of it fails.
    let f = net_gate_fixture(port);
    let (out, evs) = f.approve(&["--sandbox", "off"], &[]);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    let judged = of_kind(&evs, "base_judged");
    assert!(
        judged[0]["failed"].to_string().contains("reached the host"),
        "{judged:?}"
    );
}

/// Two stories side by side: s1's agent runs a marked `sleep` and records
/// whether it lived to its end; s2's agent looks the marked process up in
/// `/proc` and tries to kill it (and, to show killing works at all, a
/// `sleep` of its own).
fn signal_fixture() -> Fixture {
    let f = Fixture::new();
    f.write_prd(&["s1", "s2"], json!([]));
    f.set_agent(
        r#"r="$CASCADE_STORY_ID.txt"
if [ "$CASCADE_STORY_ID" = s1 ]; then
  sleep 6.4242 & p=$!
  if wait "$p"; then echo "sleep survived" > "$r"; else echo "sleep killed" > "$r"; fi
else
  i=0; v=""
  while [ -z "$v" ] && [ $i -lt 50 ]; do v=$(pgrep -f 'sleep 6.4242'); sleep 0.1; i=$((i+1)); done
  if [ -z "$v" ]; then echo "no victim found" > "$r"; exit 0; fi
  if kill $v 2>/dev/null; then echo "kill allowed" > "$r"; else echo "kill denied" > "$r"; fi
  sleep 30 & own=$!
  if kill "$own"; then echo "own kill allowed" >> "$r"; fi
fi"#,
    );
    f
}

#[test]
fn a_story_cannot_signal_another_storys_agent() {
    if !landlock() || !crate::common::have("pgrep", &["-V"]) {
        return;
    }
    if cascade_process::sandbox::kernel_abi() < 6 {
        eprintln!("skipped: signal scoping needs Landlock ABI 6");
        return;
    }
    let f = signal_fixture();
    let (out, _) = f.approve(&["--parallel", "2"], &[]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(
        f.recorded("s2"),
        "kill denied\nown kill allowed\n",
        "{}",
        explain(&out)
    );
    assert_eq!(f.recorded("s1").trim(), "sleep survived");

    // Unconfined, the same kill goes through.
    let f = signal_fixture();
    let (out, _) = f.approve(&["--parallel", "2", "--sandbox", "off"], &[]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(f.recorded("s2").lines().next(), Some("kill allowed"));
    assert_eq!(f.recorded("s1").trim(), "sleep killed");
}

/// A listener on the host's 127.0.0.1 and its port.
fn listen() -> (std::net::TcpListener, u16) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = l.local_addr().expect("addr").port();
    (l, port)
}

/// An agent that connects to the host's 127.0.0.1 on each of `ports` and
/// records `<port> allowed` or `<port> denied` in its story's file.
fn connecting_agent(ports: &[u16]) -> String {
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    format!(
        r#"r="$CASCADE_STORY_ID.txt"
for p in {}; do
  if python3 -c "import socket; socket.create_connection(('127.0.0.1', $p), 2)" 2>/dev/null
  then echo "$p allowed" >> "$r"; else echo "$p denied" >> "$r"; fi
done"#,
        ports.join(" ")
    )
}

#[test]
fn an_agent_connects_to_the_ports_its_definition_names_and_to_no_other() {
    if !landlock() || !crate::common::have("python3", &["-V"]) {
        return;
    }
    if !cascade_process::sandbox::ports_enforced() {
        eprintln!("skipped: this kernel's Landlock has no TCP rules (ABI < 4)");
        return;
    }
    let ((_declared, d), (_other, o)) = (listen(), listen());
    let agent = connecting_agent(&[d, o]);
    let run = |sandbox: Value, extra: &[&str]| {
        let f = Fixture::new();
        f.write_prd(&["s1"], json!([]));
        f.set_agent_with(&agent, sandbox);
        let (out, _) = f.approve(extra, &[]);
        assert_eq!(code(&out), 0, "{}", explain(&out));
        f.recorded("s1")
    };
    assert_eq!(
        run(json!({"net_ports": [d]}), &[]),
        format!("{d} allowed\n{o} denied\n"),
        "the declared port only"
    );
    // A definition naming no port gets 443 alone: neither listener.
    assert_eq!(
        run(Value::Null, &[]),
        format!("{d} denied\n{o} denied\n"),
        "443 only"
    );
    assert_eq!(
        run(json!({"net_ports": [d]}), &["--sandbox", "off"]),
        format!("{d} allowed\n{o} allowed\n"),
        "unconfined"
    );
}

/// A `--notify` command that tries to write into the main checkout and
/// `$HOME`, read the hidden key and write its temp dir, recording each in
/// `notify.txt` under `log` (writable through `CASCADE_SANDBOX_WRITE`,
/// as whoever starts cascade may allow), then the event it was run for.
fn notify_fixture(log: &Path) -> Fixture {
    let f = Fixture::new();
    f.write_prd(&["s1"], json!([]));
    f.set_agent(r#"echo ok > "$CASCADE_STORY_ID.txt""#);
    script(
        &f.t("notify.sh"),
        &format!(
            r#"r='{log}/notify.txt'
try() {{ if sh -c "$2" 2>/dev/null; then echo "$1 allowed" >> "$r"; else echo "$1 denied" >> "$r"; fi; }}
try main "echo x > '{repo}/from-notify'"
try home "echo x > '$HOME/from-notify'"
try secret "cat '$HOME/.ssh/id_x'"
try tmp 'echo x > "$TMPDIR/t" && [ "$TMPDIR" != /tmp ]'
echo "$CASCADE_EVENT" >> "$r""#,
            log = log.display(),
            repo = f.repo().display(),
        ),
    );
    f
}

#[test]
fn a_notify_command_writes_only_its_temp_dir_and_cannot_read_a_hidden_key() {
    if !landlock() {
        return;
    }
    let log = tempfile::tempdir().expect("log dir");
    let allow = log.path().display().to_string();
    let env = [(cascade_engine::confine::WRITE_VAR, allow.as_str())];
    let f = notify_fixture(log.path());
    let notify = f.t("notify.sh").display().to_string();
    let (out, _) = f.approve(&["--notify", &notify], &env);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let seen = std::fs::read_to_string(log.path().join("notify.txt")).expect("notify ran");
    assert_eq!(
        seen,
        "main denied\nhome denied\nsecret denied\ntmp allowed\nrun_finished\n"
    );
    assert!(!f.repo().join("from-notify").exists());
    assert!(!f.home().join("from-notify").exists());
    // The story itself was merged: only the hook was held.
    assert_eq!(f.recorded("s1").trim(), "ok");

    // Unconfined, the same command writes the checkout and reads the key.
    let log = tempfile::tempdir().expect("log dir");
    let f = notify_fixture(log.path());
    let notify = f.t("notify.sh").display().to_string();
    let (out, _) = f.approve(&["--sandbox", "off", "--notify", &notify], &[]);
    assert_eq!(code(&out), 0, "{}", explain(&out));
    let seen = std::fs::read_to_string(log.path().join("notify.txt")).expect("notify ran");
    // (No temp dir of its own: its TMPDIR is whatever cascade had.)
    assert!(
        seen.starts_with("main allowed\nhome allowed\nsecret allowed\n")
            && seen.ends_with("run_finished\n"),
        "{seen}"
    );
    assert!(f.repo().join("from-notify").exists());
}
