//! Remote cache tests on the local-directory backend (`file://`): two
//! repositories with the same content, one publishes, the other hits; a
//! tampered entry is ignored; read-only never writes; another toolchain
//! misses; a remote that never answers costs the request timeout.

#![cfg(feature = "remote")]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cascade_gates::{
    run_gates, CacheSource, GateCache, GateEvent, GateReport, GateSet, RemoteCache, RemoteConfig,
    RemoteMode, RemoteRequest, RemoteSettings, RunOptions,
};
use cascade_process::CancelToken;
use cascade_test_support::git;
use serde_json::json;

const SECRET: &str = "test-secret";

/// Two clones-in-content (`a`, `b`) of one small tree, a shared `bin/` with
/// the gate script, and a `remote/` directory as the remote store.
struct World {
    tmp: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let tmp = tempfile::tempdir().unwrap();
        for name in ["a", "b"] {
            let repo = tmp.path().join(name);
            std::fs::create_dir_all(repo.join("src")).unwrap();
            git(&repo, &["init", "-q", "-b", "main"]);
            std::fs::write(repo.join("src/lib.txt"), "same content\n").unwrap();
            git(&repo, &["add", "-A"]);
            git(&repo, &["commit", "-q", "-m", "init"]);
        }
        let bin = tmp.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let count = tmp.path().join("runs.log");
        let gate = bin.join("gate");
        std::fs::write(
            &gate,
            format!("#!/bin/sh\necho \"$PWD\" >> '{}'\n", count.display()),
        )
        .unwrap();
        std::fs::set_permissions(&gate, std::fs::Permissions::from_mode(0o755)).unwrap();
        World { tmp }
    }
    fn repo(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }
    fn remote_dir(&self) -> PathBuf {
        self.tmp.path().join("remote")
    }
    fn url(&self) -> String {
        format!("file://{}", self.remote_dir().display())
    }
    /// How many times the gate ran in repository `name`.
    fn runs(&self, name: &str) -> usize {
        let dir = self.repo(name).canonicalize().unwrap();
        std::fs::read_to_string(self.tmp.path().join("runs.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| Path::new(l) == dir)
            .count()
    }
    fn set(&self, toolchain: &str) -> GateSet {
        let gate = self.tmp.path().join("bin/gate");
        let cfg = json!({"gates": [{"name": "check", "type": "test", "command": gate,
            "toolchain": ["sh", "-c", format!("echo {toolchain}")]}]});
        GateSet::resolve(Some(&cfg), &self.tmp.path().join("none"), &self.repo("a")).unwrap()
    }
    /// The repository's local cache with the remote attached.
    fn cache(
        &self,
        name: &str,
        mode: RemoteMode,
        secret: Option<&str>,
        timeout_ms: u64,
    ) -> GateCache {
        let req = RemoteRequest {
            url: Some(self.url()),
            mode: Some(mode),
        };
        let cfg = RemoteConfig {
            timeout_ms: Some(timeout_ms),
            ..Default::default()
        };
        let env = |k: &str| {
            (k == "CASCADE_CACHE_SECRET")
                .then(|| secret.map(str::to_string))
                .flatten()
        };
        let settings = RemoteSettings::resolve_with(&req, Some(&cfg), env)
            .unwrap()
            .unwrap();
        let remote = RemoteCache::connect(settings).unwrap();
        GateCache::open(&self.repo(name).join(".cascade")).with_remote(Some(remote))
    }
    /// Files in the remote store.
    fn objects(&self) -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else {
                    out.push(p);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.remote_dir(), &mut out);
        out
    }
}

/// Runs the gates of `repo` and flushes the uploads; returns the report
/// and the remote warnings.
fn run(world: &World, repo: &str, set: &GateSet, cache: &GateCache) -> (GateReport, Vec<String>) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let warnings = Arc::new(Mutex::new(Vec::new()));
    let w = warnings.clone();
    let opts = RunOptions {
        workdir: world.repo(repo),
        use_cache: true,
        ..RunOptions::default()
    };
    let report = rt.block_on(async {
        let on_event = move |e: GateEvent| {
            if let GateEvent::RemoteWarning { message } = e {
                w.lock().unwrap().push(message);
            }
        };
        let r = run_gates(set, &opts, cache, on_event, &CancelToken::new()).await;
        cache.flush_remote(None).await;
        r
    });
    // A backend thread stuck on a blocked file must not hold the test.
    rt.shutdown_background();
    let w = warnings.lock().unwrap().clone();
    (report, w)
}

#[test]
fn one_repository_publishes_and_the_other_hits() {
    let w = World::new();
    let set = w.set("tc-1");
    let a = w.cache("a", RemoteMode::ReadWrite, Some(SECRET), 5000);
    let (r, _) = run(&w, "a", &set, &a);
    assert!(r.passed);
    assert_eq!(r.gates[0].cache, CacheSource::Miss);
    assert_eq!(w.runs("a"), 1);
    assert_eq!(w.objects().len(), 1, "a's pass is published");
    assert_eq!(a.stats().uploads, 1);
    // a has the result locally, but with a remote attached the run goes the
    // async way (fresh toolchain probes for shared verdicts).
    let opts = RunOptions {
        workdir: w.repo("a"),
        use_cache: true,
        ..RunOptions::default()
    };
    let prepared = cascade_gates::runner::prepare(&set, &opts);
    assert!(cascade_gates::runner::answer_from_cache(&set, &opts, prepared, &a, |_| {}).is_err());

    // b has never run the gate: the remote has it, so it does not run.
    let b = w.cache("b", RemoteMode::Read, Some(SECRET), 5000);
    let (r, warnings) = run(&w, "b", &set, &b);
    assert!(r.passed && r.gates[0].cached, "{:?}", r.gates[0]);
    assert_eq!(r.gates[0].cache, CacheSource::Remote);
    assert_eq!(w.runs("b"), 0);
    assert!(warnings.is_empty(), "{warnings:?}");
    // ... and it was copied locally: next time it is a local hit, even
    // without the remote.
    let b_local = GateCache::open(&w.repo("b").join(".cascade"));
    let (r, _) = run(&w, "b", &set, &b_local);
    assert_eq!(r.gates[0].cache, CacheSource::Local);
    assert_eq!(w.runs("b"), 0);
    let s = b_local.stats();
    assert_eq!((s.remote_hits, s.local_hits, s.misses), (1, 1, 0));
    assert!(
        s.bytes_downloaded > 0
            && s.remote_time_saved_ms == r.gates[0].original_duration_ms.unwrap()
    );
}

#[test]
fn a_tampered_entry_is_ignored_with_a_warning() {
    let w = World::new();
    let set = w.set("tc-1");
    let a = w.cache("a", RemoteMode::ReadWrite, Some(SECRET), 5000);
    run(&w, "a", &set, &a);
    // Someone with write access to the bucket but not the secret edits the
    // entry (a failing gate turned into a pass would look the same).
    let obj = w.objects().pop().unwrap();
    let text = std::fs::read_to_string(&obj).unwrap();
    std::fs::write(&obj, text.replace("\"duration_ms\":", "\"duration_ms\":1")).unwrap();

    let b = w.cache("b", RemoteMode::Read, Some(SECRET), 5000);
    let (r, warnings) = run(&w, "b", &set, &b);
    assert_eq!(r.gates[0].cache, CacheSource::Miss);
    assert_eq!(w.runs("b"), 1, "the gate ran for real");
    assert!(
        warnings.iter().any(|m| m.contains("wrongly signed")),
        "{warnings:?}"
    );
    let ex = b.explain();
    let note = ex[0].remote.as_ref().unwrap();
    assert_eq!((note.consulted, note.outcome.as_str()), (true, "rejected"));

    // A reader with another secret does not trust a genuine entry either.
    let w2 = World::new();
    let a = w2.cache("a", RemoteMode::ReadWrite, Some(SECRET), 5000);
    run(&w2, "a", &w2.set("tc-1"), &a);
    let b = w2.cache("b", RemoteMode::Read, Some("another secret"), 5000);
    let (r, _) = run(&w2, "b", &w2.set("tc-1"), &b);
    assert_eq!(r.gates[0].cache, CacheSource::Miss);
}

#[test]
fn read_only_mode_never_writes() {
    let w = World::new();
    let set = w.set("tc-1");
    let b = w.cache("b", RemoteMode::Read, Some(SECRET), 5000);
    let (r, _) = run(&w, "b", &set, &b);
    assert!(r.passed && r.gates[0].cache == CacheSource::Miss);
    assert_eq!(w.runs("b"), 1);
    assert!(w.objects().is_empty(), "{:?}", w.objects());
    assert_eq!(b.stats().uploads, 0);
    // The local cache still has it.
    let (r, _) = run(&w, "b", &set, &b);
    assert_eq!(r.gates[0].cache, CacheSource::Local);
}

#[test]
fn another_toolchain_misses_and_explain_says_the_remote_was_asked() {
    let w = World::new();
    let a = w.cache("a", RemoteMode::ReadWrite, Some(SECRET), 5000);
    run(&w, "a", &w.set("compiler 1.80"), &a);
    let b = w.cache("b", RemoteMode::Read, Some(SECRET), 5000);
    let (r, _) = run(&w, "b", &w.set("compiler 1.81"), &b);
    assert_eq!(r.gates[0].cache, CacheSource::Miss);
    assert_eq!(w.runs("b"), 1);
    let ex = b.explain();
    let note = ex[0].remote.as_ref().unwrap();
    assert_eq!((note.consulted, note.outcome.as_str()), (true, "not_found"));
    assert!(
        ex[0].reasons.iter().any(|r| r.contains("remote not found")),
        "{:?}",
        ex[0].reasons
    );
    // Locally, the toolchain change itself is named on the next miss.
    let (_, _) = run(&w, "a", &w.set("compiler 1.81"), &a);
    let ex = a.explain();
    assert!(
        ex[0].changed.contains(&"toolchain".to_string()),
        "{:?}",
        ex[0]
    );
}

#[test]
fn a_remote_that_never_answers_costs_the_timeout_and_the_gate_still_runs() {
    let w = World::new();
    let set = w.set("tc-1");
    let a = w.cache("a", RemoteMode::ReadWrite, Some(SECRET), 5000);
    run(&w, "a", &set, &a);
    // Replace the published entry with a FIFO nobody writes to: reading it
    // blocks forever, like a server that accepts and never answers.
    let obj = w.objects().pop().unwrap();
    std::fs::remove_file(&obj).unwrap();
    let c = std::ffi::CString::new(obj.to_string_lossy().as_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);

    let b = w.cache("b", RemoteMode::Read, Some(SECRET), 300);
    let (r, warnings) = run(&w, "b", &set, &b);
    assert!(r.passed, "a hanging remote never fails a gate");
    assert_eq!(r.gates[0].cache, CacheSource::Miss);
    assert_eq!(w.runs("b"), 1);
    assert!(
        warnings
            .iter()
            .any(|m| m.contains("no answer within 300ms")),
        "{warnings:?}"
    );
    let ex = b.explain();
    assert_eq!(ex[0].remote.as_ref().unwrap().outcome, "timeout");
    // Release the blocked reader thread.
    unsafe {
        let fd = libc::open(c.as_ptr(), libc::O_WRONLY | libc::O_NONBLOCK);
        if fd >= 0 {
            libc::close(fd);
        }
    }
}

#[test]
fn failures_kept_locally_are_never_published() {
    let w = World::new();
    let fail = w.tmp.path().join("bin/fail");
    std::fs::write(&fail, "#!/bin/sh\nexit 1\n").unwrap();
    std::fs::set_permissions(&fail, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = json!({"gates": [{"name": "lint", "type": "lint", "command": fail,
        "cache_failures": true, "toolchain": []}]});
    let set = GateSet::resolve(Some(&cfg), &w.tmp.path().join("none"), &w.repo("a")).unwrap();
    let a = w.cache("a", RemoteMode::ReadWrite, Some(SECRET), 5000);
    let (r, _) = run(&w, "a", &set, &a);
    assert!(!r.passed);
    let (r, _) = run(&w, "a", &set, &a);
    assert_eq!(r.gates[0].cache, CacheSource::Local, "kept locally");
    assert!(w.objects().is_empty(), "{:?}", w.objects());
}
