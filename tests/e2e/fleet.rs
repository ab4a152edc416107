//! The fleet (`--fleet`, `cascade worker`, `cascade fleet status`) against a
//! real `nats-server -js` on a free 127.0.0.1 port, a bare repository as the
//! shared git remote, and worker processes running scripted agents.
//!
//! The fleet is in the default build; each test prints why it skips when
//! `nats-server` is not on PATH. The lean build's refusal is in
//! lean_build.rs.

/// The server the tests run against (shared with benches/fleet.rs).
#[cfg(feature = "fleet")]
#[path = "../../benches/support/nats.rs"]
mod nats_server;

#[cfg(feature = "fleet")]
pub(crate) mod real {
    use std::collections::HashMap;
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command as StdCommand, Stdio};
    use std::time::{Duration, Instant};

    use serde_json::{json, Value};

    use crate::common::{
        alive, alive_after_grace, code, events, explain, git, init_repo, of_kind, other_branches,
        pids, script, temp_files, write_json, APPROVE_NOW,
    };

    pub use super::nats_server::Nats;

    /// A repository whose `origin` is a bare repository (the shared remote),
    /// a tools dir with the scripted agent and agents.json, and the workers.
    pub struct Fleet {
        pub repo: tempfile::TempDir,
        pub tools: tempfile::TempDir,
        pub remote: PathBuf,
        pub nats: Nats,
        workers: Vec<Child>,
    }

    impl Fleet {
        pub fn new(test: &str, stories: Value) -> Option<Fleet> {
            let nats = Nats::start(test)?;
            let repo = init_repo();
            let tools = tempfile::tempdir().expect("tools");
            let remote = tools.path().join("shared.git");
            git(tools.path(), &["init", "-q", "--bare", "shared.git"]);
            git(
                repo.path(),
                &["remote", "add", "origin", &remote.display().to_string()],
            );
            git(repo.path(), &["push", "-q", "origin", "main"]);
            let f = Fleet {
                repo,
                tools,
                remote,
                nats,
                workers: Vec::new(),
            };
            f.write_prd(stories);
            f.write_agents();
            Some(f)
        }

        pub fn t(&self, name: &str) -> PathBuf {
            self.tools.path().join(name)
        }

        pub fn repo(&self) -> &Path {
            self.repo.path()
        }

        fn write_prd(&self, stories: Value) {
            write_json(
                &self.repo().join("prd.json"),
                &json!({
                    "goal": "fleet",
                    "stories": stories,
                    "quality_gates": {"enabled": true, "gates": [
                        {"name": "readme", "type": "test", "required": true, "command": "ls", "args": ["README.md"]}
                    ]}
                }),
            );
        }

        /// The agent: counts its runs per story (and notes its pid in
        /// `pids-<id>`), waits while `hold-<id>` exists (up to 20 s), sleeps
        /// `sleep-<id>` seconds, keeps writing stray files when `stray-<id>`
        /// exists and its worker was killed, needs the files
        /// of the stories in `needs-<id>` (its dependencies, merged in its
        /// base), writes `<id>.txt` (and the content of `shared-<id>` to
        /// `shared.txt`). Asked to resolve a merge conflict, it keeps both
        /// sides of each conflicted file (counted in `merges-<id>`).
        fn write_agents(&self) {
            let t = self.tools.path().display().to_string();
            let agent = script(
                &self.t("agent.sh"),
                &format!(
                    r#"T='{t}'
id="$CASCADE_STORY_ID"
if [ "$CASCADE_PHASE" = merge ]; then
  echo x >> "$T/merges-$id"
  for f in $CASCADE_CONFLICTS; do
    grep -v -e '^<<<<<<<' -e '^|||||||' -e '^=======' -e '^>>>>>>>' "$f" > "$f.resolved" && mv "$f.resolved" "$f"
  done
  exit 0
fi
echo x >> "$T/runs-$id"
echo $$ >> "$T/pids-$id"
touch "$T/started-$id"
# A job that kills whatever worker runs it (its agent's parent).
if [ -f "$T/killer-$id" ]; then kill -9 "$PPID"; sleep 5; exit 9; fi
i=0
while [ -e "$T/hold-$id" ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done
if [ -f "$T/sleep-$id" ]; then sleep "$(cat "$T/sleep-$id")"; fi
# The agent of a stray story whose worker (its parent) was killed keeps
# writing into its worktree for 30 s, unless someone stops it.
# (/proc, not `kill -0`: a confined agent may not signal its worker.)
if [ -f "$T/stray-$id" ] && ! [ -d "/proc/$PPID" ]; then
  j=0; while [ $j -lt 300 ]; do echo stray > stray.txt; echo stray >> README.md; sleep 0.1; j=$((j+1)); done
fi
if [ -f "$T/needs-$id" ]; then
  for d in $(cat "$T/needs-$id"); do
    [ -f "$d.txt" ] || {{ echo "dependency $d is not in my base"; exit 4; }}
  done
fi
printf '%s\n' "$id" > "$id.txt"
if [ -f "$T/shared-$id" ]; then cp "$T/shared-$id" shared.txt; fi"#
                ),
            );
            write_json(
                &self.t("agents.json"),
                &json!({
                    "default_agent": "scripted",
                    "agents": {
                        "scripted": {"type": "cli", "command": agent.display().to_string(), "args": [], "timeout": 60},
                        "ghost": {"type": "cli", "command": "/nonexistent/ghost-agent", "args": []}
                    }
                }),
            );
        }

        /// A `cascade` command in the repository with the fleet's settings.
        pub fn command(&self, args: &[&str]) -> StdCommand {
            self.command_with_agents(args, &self.t("agents.json"))
        }

        /// [`Fleet::command`] with another agents.json.
        pub fn command_with_agents(&self, args: &[&str], agents: &Path) -> StdCommand {
            let mut cmd = crate::common::bare_cascade();
            cmd.current_dir(self.repo())
                .env("NO_COLOR", "1")
                .env("HOME", self.tools.path())
                .env("XDG_CACHE_HOME", self.t("cache"))
                .env_remove("CASCADE_REMOTE_CACHE")
                .env("CASCADE_FLEET_ACK_WAIT_SECS", "3")
                .env("CASCADE_FLEET_WORKER_GRACE_SECS", "2")
                .args(args)
                .arg("--agents")
                .arg(agents);
            cmd
        }

        /// Starts `cascade worker` (`id`, `slots`, extra args), its output
        /// in `worker-<id>.log`.
        pub fn worker(&mut self, id: &str, slots: usize, extra: &[&str]) -> u32 {
            self.worker_with_env(id, slots, extra, &[])
        }

        /// [`Fleet::worker`] with extra environment variables.
        pub fn worker_with_env(
            &mut self,
            id: &str,
            slots: usize,
            extra: &[&str],
            env: &[(&str, &str)],
        ) -> u32 {
            let workdir = self.t(&format!("work-{id}")).display().to_string();
            let slots = slots.to_string();
            let mut args = vec!["--id", id, "--slots", &slots, "--workdir", &workdir];
            args.extend_from_slice(extra);
            let agents = self.t("agents.json");
            self.spawn_worker(id, &args, env, &agents)
        }

        /// Starts `cascade worker --fleet URL <args>` with `agents`, its
        /// output in `worker-<log>.log`.
        pub fn spawn_worker(
            &mut self,
            log: &str,
            args: &[&str],
            env: &[(&str, &str)],
            agents: &Path,
        ) -> u32 {
            let out = std::fs::File::create(self.t(&format!("worker-{log}.log"))).expect("log");
            let mut worker_args = vec!["worker", "--fleet", &self.nats.url];
            worker_args.extend_from_slice(args);
            let mut cmd = self.command_with_agents(&worker_args, agents);
            cmd.envs(env.iter().copied())
                .stdout(Stdio::null())
                .stderr(out);
            let child = cmd.spawn().expect("worker starts");
            let pid = child.id();
            self.workers.push(child);
            pid
        }

        /// `kill -9` of the worker `pid` started, reaped (so a worker
        /// restarted with its id finds the lock of a dead process).
        pub fn kill_worker(&mut self, pid: u32) {
            if let Some(w) = self.workers.iter_mut().find(|w| w.id() == pid) {
                let _ = w.kill();
                let _ = w.wait();
            }
        }

        /// Whether the worker `pid` started has exited (reaped then).
        pub fn worker_exited(&mut self, pid: u32) -> bool {
            self.workers
                .iter_mut()
                .find(|w| w.id() == pid)
                .is_some_and(|w| !matches!(w.try_wait(), Ok(None)))
        }

        /// `approve --auto-run --json --fleet URL` (plus `extra`) started in
        /// the background, its output piped.
        pub fn spawn_approve(&self, extra: &[&str]) -> Child {
            self.spawn_coordinator("approve", extra)
        }

        /// A killed (or stopped) coordinator restarted as docs/fleet.md
        /// says: `resume --auto-run --json --fleet URL`, in the background;
        /// `approve` again when it died before it recorded a run.
        pub fn spawn_restart(&self) -> Child {
            let db = cascade_engine::store::db_path(&self.repo().join(".cascade"));
            let recorded = cascade_engine::state::RunState::load(&db).is_ok_and(|r| r.is_some());
            let verb = if recorded { "resume" } else { "approve" };
            self.spawn_coordinator(verb, &["--retry-delay", "0"])
        }

        /// `<verb> --auto-run --json --fleet URL <extra>`, output piped.
        fn spawn_coordinator(&self, verb: &str, extra: &[&str]) -> Child {
            self.command(&[verb, "--auto-run", "--json", "--fleet", &self.nats.url])
                .args(extra)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("coordinator")
        }

        /// Waits until `cascade fleet status` lists `n` workers.
        pub fn wait_for_workers(&self, n: usize) -> Value {
            self.wait_for_status(|v| v["workers"].as_array().is_some_and(|w| w.len() >= n))
        }

        /// Waits until `cascade fleet status --json` satisfies `ok`.
        pub fn wait_for_status(&self, ok: impl Fn(&Value) -> bool) -> Value {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let out = self
                    .command(&["fleet", "status", "--fleet", &self.nats.url, "--json"])
                    .output()
                    .expect("status runs");
                if code(&out) == 0 {
                    let v: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
                    if ok(&v) {
                        return v;
                    }
                }
                assert!(
                    Instant::now() < deadline,
                    "workers did not come up: {}\n{}",
                    explain(&out),
                    self.worker_logs()
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }

        /// The workers' output, for assertion messages.
        pub fn worker_logs(&self) -> String {
            let mut text = String::new();
            if let Ok(dir) = std::fs::read_dir(self.tools.path()) {
                for e in dir.flatten() {
                    let name = e.file_name().to_string_lossy().to_string();
                    if name.starts_with("worker-") {
                        let body = std::fs::read_to_string(e.path()).unwrap_or_default();
                        text.push_str(&format!("--- {name}\n{body}"));
                    }
                }
            }
            text
        }

        /// `approve --auto-run --fleet URL --json` (plus `extra`).
        pub fn approve(&self, extra: &[&str]) -> std::process::Output {
            let mut args = vec![
                "approve",
                "--auto-run",
                "--retry-delay",
                "0",
                "--json",
                "--fleet",
                &self.nats.url,
            ];
            args.extend_from_slice(extra);
            self.command(&args).output().expect("coordinator runs")
        }

        pub fn runs(&self, id: &str) -> usize {
            std::fs::read_to_string(self.t(&format!("runs-{id}")))
                .map(|s| s.lines().count())
                .unwrap_or(0)
        }

        pub fn wait_for_file(&self, name: &str) {
            let deadline = Instant::now() + Duration::from_secs(30);
            while !self.t(name).exists() {
                assert!(Instant::now() < deadline, "{name} never appeared");
                std::thread::sleep(Duration::from_millis(50));
            }
        }

        /// The cascade refs on the shared remote (bases and branches), one a line.
        pub fn remote_refs(&self) -> String {
            git(
                &self.remote,
                &[
                    "for-each-ref",
                    "--format=%(refname)",
                    "refs/heads/cascade",
                    "refs/cascade",
                ],
            )
            .trim()
            .to_string()
        }

        /// Commits `shared.txt` (which stories of a conflict test all edit)
        /// on main.
        pub fn commit_shared_file(&self) {
            std::fs::write(self.repo().join("shared.txt"), "base\n").unwrap();
            git(self.repo(), &["add", "shared.txt"]);
            git(self.repo(), &["commit", "-q", "-m", "shared file"]);
            git(self.repo(), &["push", "-q", "origin", "main"]);
        }

        /// Every story merged exactly once, with a worker named.
        pub fn assert_all_merged_once(&self, evs: &[Value], ids: &[String]) {
            let mut merged: HashMap<String, usize> = HashMap::new();
            for e in of_kind(evs, "story_merged") {
                *merged
                    .entry(e["story"].as_str().unwrap_or("").to_string())
                    .or_default() += 1;
                assert!(e["worker"].is_string(), "merged without a worker: {e}");
            }
            for id in ids {
                assert_eq!(
                    merged.get(id),
                    Some(&1),
                    "{id} merged {:?} times",
                    merged.get(id)
                );
                let on_main = git(self.repo(), &["show", &format!("main:{id}.txt")]);
                assert_eq!(on_main.trim(), id);
            }
        }
    }

    impl Drop for Fleet {
        fn drop(&mut self) {
            for w in &mut self.workers {
                let _ = w.kill();
                let _ = w.wait();
            }
        }
    }

    pub fn story(id: &str, deps: &[&str]) -> Value {
        json!({"id": id, "title": format!("story {id}"), "description": "fleet test",
               "priority": "medium", "dependencies": deps, "status": "pending",
               "acceptance_criteria": []})
    }

    pub fn ids(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("s{i:02}")).collect()
    }

    #[test]
    fn a_plan_with_dependencies_runs_on_two_workers_and_merges_each_story_once() {
        let stories = json!([
            story("s01", &[]),
            story("s02", &["s01"]),
            story("s03", &["s01"]),
            story("s04", &["s02", "s03"]),
            story("s05", &[]),
        ]);
        let Some(mut f) = Fleet::new("fleet_plan", stories) else {
            return;
        };
        std::fs::write(f.t("needs-s02"), "s01").unwrap();
        std::fs::write(f.t("needs-s03"), "s01").unwrap();
        std::fs::write(f.t("needs-s04"), "s01 s02 s03").unwrap();
        f.worker("w1", 1, &[]);
        f.worker("w2", 1, &[]);
        f.wait_for_workers(2);
        let out = f.approve(&["--schedule", "eager"]);
        assert_eq!(code(&out), 0, "{}{}", explain(&out), f.worker_logs());
        let evs = events(&out);
        f.assert_all_merged_once(&evs, &ids(5));
        // Each job ran once, on a named worker, from a pushed base.
        assert_eq!(of_kind(&evs, "job_published").len(), 5, "{}", explain(&out));
        for e in of_kind(&evs, "job_finished") {
            assert_eq!(e["status"], "passed");
            assert!(
                ["w1", "w2"].contains(&e["worker"].as_str().unwrap_or("")),
                "{e}"
            );
        }
        for id in ids(5) {
            assert_eq!(f.runs(&id), 1, "{id}");
            // Its merge is announced as a local story's is.
            let at = |kind: &str| {
                evs.iter()
                    .position(|e| e["event"] == kind && e["story"] == id.as_str())
            };
            assert!(
                at("merge_started").is_some() && at("merge_started") < at("story_merged"),
                "{id}: {}",
                explain(&out)
            );
        }
        // Nothing is left on the shared remote (bases and branches of
        // merged stories are deleted); the run state is the coordinator's,
        // as for a local run.
        assert_eq!(f.remote_refs(), "", "{}", explain(&out));
        // Nor in the user's repository: each merged story's local branch went
        // as a local run's does.
        assert_eq!(other_branches(f.repo()), Vec::<String>::new());
        assert_eq!(alive_after_grace(&f.t("pids-s04")), Vec::<u32>::new());
        let status = f.command(&["status", "--json"]).output().unwrap();
        let st: Value = serde_json::from_slice(&status.stdout).unwrap();
        assert_eq!(st["stories"]["s04"]["status"], "complete", "{st}");
        let progress = std::fs::read_to_string(f.repo().join("progress.txt")).unwrap();
        assert!(
            progress.contains("s04: [START] via scripted (worker:w")
                && progress.contains("s04: [COMPLETE] via scripted"),
            "{progress}"
        );
    }

    /// s01 and s02, both published at once on the first base, then s03
    /// needing both in its base, on one worker of one slot; `coordinator_env`
    /// for the coordinator. s02's merge is a merge commit (main moved on with
    /// s01), so s03's base is a commit the worker never made: it must come
    /// from the coordinator or the remote. Returns the fleet and the
    /// coordinator's output.
    fn two_then_one(
        test: &str,
        coordinator_env: &[(&str, &str)],
        remote_hook: Option<&str>,
    ) -> Option<(Fleet, std::process::Output)> {
        let stories = json!([
            story("s01", &[]),
            story("s02", &[]),
            story("s03", &["s01", "s02"]),
        ]);
        let mut f = Fleet::new(test, stories)?;
        std::fs::write(f.t("needs-s03"), "s01 s02").unwrap();
        if let Some(hook) = remote_hook {
            script(&f.remote.join("hooks").join("pre-receive"), hook);
        }
        f.worker("w1", 1, &[]);
        f.wait_for_workers(1);
        let mut args = APPROVE_NOW.to_vec();
        args.extend([
            "--json",
            "--schedule",
            "eager",
            "--parallel",
            "2",
            "--fleet",
            &f.nats.url,
        ]);
        let out = f
            .command(&args)
            .envs(coordinator_env.iter().copied())
            .output()
            .expect("coordinator runs");
        Some((f, out))
    }

    /// The three merged, each once, s03 built on the other two.
    /// Returns what the worker's clone last fetched as a base, if anything,
    /// and s03's base.
    fn assert_chain_merged(f: &Fleet, out: &std::process::Output) -> (Option<String>, String) {
        assert_eq!(code(out), 0, "{}{}", explain(out), f.worker_logs());
        let evs = events(out);
        f.assert_all_merged_once(&evs, &ids(3));
        for id in ids(3) {
            assert_eq!(f.runs(&id), 1, "{id}: {}", f.worker_logs());
        }
        assert_eq!(git(f.repo(), &["show", "main:s03.txt"]).trim(), "s03");
        let base = of_kind(&evs, "job_published")
            .into_iter()
            .find(|e| e["story"] == "s03")
            .and_then(|e| e["base"].as_str().map(str::to_string))
            .expect("s03 was published");
        // The worker's one clone: <workdir>/w1/<repo>/slot-1.
        let repos = std::fs::read_dir(f.t("work-w1").join("w1")).expect("the worker's directory");
        let clone = repos
            .flatten()
            .map(|r| r.path().join("slot-1"))
            .find(|c| c.join(".git").exists())
            .expect("the slot's clone");
        let fetched = std::process::Command::new("git")
            .args(["rev-parse", "--verify", "-q", "refs/cascade/fleet-base"])
            .current_dir(&clone)
            .output()
            .expect("git runs");
        let fetched = String::from_utf8_lossy(&fetched.stdout).trim().to_string();
        ((!fetched.is_empty()).then_some(fetched), base)
    }

    #[test]
    fn a_dependent_gets_its_base_from_the_coordinator_not_the_remote() {
        // The shared remote takes no base at all: the worker can only have
        // got s03's base (the merge of s02) from the coordinator's pack.
        let refuse = r#"while read old new ref; do
  case "$ref" in refs/cascade/base/*) echo "no bases here" >&2; exit 1;; esac
done"#;
        let Some((f, out)) = two_then_one("fleet_bases_nats", &[], Some(refuse)) else {
            return;
        };
        let (fetched, _) = assert_chain_merged(&f, &out);
        // The first base came with the clone; nothing was ever fetched.
        assert_eq!(fetched, None, "{}", f.worker_logs());
        let bases = git(&f.remote, &["for-each-ref", "refs/cascade/base"]);
        assert_eq!(bases.trim(), "", "the hook let a base through");
        // The worker says where each job's time went, the base included.
        let logs = f.worker_logs();
        let done: Vec<&str> = logs.lines().filter(|l| l.contains(" passed in ")).collect();
        assert_eq!(done.len(), 3, "{logs}");
        assert!(
            done.iter().all(|l| l.contains("(queued ")
                && l.contains(", base ")
                && l.contains(", agent ")
                && l.contains(", publish ")),
            "{logs}"
        );
    }

    #[test]
    fn without_packs_the_coordinator_has_workers_fetch_the_bases_it_pushed() {
        // CASCADE_FLEET_MAX_PACK_BYTES=0 on the coordinator: it answers
        // "fetch" once its push of the base is done, and the worker fetches.
        let env = [("CASCADE_FLEET_MAX_PACK_BYTES", "0")];
        let Some((f, out)) = two_then_one("fleet_bases_fetch", &env, None) else {
            return;
        };
        let (fetched, s03_base) = assert_chain_merged(&f, &out);
        assert_eq!(fetched, Some(s03_base), "{}", f.worker_logs());
        // Every base was pushed (and deleted at the end of the run).
        assert_eq!(f.remote_refs(), "", "{}", explain(&out));
    }

    #[test]
    fn a_job_of_a_worker_killed_mid_job_is_redelivered_and_completed() {
        let Some(mut f) = Fleet::new("fleet_worker_kill", json!([story("s01", &[])])) else {
            return;
        };
        std::fs::write(f.t("hold-s01"), "").unwrap();
        let first = f.worker("w1", 1, &[]);
        f.wait_for_workers(1);
        let coordinator = f.spawn_approve(&[]);
        f.wait_for_file("started-s01");
        // kill -9 mid-job; the job comes back after the ack wait (3 s here).
        unsafe { libc::kill(first as i32, libc::SIGKILL) };
        std::fs::remove_file(f.t("hold-s01")).unwrap();
        f.worker("w2", 1, &[]);
        let out = coordinator.wait_with_output().expect("coordinator ends");
        assert_eq!(code(&out), 0, "{}{}", explain(&out), f.worker_logs());
        let evs = events(&out);
        f.assert_all_merged_once(&evs, &ids(1));
        let finished = of_kind(&evs, "job_finished");
        assert_eq!(finished.len(), 1, "{}", explain(&out));
        assert_eq!(finished[0]["worker"], "w2");
        assert_eq!(f.runs("s01"), 2, "run by w1 (killed) and again by w2");
    }

    #[test]
    fn a_restarted_worker_stops_the_agent_its_killed_predecessor_left_in_the_slot() {
        let Some(mut f) = Fleet::new("fleet_worker_stray", json!([story("s01", &[])])) else {
            return;
        };
        // The first run holds, then (its worker killed) would write stray.txt
        // and README.md lines into the slot's worktree for 30 s.
        std::fs::write(f.t("hold-s01"), "").unwrap();
        std::fs::write(f.t("stray-s01"), "").unwrap();
        std::fs::write(f.t("sleep-s01"), "1").unwrap();
        let first = f.worker("w1", 1, &[]);
        f.wait_for_workers(1);
        let coordinator = f.spawn_approve(&[]);
        f.wait_for_file("started-s01");
        f.kill_worker(first);
        // The same worker again: same directory, same clone, same slot.
        f.worker("w1", 1, &[]);
        std::fs::remove_file(f.t("hold-s01")).unwrap();
        let out = coordinator.wait_with_output().expect("coordinator ends");
        assert_eq!(code(&out), 0, "{}{}", explain(&out), f.worker_logs());
        f.assert_all_merged_once(&events(&out), &ids(1));
        assert_eq!(f.runs("s01"), 2, "run by w1, killed, and by w1 again");
        let files = git(f.repo(), &["ls-tree", "-r", "--name-only", "main"]);
        assert!(
            !files.contains("stray.txt"),
            "a stray write was merged: {files}"
        );
        assert_eq!(git(f.repo(), &["show", "main:README.md"]), "# test\n");
        let stray = pids(&f.t("pids-s01"))[0];
        assert!(!alive(stray), "the first agent ({stray}) is still running");
        assert!(
            f.worker_logs()
                .contains("stopped the agent of story 's01' that the interrupted run left running"),
            "{}",
            f.worker_logs()
        );
        assert_eq!(alive_after_grace(&f.t("pids-s01")), Vec::<u32>::new());
        assert_eq!(f.remote_refs(), "", "{}", explain(&out));
        assert_eq!(other_branches(f.repo()), Vec::<String>::new());
        assert_eq!(temp_files(f.repo()), Vec::<PathBuf>::new());
    }

    /// What a chaos trial does to the fleet, at a random moment each.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Fault {
        /// `kill -9` of worker `i`, restarted with its id (same directory
        /// and clones).
        KillWorker(usize),
        /// `kill -9` of the coordinator, restarted as docs/fleet.md says:
        /// `cascade resume --auto-run --fleet URL`.
        KillCoordinator,
        /// nats-server stopped and started again on the same port and
        /// store directory (JetStream's streams persist).
        RestartNats,
    }

    /// xorshift64 from `seed`: a trial's schedule is reproducible from it.
    fn xorshift(mut seed: u64) -> impl FnMut(u64) -> u64 {
        seed |= 1;
        move |below: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % below.max(1)
        }
    }

    /// Chaos: in each trial `kill -9` of the workers (twice) and of the
    /// coordinator, and a restart of nats-server, in a random order at
    /// random moments, while every story's agent whose worker dies keeps
    /// writing stray files. 10 trials (`CASCADE_FLEET_CHAOS_TRIALS` for
    /// more), seeded from the clock or `CASCADE_CHAOS_SEED`; a failing
    /// trial names the seed that replays its schedule. After each trial:
    /// every story merged exactly once, no commit holds a file its story's
    /// agent did not write, no agent left running, no branch or ref left.
    #[test]
    fn kill_9_of_workers_and_the_coordinator_and_a_nats_restart_merge_each_story_once() {
        let trials: usize = std::env::var("CASCADE_FLEET_CHAOS_TRIALS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10);
        let seed = std::env::var("CASCADE_CHAOS_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
        let mut seeds = xorshift(seed);
        let mut trial_seed = seed;
        for trial in 0..trials {
            let started = Instant::now();
            if !chaos_trial(trial, trial_seed) {
                return;
            }
            println!(
                "chaos trial {trial} (CASCADE_CHAOS_SEED={trial_seed}): {:?}",
                started.elapsed()
            );
            trial_seed = seeds(u64::MAX);
        }
    }

    /// The stories of a chaos trial.
    const CHAOS_STORIES: usize = 2;

    /// One trial (see the test above); `false`: skipped (no nats-server).
    fn chaos_trial(trial: usize, seed: u64) -> bool {
        let tag = format!(
            "trial {trial} (replay: CASCADE_CHAOS_SEED={seed} CASCADE_FLEET_CHAOS_TRIALS=1)"
        );
        let mut next = xorshift(seed);
        let all = ids(CHAOS_STORIES);
        let stories = json!(all.iter().map(|id| story(id, &[])).collect::<Vec<_>>());
        let Some(mut f) = Fleet::new(&format!("fleet_chaos_{trial}"), stories) else {
            return false;
        };
        for id in &all {
            std::fs::write(f.t(&format!("stray-{id}")), "").unwrap();
            std::fs::write(f.t(&format!("sleep-{id}")), "1").unwrap();
        }
        let names = ["w1", "w2"];
        let mut workers = names.map(|w| f.worker(w, 1, &[]));
        f.wait_for_workers(2);
        let mut faults = vec![
            Fault::KillWorker(next(2) as usize),
            Fault::KillWorker(next(2) as usize),
            Fault::KillCoordinator,
            Fault::RestartNats,
        ];
        for i in (1..faults.len()).rev() {
            faults.swap(i, next(i as u64 + 1) as usize);
        }
        println!("{tag}: {faults:?}");
        let mut outputs = Vec::new();
        let mut coordinator = Some(f.spawn_approve(&["--retry-delay", "0"]));
        let started = Instant::now();
        for fault in faults {
            std::thread::sleep(Duration::from_millis(next(1000)));
            println!("{tag}: {fault:?} at {:?}", started.elapsed());
            match fault {
                Fault::KillWorker(i) => {
                    f.kill_worker(workers[i]);
                    workers[i] = f.worker(names[i], 1, &[]);
                }
                Fault::KillCoordinator => {
                    let Some(mut c) = coordinator.take() else {
                        continue;
                    };
                    let running = matches!(c.try_wait(), Ok(None));
                    if running {
                        let _ = c.kill();
                    }
                    let out = c.wait_with_output().expect("coordinator reaped");
                    // A coordinator that ended on its own (done, or NATS
                    // down) is resumed the same way.
                    let resume = running || stopped_by_nats(&out);
                    outputs.push(out);
                    if resume {
                        coordinator = Some(f.spawn_restart());
                    }
                }
                Fault::RestartNats => {
                    f.nats.stop();
                    std::thread::sleep(Duration::from_millis(next(1000)));
                    f.nats.restart();
                }
            }
            // A worker that was still connecting when NATS went away exits
            // 1 (documented); its supervisor starts it again.
            for (i, name) in names.iter().enumerate() {
                if f.worker_exited(workers[i]) {
                    println!("{tag}: worker {name} had exited; started again");
                    workers[i] = f.worker(name, 1, &[]);
                }
            }
        }
        // To the end; a coordinator that stopped because NATS was down is
        // resumed.
        for _ in 0..3 {
            let Some(c) = coordinator.take() else {
                break;
            };
            let out = c.wait_with_output().expect("coordinator ends");
            println!(
                "{tag}: a coordinator ended (exit {}) at {:?}",
                code(&out),
                started.elapsed()
            );
            let stopped = stopped_by_nats(&out);
            outputs.push(out);
            if stopped {
                coordinator = Some(f.spawn_restart());
            }
        }
        let last = outputs.last().expect("a coordinator ran");
        assert_eq!(code(last), 0, "{tag}: {}{}", explain(last), f.worker_logs());
        assert_chaos_left_nothing(&f, &tag, &outputs);
        true
    }

    /// Whether a coordinator ended because NATS was down, as docs/fleet.md
    /// says it does, resumably: exit 130 after 10 s down, or exit 1 when it
    /// could not reach NATS at its start (it was restarted while NATS was).
    fn stopped_by_nats(out: &std::process::Output) -> bool {
        code(out) == 130
            || (code(out) == 1
                && String::from_utf8_lossy(&out.stderr).contains("cannot reach NATS"))
    }

    /// The checks after a chaos trial whose coordinators printed `outputs`.
    fn assert_chaos_left_nothing(f: &Fleet, tag: &str, outputs: &[std::process::Output]) {
        let shown = || {
            let runs: Vec<String> = outputs.iter().map(explain).collect();
            format!("{}\n{}", runs.join("\n---\n"), f.worker_logs())
        };
        // A killed coordinator's last line may be cut short.
        let evs: Vec<Value> = outputs
            .iter()
            .flat_map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .into_owned()
                    .lines()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .filter_map(|l| serde_json::from_str(&l).ok())
            .collect();
        for id in ids(CHAOS_STORIES) {
            // Announced at most once (a merge the killed coordinator made
            // but did not get to announce is recognized from git), and on
            // main exactly once.
            let announced = of_kind(&evs, "story_merged")
                .iter()
                .filter(|e| e["story"] == id.as_str())
                .count();
            assert!(
                announced <= 1,
                "{tag}: {id} merged {announced} times: {}",
                shown()
            );
            let subject = format!("^{id}: ");
            let commits = git(
                f.repo(),
                &[
                    "log",
                    "--no-merges",
                    "--format=%H",
                    "--grep",
                    &subject,
                    "main",
                ],
            );
            assert_eq!(
                commits.lines().count(),
                1,
                "{tag}: {id}'s commits on main: {commits}\n{}",
                shown()
            );
            assert_eq!(
                git(f.repo(), &["show", &format!("main:{id}.txt")]).trim(),
                id,
                "{tag}"
            );
            let left = alive_after_grace(&f.t(&format!("pids-{id}")));
            assert_eq!(
                left,
                Vec::<u32>::new(),
                "{tag}: agents of {id} left: {}",
                shown()
            );
        }
        assert_commits_hold_only_their_storys_file(f.repo());
        assert_eq!(
            git(f.repo(), &["show", "main:README.md"]),
            "# test\n",
            "{tag}"
        );
        assert_eq!(f.remote_refs(), "", "{tag}: {}", shown());
        assert_eq!(
            other_branches(f.repo()),
            Vec::<String>::new(),
            "{tag}: {}",
            shown()
        );
        let local = git(
            f.repo(),
            &["for-each-ref", "--format=%(refname)", "refs/cascade"],
        );
        assert_eq!(local.trim(), "", "{tag}: {}", shown());
    }

    /// Each commit on main's history that is a story's own (`<id>: ...`)
    /// changes exactly `<id>.txt`, the one file its agent writes.
    fn assert_commits_hold_only_their_storys_file(repo: &Path) {
        let log = git(repo, &["log", "--no-merges", "--format=%H %s", "main"]);
        for line in log.lines() {
            let (commit, subject) = line.split_once(' ').unwrap_or((line, ""));
            let Some((id, _)) = subject.split_once(": ") else {
                continue;
            };
            let files = git(repo, &["show", "--name-only", "--format=", commit]);
            assert_eq!(files.trim(), format!("{id}.txt"), "commit {line}");
        }
    }

    /// A NATS restart loses the coordinator's live consumer of results; it
    /// makes a new one once the connection is back, so a result published
    /// after the restart is merged within seconds, not after async-nats'
    /// missed-heartbeat detection (15 s and more).
    #[test]
    fn a_result_published_after_a_nats_restart_is_heard_at_once() {
        let Some(mut f) = Fleet::new("fleet_nats_restart", json!([story("s01", &[])])) else {
            return;
        };
        std::fs::write(f.t("hold-s01"), "").unwrap();
        f.worker("w1", 1, &[]);
        f.wait_for_workers(1);
        let coordinator = f.spawn_approve(&["--retry-delay", "0"]);
        f.wait_for_file("started-s01");
        f.nats.stop();
        f.nats.restart();
        // Both ends reconnect (a second at most) before the job ends.
        std::thread::sleep(Duration::from_secs(2));
        let released = Instant::now();
        std::fs::remove_file(f.t("hold-s01")).unwrap();
        let out = coordinator.wait_with_output().expect("coordinator ends");
        let took = released.elapsed();
        assert_eq!(code(&out), 0, "{}{}", explain(&out), f.worker_logs());
        f.assert_all_merged_once(&events(&out), &ids(1));
        assert!(
            took < Duration::from_secs(10),
            "merged {took:?} after the job was released: {}{}",
            explain(&out),
            f.worker_logs()
        );
        assert_eq!(f.runs("s01"), 1, "the job was not run again");
    }

    #[test]
    fn a_job_that_kills_every_worker_is_reported_failed_not_redelivered_for_ever() {
        let Some(mut f) = Fleet::new("fleet_poison", json!([story("s01", &[])])) else {
            return;
        };
        std::fs::write(f.t("killer-s01"), "").unwrap();
        // Each run kills its worker; the third delivery (over the limit of
        // 2) is reported as a crash instead of being run. A confined agent
        // cannot signal its worker (Landlock's signal scoping), so these
        // workers see no Landlock, as on a kernel without it.
        for w in ["w1", "w2", "w3"] {
            f.worker_with_env(
                w,
                1,
                &[],
                &[
                    ("CASCADE_FLEET_MAX_DELIVERIES", "2"),
                    (cascade_process::sandbox::ABI_OVERRIDE_VAR, "0"),
                ],
            );
        }
        f.wait_for_workers(3);
        let out = f
            .command(&["approve", "--auto-run", "--json", "--max-retries", "0"])
            .args(["--fleet", &f.nats.url])
            .output()
            .expect("coordinator runs");
        assert_eq!(code(&out), 1, "{}{}", explain(&out), f.worker_logs());
        let evs = events(&out);
        let failed = of_kind(&evs, "story_failed");
        assert_eq!(failed.len(), 1, "{}", explain(&out));
        assert_eq!(failed[0]["error_type"], "process_crash", "{}", failed[0]);
        assert!(
            failed[0]["error"]
                .as_str()
                .unwrap_or("")
                .contains("delivered 3 times"),
            "{}",
            failed[0]
        );
        assert_eq!(f.runs("s01"), 2, "run twice, then reported, not run again");
    }

    #[test]
    fn workers_share_gate_results_through_the_coordinators_remote_cache() {
        let Some(mut f) = Fleet::new("fleet_remote_cache", json!([story("s01", &[])])) else {
            return;
        };
        let url = format!("file://{}", f.t("gate-cache").display());
        // Workers have the signing secret but no cache URL of their own:
        // the URL comes with the job, from the coordinator's flag.
        f.worker_with_env("w1", 1, &[], &[("CASCADE_CACHE_SECRET", "fleet-secret")]);
        f.wait_for_workers(1);
        let out = f
            .command(&["approve", "--auto-run", "--json", "--fleet", &f.nats.url])
            .args(["--remote-cache", &url, "--remote-cache-mode", "read-write"])
            .env("CASCADE_CACHE_SECRET", "fleet-secret")
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}{}", explain(&out), f.worker_logs());
        f.assert_all_merged_once(&events(&out), &ids(1));
        // The worker's gate result is in the shared cache: the coordinator's
        // checkout of the merged tip (the same tree) hits it instead of
        // running the gate.
        let out = f
            .command(&["gates", "run", "--json", "--remote-cache", &url])
            .args(["--remote-cache-mode", "read"])
            .env("CASCADE_CACHE_SECRET", "fleet-secret")
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}", explain(&out));
        let v: Value = serde_json::from_slice(&out.stdout).expect("gates JSON");
        assert_eq!(v["gates"][0]["cache"], "remote", "{v}");
    }

    #[test]
    fn a_killed_coordinator_is_resumed_with_the_jobs_still_out() {
        let stories = json!([story("s01", &[]), story("s02", &["s01"]), story("s03", &[])]);
        let Some(mut f) = Fleet::new("fleet_coordinator_kill", stories) else {
            return;
        };
        std::fs::write(f.t("hold-s01"), "").unwrap();
        std::fs::write(f.t("needs-s02"), "s01").unwrap();
        f.worker("w1", 2, &[]);
        f.wait_for_workers(1);
        let mut coordinator = f
            .command(&["approve", "--auto-run", "--json", "--fleet", &f.nats.url])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("coordinator");
        f.wait_for_file("started-s01");
        coordinator.kill().expect("kill -9");
        let _ = coordinator.wait();
        // The job finishes while no coordinator listens.
        std::fs::remove_file(f.t("hold-s01")).unwrap();
        let out = f
            .command(&["resume", "--auto-run", "--json", "--fleet", &f.nats.url])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}{}", explain(&out), f.worker_logs());
        let evs = events(&out);
        f.assert_all_merged_once(&evs, &["s01".to_string(), "s02".to_string()]);
        assert!(
            of_kind(&evs, "notice").iter().any(|e| e["message"]
                .as_str()
                .unwrap_or("")
                .contains("still out from before the restart")),
            "{}",
            explain(&out)
        );
        assert_eq!(f.runs("s01"), 1, "the job out was adopted, not run again");
        assert_eq!(git(f.repo(), &["show", "main:s03.txt"]).trim(), "s03");
    }

    #[test]
    fn nats_down_stops_the_coordinator_resumably_and_resume_completes() {
        let Some(mut f) = Fleet::new("fleet_nats_down", json!([story("s01", &[])])) else {
            return;
        };
        std::fs::write(f.t("hold-s01"), "").unwrap();
        f.worker("w1", 1, &[]);
        f.wait_for_workers(1);
        let coordinator = f
            .command(&["approve", "--auto-run", "--json", "--fleet", &f.nats.url])
            .env("CASCADE_FLEET_DOWN_AFTER_SECS", "2")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("coordinator");
        f.wait_for_file("started-s01");
        f.nats.stop();
        let out = coordinator.wait_with_output().expect("coordinator ends");
        assert_eq!(code(&out), 130, "{}", explain(&out));
        let evs = events(&out);
        assert!(
            of_kind(&evs, "fleet_waiting")
                .iter()
                .any(|e| e["reason"].as_str().unwrap_or("").contains("unreachable")),
            "{}",
            explain(&out)
        );
        assert_eq!(evs.last().unwrap()["status"], "interrupted");
        // Back up: the worker finishes and publishes; resume adopts the job.
        f.nats.restart();
        std::fs::remove_file(f.t("hold-s01")).unwrap();
        let out = f
            .command(&["resume", "--auto-run", "--json", "--fleet", &f.nats.url])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}{}", explain(&out), f.worker_logs());
        f.assert_all_merged_once(&events(&out), &ids(1));
        assert_eq!(f.runs("s01"), 1, "the job was not lost nor run twice");
    }

    #[test]
    fn a_job_needing_an_agent_no_worker_has_is_reported() {
        let mut s = story("s01", &[]);
        s["agent"] = json!("ghost");
        let Some(mut f) = Fleet::new("fleet_absent_agent", json!([s])) else {
            return;
        };
        f.worker("w1", 1, &[]);
        f.wait_for_workers(1);
        let out = f.approve(&["--no-fallback", "--max-retries", "0"]);
        assert_eq!(code(&out), 1, "{}", explain(&out));
        let evs = events(&out);
        let failed = of_kind(&evs, "story_failed");
        assert_eq!(failed.len(), 1, "{}", explain(&out));
        assert_eq!(failed[0]["error_type"], "agent_unavailable");
        let msg = failed[0]["error"].as_str().unwrap_or("");
        assert!(
            msg.contains("no live worker can run story 's01'") && msg.contains("ghost"),
            "{msg}"
        );
        assert!(of_kind(&evs, "job_published").is_empty(), "never published");
    }

    #[test]
    fn a_worker_drains_on_sigterm_and_fleet_status_lists_it() {
        let Some(mut f) = Fleet::new("fleet_drain", json!([story("s01", &[])])) else {
            return;
        };
        std::fs::write(f.t("hold-s01"), "").unwrap();
        let pid = f.worker("w1", 2, &["--labels", "gpu,linux"]);
        let st = f.wait_for_workers(1);
        let w = &st["workers"][0];
        assert_eq!(w["id"], "w1");
        assert_eq!(w["labels"], json!(["gpu", "linux"]));
        assert_eq!(w["slots"], 2);
        assert!(
            w["agents"].as_array().unwrap().contains(&json!("scripted")),
            "{st}"
        );
        assert!(
            !w["agents"].as_array().unwrap().contains(&json!("ghost")),
            "{st}"
        );
        let coordinator = f.spawn_approve(&[]);
        f.wait_for_file("started-s01");
        // In flight while the agent holds.
        let busy = f.wait_for_status(|v| v["workers"][0]["jobs"][0]["story"] == "s01");
        assert_eq!(busy["workers"][0]["jobs"][0]["story"], "s01", "{busy}");
        assert_eq!(busy["queue"]["in_flight"], 1, "{busy}");
        let text = f
            .command(&["fleet", "status", "--fleet", &f.nats.url])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&text.stdout).to_string();
        assert!(
            text.contains("w1") && text.contains("running s01"),
            "{text}"
        );
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        std::thread::sleep(Duration::from_millis(300));
        std::fs::remove_file(f.t("hold-s01")).unwrap();
        let out = coordinator.wait_with_output().expect("coordinator ends");
        assert_eq!(code(&out), 0, "{}{}", explain(&out), f.worker_logs());
        f.assert_all_merged_once(&events(&out), &ids(1));
        // The worker finished its job, then left (and its heartbeat with it).
        let deadline = Instant::now() + Duration::from_secs(20);
        let worker = f.workers.iter_mut().next().expect("worker");
        let status = loop {
            if let Some(s) = worker.try_wait().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "worker did not exit after draining"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(status.success(), "{status:?}");
        let log = std::fs::read_to_string(f.t("worker-w1.log")).unwrap();
        assert!(
            log.contains("draining") && log.contains("s01: attempt 1 passed"),
            "{log}"
        );
        let after = f
            .command(&["fleet", "status", "--fleet", &f.nats.url, "--json"])
            .output()
            .unwrap();
        let after: Value = serde_json::from_slice(&after.stdout).unwrap();
        assert_eq!(after["workers"], json!([]), "{after}");
    }

    #[test]
    fn thirty_stories_with_dependencies_on_three_workers_merge_once_each() {
        // Five layers of six; each story depends on two of the layer before.
        let all = ids(30);
        let mut stories = Vec::new();
        let mut needs = HashMap::new();
        for (i, id) in all.iter().enumerate() {
            let deps: Vec<&str> = if i < 6 {
                vec![]
            } else {
                let l = i / 6 - 1;
                vec![
                    all[l * 6 + i % 6].as_str(),
                    all[l * 6 + (i + 1) % 6].as_str(),
                ]
            };
            needs.insert(id.clone(), deps.join(" "));
            stories.push(story(id, &deps));
        }
        let Some(mut f) = Fleet::new("fleet_thirty", Value::Array(stories)) else {
            return;
        };
        for (id, n) in &needs {
            if !n.is_empty() {
                std::fs::write(f.t(&format!("needs-{id}")), n).unwrap();
            }
        }
        for w in ["w1", "w2", "w3"] {
            f.worker(w, 1, &[]);
        }
        f.wait_for_workers(3);
        let out = f.approve(&["--schedule", "eager", "--parallel", "6"]);
        assert_eq!(code(&out), 0, "{}{}", explain(&out), f.worker_logs());
        let evs = events(&out);
        f.assert_all_merged_once(&evs, &all);
        let workers: std::collections::HashSet<&str> = of_kind(&evs, "job_finished")
            .iter()
            .filter_map(|e| e["worker"].as_str())
            .collect();
        assert!(
            workers.len() >= 2,
            "work spread over the workers: {workers:?}"
        );
    }
}

#[cfg(feature = "fleet")]
mod complete {
    //! The fleet on one host and its completeness: default work
    //! directories, conflicts resolved on workers, refs cleaned up, agents
    //! chosen by the workers.

    use serde_json::{json, Value};

    use super::real::{ids, story, Fleet};
    use crate::common::{code, events, explain, git, of_kind, write_json};

    #[test]
    fn three_default_workers_on_one_host_each_get_their_own_directory() {
        let all = ids(12);
        let stories: Vec<Value> = all.iter().map(|id| story(id, &[])).collect();
        let Some(mut f) = Fleet::new("fleet_default_workdirs", Value::Array(stories)) else {
            return;
        };
        // No --id, no --workdir: what three `cascade worker` on one machine get.
        let agents = f.t("agents.json");
        for n in 1..=3 {
            f.spawn_worker(&format!("default{n}"), &["--slots", "2"], &[], &agents);
        }
        let st = f.wait_for_workers(3);
        let mut seen: Vec<String> = st["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["id"].as_str().unwrap_or("").to_string())
            .collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 3, "three ids: {st}");
        for id in &seen {
            assert!(
                ["-1", "-2", "-3"].iter().any(|n| id.ends_with(n)),
                "HOST-<n> ids: {seen:?}"
            );
        }
        let out = f.approve(&["--parallel", "6"]);
        assert_eq!(code(&out), 0, "{}{}", explain(&out), f.worker_logs());
        let evs = events(&out);
        f.assert_all_merged_once(&evs, &all);
        assert!(
            of_kind(&evs, "story_failed").is_empty(),
            "{}",
            explain(&out)
        );
        // Each worker in its own locked directory under the default root.
        let root = f.t("cache").join("cascade").join("fleet");
        for id in &seen {
            assert!(root.join(id).join("worker.lock").is_file(), "{id}");
        }
        // A fourth worker claiming a running worker's id is refused.
        let taken = f
            .command(&["worker", "--fleet", &f.nats.url, "--id", &seen[0]])
            .output()
            .unwrap();
        assert_eq!(code(&taken), 2, "{}", explain(&taken));
        let err = String::from_utf8_lossy(&taken.stderr);
        assert!(
            err.contains("is in use by worker") && err.contains(&seen[0]),
            "{err}"
        );
    }

    /// Two stories that change `shared.txt` from the same base: the second
    /// to merge conflicts.
    fn conflicting_pair(test: &str) -> Option<Fleet> {
        let f = Fleet::new(test, json!([story("s01", &[]), story("s02", &[])]))?;
        f.commit_shared_file();
        std::fs::write(f.t("shared-s01"), "from s01\n").unwrap();
        std::fs::write(f.t("shared-s02"), "from s02\n").unwrap();
        Some(f)
    }

    #[test]
    fn a_conflict_of_fleet_stories_is_resolved_by_the_resolving_agent_on_a_worker() {
        let Some(mut f) = conflicting_pair("fleet_resolve") else {
            return;
        };
        f.worker("w1", 2, &[]);
        f.wait_for_workers(1);
        let out = f.approve(&["--parallel", "2", "--max-retries", "0"]);
        assert_eq!(code(&out), 0, "{}{}", explain(&out), f.worker_logs());
        let evs = events(&out);
        f.assert_all_merged_once(&evs, &ids(2));
        let conflicts = of_kind(&evs, "merge_conflict");
        assert_eq!(conflicts.len(), 1, "{}", explain(&out));
        let loser = conflicts[0]["story"].as_str().unwrap().to_string();
        let resolving = of_kind(&evs, "merge_resolving");
        assert_eq!(resolving.len(), 1, "{}", explain(&out));
        assert_eq!(resolving[0]["story"], loser.as_str());
        assert_eq!(resolving[0]["agent"], "scripted");
        assert_eq!(resolving[0]["files"], json!(["shared.txt"]));
        let resolved = of_kind(&evs, "merge_resolved");
        assert_eq!(resolved.len(), 1, "{}", explain(&out));
        // The worker's resolving agent ran once, and no retry was needed.
        assert_eq!(f.runs(&loser), 1);
        let merges = std::fs::read_to_string(f.t(&format!("merges-{loser}"))).unwrap_or_default();
        assert_eq!(merges.lines().count(), 1, "one resolution");
        // Both sides are on main, without markers.
        let shared = git(f.repo(), &["show", "main:shared.txt"]);
        assert!(
            shared.contains("from s01") && shared.contains("from s02") && !shared.contains("<<<"),
            "{shared}"
        );
        // The resolution job ran on the worker and its work pushed for it is gone.
        let jobs = of_kind(&evs, "job_finished");
        assert_eq!(
            jobs.len(),
            3,
            "two stories and one resolution: {}",
            explain(&out)
        );
        assert_eq!(f.remote_refs(), "", "refs left on the remote");
    }

    #[test]
    fn with_no_resolve_a_fleet_conflict_is_retried_and_failed_work_stays_on_the_remote() {
        let Some(mut f) = conflicting_pair("fleet_no_resolve") else {
            return;
        };
        // Pushed work (no packs in results): the branch path is used.
        f.worker_with_env("w1", 2, &[], &[("CASCADE_FLEET_MAX_PACK_BYTES", "0")]);
        f.wait_for_workers(1);
        let out = f.approve(&["--parallel", "2", "--no-resolve", "--max-retries", "0"]);
        assert_eq!(code(&out), 1, "{}{}", explain(&out), f.worker_logs());
        let evs = events(&out);
        assert!(
            of_kind(&evs, "merge_resolving").is_empty(),
            "{}",
            explain(&out)
        );
        let failed = of_kind(&evs, "story_failed");
        assert_eq!(failed.len(), 1, "{}", explain(&out));
        assert_eq!(failed[0]["error_type"], "merge_conflict");
        let loser = failed[0]["story"].as_str().unwrap().to_string();
        let winner = if loser == "s01" { "s02" } else { "s01" };
        // The failed story's work is kept on the remote (and locally); the
        // merged one's branch and every base are gone.
        assert_eq!(
            f.remote_refs(),
            format!("refs/heads/cascade/{loser}/a1"),
            "{}",
            explain(&out)
        );
        let local = git(f.repo(), &["branch", "--list", &format!("cascade/{loser}")]);
        assert!(!local.is_empty(), "local branch kept");
        assert_eq!(
            git(f.repo(), &["show", &format!("main:{winner}.txt")]).trim(),
            winner
        );
    }

    #[test]
    fn a_worker_without_the_coordinators_preferred_agent_runs_a_candidate_it_has() {
        let Some(mut f) = Fleet::new("fleet_candidates", json!([story("s01", &[])])) else {
            return;
        };
        let scripted = f.t("agent.sh").display().to_string();
        // The coordinator prefers "claude-like" (which it may have; the
        // workers do not), then "scripted".
        write_json(
            &f.t("coordinator-agents.json"),
            &json!({
                "default_agent": "claude-like",
                "agents": {
                    "claude-like": {"type": "cli", "command": scripted, "args": []},
                    "scripted": {"type": "cli", "command": scripted, "args": []}
                },
                "phase_defaults": {"implementation": {"default_agent": "claude-like",
                                                      "fallback_chain": ["scripted"]}}
            }),
        );
        // The worker has no "claude-like" at all, and would pick "own" by
        // itself: the job's candidates decide, in the coordinator's order.
        write_json(
            &f.t("worker-agents.json"),
            &json!({
                "default_agent": "own",
                "agents": {
                    "own": {"type": "cli", "command": "/bin/false", "args": []},
                    "scripted": {"type": "cli", "command": scripted, "args": []}
                }
            }),
        );
        let worker_agents = f.t("worker-agents.json");
        f.spawn_worker("w1", &["--id", "w1"], &[], &worker_agents);
        f.wait_for_workers(1);
        let coordinator_agents = f.t("coordinator-agents.json");
        let out = f
            .command_with_agents(
                &["approve", "--auto-run", "--json", "--fleet", &f.nats.url],
                &coordinator_agents,
            )
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}{}", explain(&out), f.worker_logs());
        let evs = events(&out);
        f.assert_all_merged_once(&evs, &ids(1));
        let started = of_kind(&evs, "job_started");
        assert_eq!(started.len(), 1, "{}", explain(&out));
        assert_eq!(started[0]["agent"], "scripted");
        let merged = of_kind(&evs, "story_merged");
        assert_eq!(merged[0]["agent"], "scripted");
        let log = std::fs::read_to_string(f.t("worker-w1.log")).unwrap();
        assert!(log.contains("s01: agent scripted started"), "{log}");
    }
}

#[cfg(feature = "fleet")]
mod matrix {
    //! The fleet's column of the modes matrix (tests/e2e/modes.rs):
    //! `approve --fleet` and `mega approve --fleet`, each with every control
    //! at once (review, story budget, one gate job, notify, remote cache,
    //! no-resolve, eager), checked in the coordinator's events by the same
    //! assertions as the local modes; and a mega-plan whose features repeat
    //! story ids, all merged through the workers.

    use std::path::Path;

    use serde_json::{json, Value};

    use super::real::{story, Fleet};
    use crate::common::{code, events, explain, git, of_kind, write_json};
    use crate::modes::Scene;

    /// The scene's repository gets a shared remote (`origin`); a worker of
    /// three slots runs with the scene's agents.
    fn fleet_for(s: &Scene, test: &str) -> Option<Fleet> {
        let mut f = Fleet::new(test, json!([]))?;
        let remote = s.t("shared.git");
        git(s.tools.path(), &["init", "-q", "--bare", "shared.git"]);
        let repo = s.repo.path();
        git(
            repo,
            &["remote", "add", "origin", &remote.display().to_string()],
        );
        git(repo, &["push", "-q", "origin", "main"]);
        let env = [("CASCADE_CACHE_SECRET", "modes-secret")];
        let agents = s.t("agents.json");
        f.spawn_worker("w1", &["--id", "w1", "--slots", "3"], &env, &agents);
        f.wait_for_workers(1);
        Some(f)
    }

    fn run(s: &Scene, f: &Fleet, mode: &[&str]) -> std::process::Output {
        let mut a: Vec<String> = mode.iter().map(|m| m.to_string()).collect();
        a.extend(["--fleet".to_string(), f.nats.url.clone()]);
        a.extend(s.start_args());
        s.cascade(&a)
            .env("CASCADE_FLEET_ACK_WAIT_SECS", "3")
            .output()
            .expect("runs")
    }

    /// What only a fleet run shows: the workers ran every story with the
    /// chosen agent, and nothing is left on the shared remote.
    fn assert_on_the_fleet(s: &Scene, ev: &[Value], out: &std::process::Output) {
        let started = of_kind(ev, "job_started");
        assert!(started.len() >= 5, "{}", explain(out));
        for e in started {
            assert_eq!(e["worker"], "w1", "{e}");
            assert_eq!(e["agent"], "impl", "{e}");
        }
        let left = git(
            &s.t("shared.git"),
            &[
                "for-each-ref",
                "--format=%(refname)",
                "refs/heads/cascade",
                "refs/cascade",
            ],
        );
        assert_eq!(left.trim(), "", "{}", explain(out));
    }

    #[test]
    fn approve_with_the_fleet_takes_every_control() {
        let s = Scene::new(false);
        let Some(f) = fleet_for(&s, "fleet_matrix_approve") else {
            return;
        };
        let out = run(&s, &f, &["approve"]);
        assert_eq!(
            code(&out),
            1,
            "b1 fails for good: {}{}",
            explain(&out),
            f.worker_logs()
        );
        let ev = events(&out);
        s.assert_controls(&ev, "run_finished", &out);
        assert_on_the_fleet(&s, &ev, &out);
    }

    #[test]
    fn mega_approve_with_the_fleet_takes_every_control() {
        let s = Scene::new(true);
        let Some(f) = fleet_for(&s, "fleet_matrix_mega") else {
            return;
        };
        let out = run(
            &s,
            &f,
            &["mega", "approve", "--mega", "plans/mega-plan.json"],
        );
        assert_eq!(
            code(&out),
            1,
            "feature two fails (b1): {}{}",
            explain(&out),
            f.worker_logs()
        );
        let ev = events(&out);
        s.assert_controls(&ev, "mega_finished", &out);
        assert_on_the_fleet(&s, &ev, &out);
        let merged: Vec<&Value> = of_kind(&ev, "feature_merged");
        assert_eq!(merged.len(), 1, "{}", explain(&out));
        assert_eq!(merged[0]["feature"], "one");
    }

    #[test]
    fn mega_approve_with_the_fleet_merges_every_features_stories_when_ids_repeat() {
        let Some(mut f) = Fleet::new("fleet_mega_ids", json!([])) else {
            return;
        };
        // Two features with the same story ids (s02 needs s01 in each).
        let root = f.repo().to_path_buf();
        std::fs::remove_file(root.join("prd.json")).unwrap();
        for name in ["one", "two"] {
            write_json(
                &root.join(format!("plans/features/{name}/prd.json")),
                &json!({"goal": name, "stories": [story("s01", &[]), story("s02", &["s01"])],
                        "quality_gates": {"enabled": true, "gates": [
                            {"name": "readme", "type": "test", "required": true,
                             "command": "ls", "args": ["README.md"]}]}}),
            );
        }
        std::fs::write(f.t("needs-s02"), "s01").unwrap();
        let feature = |id: &str, name: &str| {
            json!({"id": id, "name": name, "title": name, "description": name,
                   "priority": "high", "dependencies": [], "status": "pending"})
        };
        write_json(
            &root.join("plans/mega-plan.json"),
            &json!({"goal": "two features", "execution_mode": "auto",
                    "features": [feature("f1", "one"), feature("f2", "two")]}),
        );
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-q", "-m", "plans"]);
        git(&root, &["push", "-q", "origin", "main"]);
        f.worker("w1", 2, &[]);
        f.worker("w2", 2, &[]);
        f.wait_for_workers(2);
        let out = f
            .command(&[
                "mega",
                "approve",
                "--mega",
                "plans/mega-plan.json",
                "--auto-run",
            ])
            .args(["--json", "--retry-delay", "0", "--fleet", &f.nats.url])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}{}", explain(&out), f.worker_logs());
        let ev = events(&out);
        // Four jobs (no id taken for another feature's), each merged once
        // into its own feature, and both features landed.
        let published = of_kind(&ev, "job_published");
        assert_eq!(published.len(), 4, "{}", explain(&out));
        for feature in ["one", "two"] {
            for id in ["s01", "s02"] {
                let merged = of_kind(&ev, "story_merged")
                    .into_iter()
                    .filter(|e| e["feature"] == feature && e["story"] == id)
                    .count();
                assert_eq!(merged, 1, "{feature}/{id}: {}", explain(&out));
            }
        }
        assert_eq!(of_kind(&ev, "feature_merged").len(), 2, "{}", explain(&out));
        assert_eq!(git(&root, &["show", "main:s02.txt"]).trim(), "s02");
        assert_eq!(f.remote_refs(), "", "{}", explain(&out));
    }

    /// A fleet whose repository holds the integration fixture's `stories`
    /// (`crate::integration::seed`) and whatever `more` commits, pushed;
    /// `None`, saying why, without python3 or nats-server.
    fn integration_fleet(name: &str, stories: &[&str], more: impl FnOnce(&Path)) -> Option<Fleet> {
        if !crate::integration::python3() {
            return None;
        }
        let f = Fleet::new(name, json!([]))?;
        // The fleet's own PRD makes way for the fixture's (untracked, as there).
        std::fs::remove_file(f.repo().join("prd.json")).expect("fleet PRD");
        crate::integration::seed(f.repo.path(), f.tools.path(), stories);
        more(f.repo());
        git(f.repo(), &["push", "-q", "origin", "main"]);
        Some(f)
    }

    /// Integration gating in the fleet's merge queue: issue 46's pair
    /// (rename lib.f, add a caller of lib.f) done by a worker from the same
    /// base; the rename merges first, the caller's merge is gated as merged
    /// on the coordinator, fails as `integration` naming the rename, and
    /// its retry (a new job from the new tip) fits; main stays green.
    #[test]
    fn a_semantic_break_between_fleet_stories_is_caught_and_retried_from_the_new_tip() {
        let Some(mut f) = integration_fleet("fleet_integration", &["rename", "caller2"], |_| {})
        else {
            return;
        };
        f.worker("w1", 2, &[]);
        f.wait_for_workers(1);
        let out = f.approve(&["--max-retries", "1", "--parallel", "2"]);
        assert_eq!(code(&out), 0, "{}{}", explain(&out), f.worker_logs());
        let evs = events(&out);
        let failed: Vec<&Value> = of_kind(&evs, "attempt_failed");
        assert_eq!(failed.len(), 1, "{}", explain(&out));
        assert_eq!(failed[0]["story"], "caller2", "{}", failed[0]);
        assert_eq!(failed[0]["error_type"], "integration", "{}", failed[0]);
        assert!(
            failed[0]["error"]
                .as_str()
                .unwrap_or_default()
                .contains("rename"),
            "{}",
            failed[0]
        );
        assert!(
            of_kind(&evs, "integration_finished")
                .iter()
                .any(|e| e["story"] == "caller2" && e["verdict"] == "failed"),
            "{}",
            explain(&out)
        );
        let caller2 = git(f.repo(), &["show", "main:caller2.py"]);
        assert!(caller2.contains("lib.g()"), "{caller2}");
        let (green, text) = crate::integration::main_is_green(f.repo(), f.tools.path());
        assert!(green, "main's gate fails after the run: {text}");
    }

    /// A fleet story whose merge conflicts with a story still on the merge
    /// train retries once that story has merged, not at once: clash1's
    /// merge is gated (x merged first) and held until clash2's own gate has
    /// run and six seconds more; clash2 boards on top of it and conflicts
    /// in shared.txt. Its worktree is on the worker, so what it is against
    /// is known from the branches here. Retried at once, from a tip without
    /// clash1, it would conflict again and fail for good.
    #[test]
    fn a_fleet_story_conflicting_with_one_on_the_train_retries_after_it_merged() {
        let stories = ["x", "clash1", "clash2"];
        let Some(mut f) = integration_fleet("fleet_clash_wait", &stories, |repo| {
            std::fs::write(repo.join("shared.txt"), "base\n").expect("shared.txt");
            git(repo, &["add", "-A"]);
            git(repo, &["commit", "-q", "-m", "shared file"]);
        }) else {
            return;
        };
        let tools = f.tools.path().to_path_buf();
        for (story, after) in [
            ("clash1", "main:x.py"),
            ("clash2", "gated-integration-clash1"),
        ] {
            std::fs::write(tools.join(format!("after-{story}")), after).expect("after");
        }
        crate::integration::hold(&tools, "integration-clash1", "gated-clash2", 6);
        f.worker("w1", 3, &[]);
        f.wait_for_workers(1);
        let out = f.approve(&["--max-retries", "1", "--parallel", "3"]);
        assert_eq!(code(&out), 0, "{}{}", explain(&out), f.worker_logs());
        let evs = events(&out);
        // clash2 conflicts (and so does the resolving agent's merge, made
        // against the same train); nobody else does.
        let conflicts = of_kind(&evs, "merge_conflict");
        assert!(!conflicts.is_empty(), "{}", explain(&out));
        assert!(
            conflicts.iter().all(|c| c["story"] == "clash2"),
            "{}",
            explain(&out)
        );
        let waits: Vec<&Value> = of_kind(&evs, "notice")
            .into_iter()
            .filter(|e| {
                e["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("clash2: its retry waits for clash1"))
            })
            .collect();
        assert_eq!(waits.len(), 1, "{}", explain(&out));
        // The retry's job starts from a tip that holds clash1.
        let merged = |id: &str| {
            evs.iter()
                .position(|e| e["event"] == "story_merged" && e["story"] == id)
                .unwrap_or_else(|| panic!("{id} merged\n{}", explain(&out)))
        };
        let retry = evs
            .iter()
            .position(|e| {
                e["event"] == "job_published" && e["story"] == "clash2" && e["attempt"] == 2
            })
            .unwrap_or_else(|| panic!("clash2 retried\n{}", explain(&out)));
        assert!(merged("clash1") < retry, "{}", explain(&out));
        assert!(merged("clash2") > retry);
        let shared = git(f.repo(), &["show", "main:shared.txt"]);
        assert_eq!(
            shared,
            "base\nline from clash1\nline from clash2\n",
            "{}",
            explain(&out)
        );
    }
}

/// Measurements (ignored: run by hand, see docs/fleet.md; they print, they
/// assert only that the work was done).
#[cfg(feature = "fleet")]
mod measure {
    use std::io::BufRead;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    use serde_json::{json, Value};

    use super::real::Fleet;
    use crate::common::git;

    fn story(id: &str, deps: &[String]) -> Value {
        json!({"id": id, "title": format!("story {id}"), "description": "measure",
               "priority": "medium", "dependencies": deps, "status": "pending",
               "acceptance_criteria": []})
    }

    /// Runs the coordinator; returns its wall time and, per event line, the
    /// moment it was read, from the moment it was started.
    fn run(f: &Fleet, extra: &[&str]) -> (Duration, Vec<(Duration, Value)>) {
        let mut args = vec![
            "approve",
            "--auto-run",
            "--retry-delay",
            "0",
            "--json",
            "--fleet",
            &f.nats.url,
        ];
        args.extend_from_slice(extra);
        let started = Instant::now();
        let mut child = f
            .command(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let mut lines = Vec::new();
        for line in std::io::BufReader::new(out).lines() {
            let line = line.unwrap();
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                lines.push((started.elapsed(), v));
            }
        }
        let status = child.wait().unwrap();
        assert!(status.success(), "coordinator failed");
        (started.elapsed(), lines)
    }

    /// 30 stories of 2 s each (five layers of six, each story needing two
    /// of the layer before: critical path 5 stories = 10 s) on fleets of
    /// `CASCADE_MEASURE_FLEETS` (workers x slots, comma-separated; default
    /// `1x1,3x1,2x3`).
    #[test]
    #[ignore]
    fn makespan_of_thirty_two_second_stories() {
        let fleets =
            std::env::var("CASCADE_MEASURE_FLEETS").unwrap_or_else(|_| "1x1,3x1,2x3".into());
        let fleets: Vec<(usize, usize)> = fleets
            .split(',')
            .filter_map(|f| {
                let (w, s) = f.trim().split_once('x')?;
                Some((w.parse().ok()?, s.parse().ok()?))
            })
            .collect();
        for (workers, slots) in fleets {
            let ids: Vec<String> = (1..=30).map(|i| format!("s{i:02}")).collect();
            let deps = deps_of(&ids);
            let stories: Vec<Value> = ids
                .iter()
                .map(|id| story(id, deps.get(id).map_or(&[][..], |d| d)))
                .collect();
            let Some(mut f) = Fleet::new("makespan", Value::Array(stories)) else {
                return;
            };
            for id in &ids {
                std::fs::write(f.t(&format!("sleep-{id}")), "2").unwrap();
            }
            for w in 0..workers {
                f.worker(&format!("w{w}"), slots, &[]);
            }
            f.wait_for_workers(workers);
            let (took, lines) = run(&f, &["--schedule", "eager", "--parallel", "6"]);
            let total = workers * slots;
            let bound = (30.0 * 2.0 / total as f64).max(10.0);
            println!(
                "MEASURE makespan {workers}x{slots} slots={total}: {:.1}s (bound max(critical path 10s, 60s/{total}) = {bound:.1}s, ratio {:.2}); {}; {}",
                took.as_secs_f64(),
                took.as_secs_f64() / bound,
                hand_offs(took, &lines, &deps),
                worker_phases(&f)
            );
            assert_eq!(git(f.repo(), &["show", "main:s30.txt"]).trim(), "s30");
        }
    }

    /// The makespan plan: five layers of six, each story needing two of the
    /// layer before (dependencies by id; the first layer has none).
    fn deps_of(ids: &[String]) -> std::collections::HashMap<String, Vec<String>> {
        ids.iter()
            .enumerate()
            .filter(|(i, _)| *i >= 6)
            .map(|(i, id)| {
                let l = i / 6 - 1;
                let deps = vec![ids[l * 6 + i % 6].clone(), ids[l * 6 + (i + 1) % 6].clone()];
                (id.clone(), deps)
            })
            .collect()
    }

    /// Where the time between a story's end and its dependent's start goes,
    /// as mean milliseconds from the coordinator's events: ready (the last
    /// dependency merged) -> job published -> worker started the agent ->
    /// job finished (the agent's 2 s and the worker's steps after it) ->
    /// story merged; and the coordinator's start (to the first job
    /// published) and end (from the last merge to its exit).
    fn hand_offs(
        took: Duration,
        lines: &[(Duration, Value)],
        deps: &std::collections::HashMap<String, Vec<String>>,
    ) -> String {
        let mut at: std::collections::HashMap<(String, String), Duration> = Default::default();
        for (t, e) in lines {
            if let (Some(kind), Some(story)) = (e["event"].as_str(), e["story"].as_str()) {
                at.entry((kind.to_string(), story.to_string()))
                    .or_insert(*t);
            }
        }
        let get = |kind: &str, story: &str| at.get(&(kind.to_string(), story.to_string())).copied();
        let ms = |from: Duration, to: Duration| to.saturating_sub(from).as_secs_f64() * 1000.0;
        let mut publish = Vec::new();
        for (story, ds) in deps {
            let ready = ds.iter().filter_map(|d| get("story_merged", d)).max();
            if let (Some(r), Some(p)) = (ready, get("job_published", story)) {
                publish.push(ms(r, p));
            }
        }
        let mut steps = [Vec::new(), Vec::new(), Vec::new()];
        for (kind, story) in at.keys() {
            if kind != "job_published" {
                continue;
            }
            let chain = [
                "job_published",
                "job_started",
                "job_finished",
                "story_merged",
            ]
            .map(|k| get(k, story));
            for (i, pair) in chain.windows(2).enumerate() {
                if let [Some(a), Some(b)] = pair {
                    steps[i].push(ms(*a, *b));
                }
            }
        }
        let first = at
            .iter()
            .filter(|((k, _), _)| k == "job_published")
            .map(|(_, t)| *t)
            .min()
            .unwrap_or_default();
        let last = at
            .iter()
            .filter(|((k, _), _)| k == "story_merged")
            .map(|(_, t)| *t)
            .max()
            .unwrap_or_default();
        format!(
            "hand-offs (mean): ready->published {:.0} ms, published->agent started {:.0} ms, agent started->finished {:.0} ms, finished->merged {:.0} ms; start->first published {:.0} ms, last merged->exit {:.0} ms",
            mean(&publish),
            mean(&steps[0]),
            mean(&steps[1]),
            mean(&steps[2]),
            ms(Duration::ZERO, first),
            ms(last, took)
        )
    }

    /// Where a story's time from result to merge goes, from the events'
    /// arrival times: the work taken (`job_finished` -> `story_committed`),
    /// the wait for the merge queue (-> `merge_started`) and the merge with
    /// its bookkeeping (-> `story_merged`), as means in milliseconds.
    fn merge_phases(lines: &[(Duration, Value)]) -> String {
        let kinds = [
            "job_finished",
            "story_committed",
            "merge_started",
            "story_merged",
        ];
        let mut at: std::collections::HashMap<(usize, String), Duration> = Default::default();
        for (t, e) in lines {
            let (Some(kind), Some(story)) = (e["event"].as_str(), e["story"].as_str()) else {
                continue;
            };
            if let Some(k) = kinds.iter().position(|x| *x == kind) {
                at.entry((k, story.to_string())).or_insert(*t);
            }
        }
        let mut steps = [Vec::new(), Vec::new(), Vec::new()];
        for ((k, story), t) in &at {
            if let Some(next) = kinds
                .get(k + 1)
                .and_then(|_| at.get(&(k + 1, story.clone())))
            {
                steps[*k].push(next.saturating_sub(*t).as_secs_f64() * 1000.0);
            }
        }
        format!(
            "result to merged (mean): work taken {:.1} ms, waiting for the queue {:.1} ms, merge {:.1} ms",
            mean(&steps[0]),
            mean(&steps[1]),
            mean(&steps[2])
        )
    }

    fn mean(v: &[f64]) -> f64 {
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    }

    /// The workers' own account of each job (the phases of their `job_done`
    /// lines in worker-*.log: `... passed in 2.3s (fetch 80 ms, ...)`), as
    /// the mean milliseconds per phase.
    fn worker_phases(f: &Fleet) -> String {
        let mut sums: Vec<(String, Vec<f64>)> = Vec::new();
        let logs = std::fs::read_dir(f.tools.path()).unwrap();
        for log in logs.flatten() {
            let name = log.file_name().to_string_lossy().to_string();
            if !(name.starts_with("worker-") && name.ends_with(".log")) {
                continue;
            }
            let text = std::fs::read_to_string(log.path()).unwrap_or_default();
            for line in text.lines().filter(|l| l.contains(" passed in ")) {
                let Some(inner) = line
                    .rsplit_once(" (")
                    .and_then(|(_, p)| p.strip_suffix(')'))
                else {
                    continue;
                };
                for part in inner.split(", ") {
                    let Some((phase, n)) =
                        part.strip_suffix(" ms").and_then(|p| p.rsplit_once(' '))
                    else {
                        continue;
                    };
                    let Ok(n) = n.parse::<f64>() else { continue };
                    match sums.iter_mut().find(|(p, _)| p == phase) {
                        Some((_, v)) => v.push(n),
                        None => sums.push((phase.to_string(), vec![n])),
                    }
                }
            }
        }
        let phases: Vec<String> = sums
            .iter()
            .map(|(p, v)| format!("{p} {:.0} ms", mean(v)))
            .collect();
        format!("worker phases (mean): {}", phases.join(", "))
    }

    /// The coordinator's cost per story at `CASCADE_MEASURE_STORIES` (default
    /// 1000) independent stories with instant agents and 3 workers x 2 slots.
    #[test]
    #[ignore]
    fn merge_queue_cost_per_story() {
        let n: usize = std::env::var("CASCADE_MEASURE_STORIES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1000);
        let ids: Vec<String> = (1..=n).map(|i| format!("s{i:04}")).collect();
        let stories: Vec<Value> = ids.iter().map(|id| story(id, &[])).collect();
        let Some(mut f) = Fleet::new("merge_cost", Value::Array(stories)) else {
            return;
        };
        for w in 0..3 {
            f.worker(&format!("w{w}"), 2, &[]);
        }
        f.wait_for_workers(3);
        let (took, lines) = run(&f, &["--schedule", "eager", "--parallel", "8"]);
        // Per story: from the worker's result read to the merge done (fetch,
        // ancestry check, the serial merge queue, the state).
        let mut finished = std::collections::HashMap::new();
        let mut latencies = Vec::new();
        let mut merges = Vec::new();
        for (t, e) in &lines {
            let story = e["story"].as_str().unwrap_or("").to_string();
            match e["event"].as_str() {
                Some("job_finished") => {
                    finished.insert(story, *t);
                }
                Some("story_merged") => {
                    if let Some(s) = finished.get(&story) {
                        latencies.push(t.saturating_sub(*s));
                    }
                    merges.push(*t);
                }
                _ => {}
            }
        }
        assert_eq!(merges.len(), n);
        println!("MEASURE {}", merge_phases(&lines));
        latencies.sort();
        let mean =
            latencies.iter().map(Duration::as_secs_f64).sum::<f64>() / latencies.len() as f64;
        let p50 = latencies[latencies.len() / 2].as_secs_f64();
        let p99 = latencies[latencies.len() * 99 / 100].as_secs_f64();
        let span = merges
            .last()
            .unwrap()
            .saturating_sub(merges[0])
            .as_secs_f64();
        println!(
            "MEASURE merge queue, {n} stories: run {:.1}s; result-to-merged mean {:.0} ms, p50 {:.0} ms, p99 {:.0} ms; merges every {:.0} ms on average ({:.1} merges/s)",
            took.as_secs_f64(),
            mean * 1000.0,
            p50 * 1000.0,
            p99 * 1000.0,
            span / (n - 1) as f64 * 1000.0,
            (n - 1) as f64 / span
        );
    }
}
