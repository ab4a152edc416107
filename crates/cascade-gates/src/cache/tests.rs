//! Cache tests: storage, TTL, bounds, explain, and failing writes.

use super::*;
use crate::report::GateResult;
use cascade_git::fingerprint::Oid;

fn parts(fp: &str) -> KeyParts {
    KeyParts {
        fingerprint: fp.into(),
        gate: "test".into(),
        command: "sh".into(),
        args: vec!["-c".into(), "true".into()],
        working_dir: ".".into(),
        env: BTreeMap::from([("A".to_string(), "1".to_string())]),
        inputs: vec![],
        toolchain: String::new(),
    }
}

fn result() -> GateResult {
    GateResult {
        name: "test".into(),
        passed: true,
        required: true,
        cached: false,
        cache: Default::default(),
        skipped: false,
        skip_reason: None,
        flaky: false,
        tool_missing: false,
        timed_out: false,
        duration_ms: 1234,
        original_duration_ms: None,
        command: "sh -c true".into(),
        working_dir: ".".into(),
        outcome: Some("exit code 0".into()),
        errors: vec![],
        output_excerpt: String::new(),
        census: None,
    }
}

fn file(path: &str, byte: u8) -> FileId {
    FileId {
        path: path.into(),
        mode: 0o100644,
        oid: Oid::from_bytes(&[byte; 20]).unwrap(),
    }
}

#[test]
fn key_depends_on_every_part() {
    let base = parts("f");
    let mut seen = std::collections::HashSet::new();
    seen.insert(base.key());
    let mut p = base.clone();
    p.fingerprint = "g".into();
    assert!(seen.insert(p.key()));
    let mut p = base.clone();
    p.command = "bash".into();
    assert!(seen.insert(p.key()));
    let mut p = base.clone();
    p.args.push("x".into());
    assert!(seen.insert(p.key()));
    let mut p = base.clone();
    p.env.insert("B".into(), "2".into());
    assert!(seen.insert(p.key()));
    let mut p = base.clone();
    p.working_dir = "sub".into();
    assert!(seen.insert(p.key()));
    let mut p = base.clone();
    p.inputs.push("src/**".into());
    assert!(seen.insert(p.key()));
    let mut p = base.clone();
    p.toolchain = "rustc 1.80.0".into();
    assert!(seen.insert(p.key()));
    let mut q = base.clone();
    q.toolchain = "rustc 1.81.0".into();
    assert!(seen.insert(q.key()));
    // Field boundaries are unambiguous.
    let mut a = base.clone();
    a.args = vec!["ab".into()];
    let mut b = base.clone();
    b.args = vec!["a".into(), "b".into()];
    assert_ne!(a.key(), b.key());
}

#[test]
fn store_then_lookup_across_instances_with_stats() {
    let tmp = tempfile::tempdir().unwrap();
    let files = vec![file("a", 1)];
    let c1 = GateCache::open(tmp.path());
    assert!(c1.lookup(&parts("f"), &files).is_none());
    c1.store(&parts("f"), &result());
    // Another process (a fresh instance) sees it.
    let c2 = GateCache::open(tmp.path());
    let hit = c2.lookup(&parts("f"), &files).unwrap();
    assert!(hit.cached);
    assert_eq!(hit.original_duration_ms, Some(1234));
    let s = c2.stats();
    assert_eq!(
        (s.entries, s.hits, s.misses, s.time_saved_ms),
        (1, 1, 1, 1234)
    );
    assert_eq!(c2.load_all(), 1);
    assert_eq!(c2.clear().unwrap(), 1);
    assert!(GateCache::open(tmp.path())
        .lookup(&parts("f"), &files)
        .is_none());
}

#[test]
fn ttl_expires_and_bounds_prune_oldest() {
    let tmp = tempfile::tempdir().unwrap();
    let c = GateCache::open(tmp.path()).with_limits(
        2,
        DEFAULT_MAX_AGE,
        Some(Duration::from_secs(3600)),
    );
    c.store(&parts("1"), &result());
    // Make entry 1 old (beyond the TTL and the LRU's oldest).
    let p1 = c.entry_path(&parts("1").key()).unwrap();
    let old = SystemTime::now() - Duration::from_secs(7200);
    std::fs::File::options()
        .append(true)
        .open(&p1)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let mut bytes: CacheEntry = serde_json::from_slice(&std::fs::read(&p1).unwrap()).unwrap();
    bytes.created = now_secs() - 7200;
    std::fs::write(&p1, serde_json::to_vec(&bytes).unwrap()).unwrap();
    std::fs::File::options()
        .append(true)
        .open(&p1)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let fresh = GateCache::open(tmp.path()).with_limits(
        2,
        DEFAULT_MAX_AGE,
        Some(Duration::from_secs(3600)),
    );
    assert!(fresh.get(&parts("1").key()).is_none(), "expired by TTL");
    fresh.store(&parts("2"), &result());
    fresh.store(&parts("3"), &result());
    fresh.prune();
    assert_eq!(fresh.stats().entries, 2);
    assert!(!p1.exists(), "least recently used entry went first");
}

#[test]
fn explain_names_files_command_and_env() {
    let tmp = tempfile::tempdir().unwrap();
    let c = GateCache::open(tmp.path());
    let v1 = vec![file("a.rs", 1), file("b.rs", 2), file("c.rs", 3)];
    assert!(c.lookup(&parts("f1"), &v1).is_none());
    let first = c.explain();
    assert_eq!(first.len(), 1);
    assert!(first[0].reasons[0].contains("first lookup"));
    c.store(&parts("f1"), &result());
    assert!(c.lookup(&parts("f1"), &v1).is_some());

    let v2 = vec![file("a.rs", 1), file("b.rs", 9), file("d.rs", 4)];
    assert!(c.lookup(&parts("f2"), &v2).is_none());
    let ex = &c.explain()[0];
    assert_eq!(ex.changed, vec!["files"]);
    assert_eq!(ex.files_modified, vec!["b.rs"]);
    assert_eq!(ex.files_added, vec!["d.rs"]);
    assert_eq!(ex.files_removed, vec!["c.rs"]);

    let mut p = parts("f2");
    p.command = "bash".into();
    p.env.insert("A".into(), "2".into());
    assert!(c.lookup(&p, &v2).is_none());
    let ex = &c.explain()[0];
    assert_eq!(ex.changed, vec!["command", "env"]);
    assert!(
        ex.reasons.iter().any(|r| r.contains("`sh` -> `bash`")),
        "{:?}",
        ex.reasons
    );
    assert!(
        ex.reasons.iter().any(|r| r == "env changed: A"),
        "{:?}",
        ex.reasons
    );

    assert!(c.lookup(&p, &v2).is_none());
    assert!(c.explain()[0].reasons[0].contains("nothing changed"));

    // A hit afterwards: the miss is history, explain no longer reports it.
    c.store(&p, &result());
    assert!(c.lookup(&p, &v2).is_some());
    assert!(c.explain().is_empty(), "{:?}", c.explain());
    // A second gate's miss is its own.
    let mut other = parts("f2");
    other.gate = "lint".into();
    assert!(c.lookup(&other, &v2).is_none());
    let misses = c.explain();
    assert_eq!(misses.len(), 1);
    assert_eq!(misses[0].gate, "lint");
}

#[test]
fn unwritable_cache_never_fails() {
    let tmp = tempfile::tempdir().unwrap();
    // `gate-cache` is a file: every write fails.
    std::fs::write(tmp.path().join("gate-cache"), "x").unwrap();
    let c = GateCache::open(tmp.path());
    assert!(c.lookup(&parts("f"), &[]).is_none());
    c.store(&parts("f"), &result());
    assert!(c.write_errors() > 0);
    // The in-memory copy still answers within this process.
    assert!(c.lookup(&parts("f"), &[]).is_some());
}
