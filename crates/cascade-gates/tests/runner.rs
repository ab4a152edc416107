//! Runner tests: temp git repositories, gates as small /bin/sh scripts.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cascade_gates::{run_gates, runner, GateCache, GateEvent, GateReport, GateSet, RunOptions};
use cascade_process::CancelToken;
use cascade_test_support::git;
use serde_json::json;

/// A repo at `<tmp>/repo` with tracked files, a .gitignore, and `<tmp>/bin` for scripts
/// (outside the repo, so running them changes nothing the fingerprint sees).
struct Fixture {
    tmp: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir_all(repo.join("src")).unwrap();
        std::fs::create_dir_all(tmp.path().join("bin")).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("src/a.txt"), "a\n").unwrap();
        std::fs::write(repo.join("b.txt"), "b\n").unwrap();
        std::fs::write(repo.join(".gitignore"), "*.log\n").unwrap();
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "init"]);
        Fixture { tmp }
    }
    fn repo(&self) -> PathBuf {
        self.tmp.path().join("repo")
    }
    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }
    /// An executable script in `<tmp>/bin`.
    fn script(&self, name: &str, body: &str) -> String {
        let p = self.path("bin").join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p.to_string_lossy().into_owned()
    }
    /// A gate script that counts its runs in `<tmp>/<name>.count` and exits `code`.
    fn counting(&self, name: &str, code: i32) -> String {
        let count = self.path(&format!("{name}.count"));
        self.script(
            name,
            &format!("echo x >> '{}'\nexit {code}", count.display()),
        )
    }
    fn runs(&self, name: &str) -> usize {
        std::fs::read_to_string(self.path(&format!("{name}.count")))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }
    fn set(&self, cfg: serde_json::Value) -> GateSet {
        GateSet::resolve(Some(&cfg), &self.path("none"), &self.repo()).unwrap()
    }
    fn cache(&self) -> GateCache {
        GateCache::open(&self.path("cascade"))
    }
}

fn opts(dir: &Path) -> RunOptions {
    RunOptions {
        workdir: dir.to_path_buf(),
        use_cache: true,
        ..RunOptions::default()
    }
}

fn run(set: &GateSet, o: &RunOptions, cache: &GateCache) -> GateReport {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(run_gates(set, o, cache, |_| {}, &CancelToken::new()))
}

#[test]
fn cache_hits_and_misses_follow_the_content() {
    let f = Fixture::new();
    let gate = f.counting("g", 0);
    let set = f.set(json!({"gates": [{"name": "g", "type": "test", "command": gate}]}));
    let cache = f.cache();
    let o = opts(&f.repo());
    let repo = f.repo();

    let r = run(&set, &o, &cache);
    assert!(r.passed && !r.gates[0].cached);
    let r = run(&set, &o, &cache);
    assert!(r.gates[0].cached, "second run is a hit");
    assert_eq!(f.runs("g"), 1);

    // An ignored file changes nothing.
    std::fs::write(repo.join("debug.log"), "noise").unwrap();
    assert!(run(&set, &o, &cache).gates[0].cached);
    assert_eq!(f.runs("g"), 1);

    // Edit a tracked file: miss. Staging it: same content, hit.
    std::fs::write(repo.join("b.txt"), "b2\n").unwrap();
    assert!(!run(&set, &o, &cache).gates[0].cached);
    assert_eq!(f.runs("g"), 2);
    git(&repo, &["add", "b.txt"]);
    assert!(
        run(&set, &o, &cache).gates[0].cached,
        "staging the same bytes hits"
    );
    // Staging different bytes than before: miss.
    std::fs::write(repo.join("b.txt"), "b3\n").unwrap();
    git(&repo, &["add", "b.txt"]);
    assert!(!run(&set, &o, &cache).gates[0].cached);
    assert_eq!(f.runs("g"), 3);
    // Committing changes nothing.
    git(&repo, &["commit", "-q", "-m", "b3"]);
    assert!(run(&set, &o, &cache).gates[0].cached);

    // A new untracked file: miss; deleting a tracked file: miss.
    std::fs::write(repo.join("new.txt"), "n").unwrap();
    assert!(!run(&set, &o, &cache).gates[0].cached);
    std::fs::remove_file(repo.join("src/a.txt")).unwrap();
    assert!(!run(&set, &o, &cache).gates[0].cached);
    assert_eq!(f.runs("g"), 5);

    let stats = cache.stats();
    assert_eq!(stats.misses, 5);
    assert_eq!(stats.hits, 4);
    let ex = cache.explain();
    assert_eq!(ex[0].changed, vec!["files"]);
    assert_eq!(ex[0].files_removed, vec!["src/a.txt"]);
}

#[test]
fn same_content_in_another_worktree_hits() {
    let f = Fixture::new();
    let gate = f.counting("g", 0);
    let set = f.set(json!({"gates": [{"name": "g", "command": gate}]}));
    let cache = f.cache();
    assert!(!run(&set, &opts(&f.repo()), &cache).gates[0].cached);
    let wt = f.path("wt");
    git(
        &f.repo(),
        &["worktree", "add", "-q", "-b", "story", wt.to_str().unwrap()],
    );
    assert!(run(&set, &opts(&wt), &cache).gates[0].cached);
    std::fs::write(wt.join("b.txt"), "changed in the story\n").unwrap();
    assert!(!run(&set, &opts(&wt), &cache).gates[0].cached);
    assert_eq!(f.runs("g"), 2);
}

#[test]
fn command_and_env_changes_miss_and_inputs_narrow_the_key() {
    let f = Fixture::new();
    let gate = f.counting("g", 0);
    let other = f.counting("h", 0);
    let cache = f.cache();
    let o = opts(&f.repo());
    let s1 = f.set(json!({"gates": [{"name": "g", "command": gate, "env": {"MODE": "a"}}]}));
    run(&s1, &o, &cache);
    assert!(run(&s1, &o, &cache).gates[0].cached);
    let s2 = f.set(json!({"gates": [{"name": "g", "command": gate, "env": {"MODE": "b"}}]}));
    assert!(!run(&s2, &o, &cache).gates[0].cached);
    assert_eq!(cache.explain()[0].changed, vec!["env"]);
    let s3 = f.set(json!({"gates": [{"name": "g", "command": other, "env": {"MODE": "b"}}]}));
    assert!(!run(&s3, &o, &cache).gates[0].cached);
    assert_eq!(cache.explain()[0].changed, vec!["command"]);

    // With inputs, a change elsewhere still hits.
    let s4 = f.set(json!({"gates": [{"name": "src-only", "command": gate, "inputs": ["src/**"]}]}));
    run(&s4, &o, &cache);
    std::fs::write(f.repo().join("b.txt"), "elsewhere\n").unwrap();
    assert!(run(&s4, &o, &cache).gates[0].cached);
    std::fs::write(f.repo().join("src/a.txt"), "inside\n").unwrap();
    assert!(!run(&s4, &o, &cache).gates[0].cached);
}

#[test]
fn failing_gates_are_not_cached_unless_asked() {
    let f = Fixture::new();
    let bad = f.counting("bad", 3);
    let cache = f.cache();
    let o = opts(&f.repo());
    let set = f.set(json!({"gates": [{"name": "bad", "command": bad}]}));
    let r = run(&set, &o, &cache);
    assert!(!r.passed);
    assert_eq!(r.gates[0].outcome.as_deref(), Some("exit code 3"));
    assert!(!run(&set, &o, &cache).gates[0].cached);
    assert_eq!(f.runs("bad"), 2);
    let set = f.set(json!({"gates": [{"name": "bad", "command": bad, "cache_failures": true}]}));
    run(&set, &o, &cache);
    let r = run(&set, &o, &cache);
    assert!(r.gates[0].cached && !r.gates[0].passed && !r.passed);
    assert_eq!(f.runs("bad"), 3);
}

#[test]
fn fail_fast_kills_running_gates_and_their_children() {
    let f = Fixture::new();
    let pidfile = f.path("grandchild.pid");
    let sleeper = f.script(
        "sleeper",
        &format!("sleep 60 &\necho $! > '{}'\nwait", pidfile.display()),
    );
    let failer = f.script(
        "failer",
        &format!(
            "while [ ! -s '{}' ]; do sleep 0.05; done\necho 'src/x.rs:1:2: error: broken'\nexit 1",
            pidfile.display()
        ),
    );
    let late = f.counting("late", 0);
    let set = f.set(json!({"fail_fast": true, "gates": [
        {"name": "slow", "type": "test", "command": sleeper, "timeout_seconds": 120},
        {"name": "fails", "type": "lint", "command": failer, "timeout_seconds": 120},
        {"name": "verify", "type": "verification", "command": late}
    ]}));
    let started = std::time::Instant::now();
    let r = run(
        &set,
        &RunOptions {
            use_cache: false,
            ..opts(&f.repo())
        },
        &f.cache(),
    );
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "the sleeper was not waited for"
    );
    assert!(!r.passed);
    let slow = r.gates.iter().find(|g| g.name == "slow").unwrap();
    assert!(slow.skipped && !slow.passed);
    assert!(
        slow.skip_reason.as_deref().unwrap().contains("fail-fast"),
        "{slow:?}"
    );
    let fails = r.gates.iter().find(|g| g.name == "fails").unwrap();
    assert_eq!(fails.errors[0].file.as_deref(), Some("src/x.rs"));
    let verify = r.gates.iter().find(|g| g.name == "verify").unwrap();
    assert!(verify.skipped);
    assert_eq!(f.runs("late"), 0);
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The grandchild (sleep 60) is gone, not merely abandoned.
    let mut alive = true;
    for _ in 0..100 {
        alive = unsafe { libc::kill(pid, 0) } == 0;
        if !alive {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!alive, "grandchild {pid} survived fail-fast");
}

#[test]
fn timeout_missing_tool_flaky_and_order() {
    let f = Fixture::new();
    let order = f.path("order");
    let fmt = f.script("fmt", &format!("echo fmt >> '{}'", order.display()));
    let test = f.script("test", &format!("echo test >> '{}'", order.display()));
    let hang = f.script("hang", "sleep 30");
    let marker = f.path("flaky.marker");
    let flaky = f.script(
        "flaky",
        &format!(
            "if [ -e '{0}' ]; then exit 0; fi\ntouch '{0}'\nexit 1",
            marker.display()
        ),
    );
    let set = f.set(json!({"rerun_failures": true, "gates": [
        {"name": "test", "type": "test", "command": test},
        {"name": "fmt", "type": "format", "command": fmt},
        {"name": "hang", "type": "test", "command": hang, "timeout_seconds": 1},
        {"name": "ghost", "type": "lint", "required": false, "command": "/nonexistent/tool-xyz"},
        {"name": "flaky", "type": "test", "command": flaky}
    ]}));
    let events = std::sync::Mutex::new(Vec::new());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let r = rt.block_on(run_gates(
        &set,
        &opts(&f.repo()),
        &f.cache(),
        |e| {
            if let GateEvent::Finished(g) = e {
                events.lock().unwrap().push(g.name);
            }
        },
        &CancelToken::new(),
    ));
    assert_eq!(std::fs::read_to_string(&order).unwrap(), "fmt\ntest\n");
    let g = |n: &str| r.gates.iter().find(|g| g.name == n).unwrap().clone();
    assert!(g("hang").timed_out && !g("hang").passed);
    assert!(g("hang").errors[0].message.contains("timed out"));
    assert!(g("ghost").tool_missing && !g("ghost").passed);
    assert!(g("ghost").errors[0].message.contains("not installed"));
    assert!(g("flaky").passed && g("flaky").flaky);
    assert!(!r.passed, "the required hang gate failed");
    assert_eq!(events.lock().unwrap()[0], "fmt");
    // Only fmt and test were stored: a flaky pass, a timeout and a missing tool are not.
    assert_eq!(f.cache().stats().entries, 2);
}

#[test]
fn incremental_gate_gets_changed_files_or_skips() {
    let f = Fixture::new();
    let args_file = f.path("args");
    let lint = f.script("lint", &format!("echo \"$@\" > '{}'", args_file.display()));
    let base = git(&f.repo(), &["rev-parse", "HEAD"]).trim().to_string();
    let set = f.set(
        json!({"gates": [{"name": "lint", "type": "lint", "command": lint,
        "args": ["check", "."], "incremental": true, "extensions": ["py"]}]}),
    );
    let o = RunOptions {
        base_commit: Some(base),
        use_cache: false,
        ..opts(&f.repo())
    };
    let r = run(&set, &o, &f.cache());
    assert!(r.passed && r.gates[0].skipped);
    assert!(r.gates[0]
        .skip_reason
        .as_deref()
        .unwrap()
        .contains("no relevant file changed"));
    std::fs::write(f.repo().join("src/new.py"), "x = 1\n").unwrap();
    std::fs::write(f.repo().join("b.txt"), "not python\n").unwrap();
    let r = run(&set, &o, &f.cache());
    assert!(r.passed && !r.gates[0].skipped);
    assert_eq!(
        std::fs::read_to_string(&args_file).unwrap(),
        "check src/new.py\n"
    );
}

#[test]
fn outer_cancel_stops_everything() {
    let f = Fixture::new();
    let hang = f.script("hang", "sleep 30");
    let set = f.set(json!({"gates": [{"name": "hang", "command": hang}]}));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cancel = CancelToken::new();
    let c2 = cancel.clone();
    let r = rt.block_on(async {
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            c2.cancel();
        });
        run_gates(&set, &opts(&f.repo()), &f.cache(), |_| {}, &cancel).await
    });
    assert!(!r.passed && r.gates[0].skipped);
}

#[test]
fn output_on_stdout_fails_a_fail_on_output_gate_and_launcher_missing_tools_are_named() {
    let f = Fixture::new();
    let lister = f.script("lister", "echo main.go");
    // A fake `cargo` whose sub-command does not exist (as with clippy not installed).
    let cargo = f.path("bin").join("cargo");
    std::fs::write(
        &cargo,
        "#!/bin/sh\necho \"error: no such command: \\`$1\\`\" >&2\nexit 101\n",
    )
    .unwrap();
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let set = f.set(json!({"gates": [
        {"name": "gofmt", "type": "format", "command": lister, "fail_on_output": true, "parser": "gofmt"},
        {"name": "clippy", "type": "lint", "command": cargo.to_str().unwrap(), "args": ["clippy"]}
    ]}));
    let r = run(
        &set,
        &RunOptions {
            use_cache: false,
            ..opts(&f.repo())
        },
        &f.cache(),
    );
    let fmt = &r.gates[0];
    assert!(!fmt.passed);
    assert_eq!(fmt.errors[0].file.as_deref(), Some("main.go"));
    let clippy = &r.gates[1];
    assert!(clippy.tool_missing && !clippy.passed, "{clippy:?}");
    assert!(
        clippy.errors[0]
            .message
            .contains("tool 'clippy' is not installed"),
        "{clippy:?}"
    );
}

/// The synchronous answer of the local cache (no runtime), or `None` when
/// the gates would have to run.
fn answer(set: &GateSet, o: &RunOptions, cache: &GateCache) -> Option<(GateReport, Vec<String>)> {
    let events = std::sync::Mutex::new(Vec::new());
    let prepared = runner::prepare(set, o);
    let report = runner::answer_from_cache(set, o, prepared, cache, |e| {
        let line = match e {
            GateEvent::Started { name, .. } => format!("started {name}"),
            GateEvent::Finished(r) => format!("finished {} cached={}", r.name, r.cached),
            other => format!("{other:?}"),
        };
        events.lock().unwrap().push(line);
    })
    .ok()?;
    Some((report, events.into_inner().unwrap()))
}

#[test]
fn a_full_hit_is_answered_without_running_anything_and_a_miss_records_nothing() {
    let f = Fixture::new();
    let (g, h) = (f.counting("g", 0), f.counting("h", 0));
    let set = f.set(json!({"gates": [
        {"name": "g", "type": "lint", "command": g},
        {"name": "h", "type": "test", "command": h}
    ]}));
    let cache = f.cache();
    let o = opts(&f.repo());
    assert!(answer(&set, &o, &cache).is_none(), "nothing stored yet");
    assert_eq!(
        cache.stats().misses + cache.stats().hits,
        0,
        "and nothing recorded"
    );
    run(&set, &o, &cache);
    assert_eq!(cache.stats().misses, 2);

    // A fresh cache over the same directory, as in a new process.
    let cache = f.cache();
    let (report, events) = answer(&set, &o, &cache).expect("every gate is a hit");
    assert!(report.passed && report.gates.iter().all(|g| g.cached));
    assert_eq!(
        events,
        vec![
            "started g",
            "started h",
            "finished g cached=true",
            "finished h cached=true"
        ]
    );
    assert_eq!((f.runs("g"), f.runs("h")), (1, 1));
    assert_eq!(cache.stats().hits, 2);

    // One edit: the gates must run; the failed answer leaves no trace.
    std::fs::write(f.repo().join("b.txt"), "edited\n").unwrap();
    assert!(answer(&set, &o, &cache).is_none());
    assert_eq!((cache.stats().hits, cache.stats().misses), (2, 2));
    let r = run(&set, &o, &cache);
    assert!(r.gates.iter().all(|g| !g.cached));
    assert_eq!((f.runs("g"), f.runs("h")), (2, 2));
}

#[test]
fn a_toolchain_probed_once_is_remembered_by_later_runs() {
    let f = Fixture::new();
    let gate = f.counting("g", 0);
    let probe = f.counting("probe", 0);
    // The probe script is an input of the toolchain's identity: let its
    // timestamp tick pass so the identity can be kept.
    std::thread::sleep(Duration::from_millis(30));
    let set = f.set(json!({"gates": [{"name": "g", "command": gate, "toolchain": [probe]}]}));
    let o = opts(&f.repo());
    run(&set, &o, &f.cache());
    assert_eq!(f.runs("probe"), 1);
    let (report, _) = answer(&set, &o, &f.cache()).expect("hit without probing");
    assert!(report.gates[0].cached);
    assert_eq!((f.runs("probe"), f.runs("g")), (1, 1));
    // The probe changed: its identity is not known, so the run goes async.
    f.counting("probe", 3);
    assert!(answer(&set, &o, &f.cache()).is_none());
}

/// A fake `pytest` (the census knows it by its name) that notes where it
/// was asked to write its JUnit report and that directory's mode, then
/// writes a report with one passing test when `WRITE_REPORT` is set.
fn fake_pytest(f: &Fixture) -> String {
    let notes = f.path("notes");
    f.script(
        "pytest",
        &format!(
            "for a in \"$@\"; do case \"$a\" in --junitxml=*) r=\"${{a#--junitxml=}}\";; esac; done\n\
             d=$(dirname \"$r\")\n\
             echo \"$d $(stat -c %a \"$d\")\" >> '{}'\n\
             if [ -n \"$WRITE_REPORT\" ]; then\n\
             printf '<testsuites><testsuite><testcase classname=\"tests.test_a\" name=\"test_one\"/></testsuite></testsuites>' > \"$r\"\n\
             fi",
            notes.display()
        ),
    )
}

#[test]
fn census_reports_are_read_only_from_a_fresh_private_directory_per_run() {
    let f = Fixture::new();
    let pytest = fake_pytest(&f);
    let private = f.path("private");
    // A forged report where an older cascade kept them, and one guessed
    // inside the private directory: neither is read.
    let forged = "<testsuites><testsuite><testcase classname=\"tests.test_a\" name=\"test_one\"/><testcase classname=\"tests.test_a\" name=\"test_two\"/></testsuite></testsuites>";
    std::fs::create_dir_all(private.join("census-guess")).unwrap();
    for p in [
        private.join("tests.xml"),
        private.join("census-guess/tests.report"),
    ] {
        std::fs::write(p, forged).unwrap();
    }
    let o = RunOptions {
        use_cache: false,
        census_dir: Some(private.clone()),
        ..opts(&f.repo())
    };
    let gates = |env: serde_json::Value| {
        f.set(json!({"gates": [{"name": "tests", "type": "test", "command": pytest, "env": env}]}))
    };
    let cache = f.cache();
    let written = run(&gates(json!({"WRITE_REPORT": "1"})), &o, &cache);
    let census = written.gates[0].census.as_ref().expect("a census");
    assert_eq!(
        census.tests.keys().collect::<Vec<_>>(),
        ["tests.test_a.test_one"],
        "only what the run wrote: {census:?}"
    );
    // A run that writes no report has an empty census, forged files or not.
    let silent = run(&gates(json!({})), &o, &cache);
    let census = silent.gates[0].census.as_ref().expect("a census");
    assert!(census.tests.is_empty(), "{census:?}");

    let notes = std::fs::read_to_string(f.path("notes")).unwrap();
    let dirs: Vec<(&str, &str)> = notes.lines().filter_map(|l| l.rsplit_once(' ')).collect();
    assert_eq!(dirs.len(), 2, "{notes}");
    assert_ne!(dirs[0].0, dirs[1].0, "each run gets its own directory");
    for (dir, mode) in &dirs {
        assert_eq!(*mode, "700", "{dir}");
        assert!(Path::new(dir).starts_with(&private), "{dir}");
        assert!(!Path::new(dir).exists(), "{dir} is removed once read");
    }
}

#[test]
fn the_confined_gates_of_a_run_share_a_network_of_their_own_and_the_next_run_gets_another() {
    use cascade_process::sandbox::{self, Policy};
    if !sandbox::own_network_available() {
        eprintln!("skipped: this kernel allows no user namespaces");
        return;
    }
    let f = Fixture::new();
    let netns = f.script("netns", "readlink /proc/self/ns/net");
    let gate = |name: &str| json!({"name": name, "command": netns.clone()});
    let set = f.set(json!({"gates": [gate("one"), gate("two")]}));
    let env = runner::GateEnv {
        sandbox: Some(std::sync::Arc::new(Policy {
            write: vec![f.repo()],
            ..Policy::default()
        })),
        ..runner::GateEnv::default()
    };
    let o = RunOptions {
        use_cache: false,
        ..opts(&f.repo())
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let networks = || {
        let report = rt.block_on(runner::run_gates_in(
            &set,
            &o,
            &env,
            &f.cache(),
            |_| {},
            &CancelToken::new(),
        ));
        report
            .gates
            .iter()
            .map(|g| {
                assert!(g.passed, "{g:?}");
                g.output_excerpt.trim().to_string()
            })
            .collect::<Vec<_>>()
    };
    let first = networks();
    let host = std::fs::read_link("/proc/self/ns/net").unwrap();
    assert_eq!(first.len(), 2);
    assert!(first[0].starts_with("net:["), "{first:?}");
    assert_eq!(first[0], first[1], "one namespace for the run's gates");
    assert_ne!(first[0], host.display().to_string(), "not the host's");
    let second = networks();
    assert_eq!(second[0], second[1]);
    assert_ne!(second[0], first[0], "another run, another namespace");
}
