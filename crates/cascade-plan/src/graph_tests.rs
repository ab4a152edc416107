//! Unit tests of validation, batching and analysis.

use std::path::Path;

use serde_json::json;

use crate::*;

fn prd(stories: serde_json::Value) -> Prd {
    let text = json!({ "goal": "g", "stories": stories }).to_string();
    Prd::from_json(text.as_bytes(), Path::new("prd.json")).unwrap()
}

fn s(id: &str, deps: &[&str]) -> serde_json::Value {
    json!({"id": id, "title": format!("title {id}"), "dependencies": deps})
}

fn sp(id: &str, deps: &[&str], priority: &str) -> serde_json::Value {
    json!({"id": id, "title": id, "dependencies": deps, "priority": priority})
}

fn ids(v: &[&StoryId]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn batches_follow_dependencies_and_priority() {
    let p = prd(json!([
        sp("a", &[], "low"),
        sp("b", &[], "high"),
        sp("c", &["a"], "medium"),
        sp("d", &["a", "b"], "high"),
        sp("e", &[], "medium"),
        sp("f", &["c", "d"], "low"),
    ]));
    let plan = validate_prd(&p).unwrap();
    assert_eq!(
        plan.batches(),
        vec![vec!["b", "e", "a"], vec!["d", "c"], vec!["f"]]
    );
    assert_eq!(plan.node("f").unwrap().batch(), Some(2));
    assert_eq!(plan.batch_count(), 3);
}

#[test]
fn forward_references_are_legal() {
    let p = prd(json!([s("b", &["a"]), s("a", &[])]));
    let plan = validate_prd(&p).unwrap();
    assert_eq!(plan.batches(), vec![vec!["a"], vec!["b"]]);
}

#[test]
fn complete_stories_are_done_and_excluded() {
    let p = prd(json!([
        {"id": "a", "title": "A", "status": "completed"},
        {"id": "b", "title": "B", "dependencies": ["a"]},
        {"id": "c", "title": "C", "dependencies": ["b"], "status": "complete"},
        {"id": "d", "title": "D", "dependencies": ["c", "b"]},
    ]));
    let plan = validate_prd(&p).unwrap();
    assert_eq!(plan.batches(), vec![vec!["b"], vec!["d"]]);
    assert_eq!(plan.pending_len(), 2);
    assert_eq!(plan.node("a").unwrap().batch(), None);
    assert_eq!(plan.remaining_path_len("a"), Some(0));
    assert_eq!(plan.remaining_path_len("b"), Some(2));
    // The structural analysis still sees every story.
    let a = plan.analysis();
    assert_eq!(a.depth, vec![Some(0), Some(1), Some(2), Some(3)]);
}

#[test]
fn all_complete_gives_no_batches() {
    let p = prd(json!([{"id": "a", "title": "A", "status": "complete"}]));
    let plan = validate_prd(&p).unwrap();
    assert!(plan.batches().is_empty());
    assert!(plan.critical_path().is_empty());
}

#[test]
fn empty_plan_is_valid() {
    let plan = validate_prd(&prd(json!([]))).unwrap();
    assert!(plan.is_empty());
    assert!(plan.batches().is_empty());
    let a = plan.analysis();
    assert!(a.roots.is_empty() && a.critical_path.is_empty() && a.cycles.is_empty());
}

#[test]
fn node_views_for_schedulers() {
    let p = prd(json!([
        s("a", &[]),
        s("b", &["a"]),
        s("c", &["a"]),
        s("d", &["c"]),
        s("e", &[]),
    ]));
    let plan = validate_prd(&p).unwrap();
    let a = plan.node("a").unwrap();
    assert_eq!(ids(&a.dependents().collect::<Vec<_>>()), ["b", "c"]);
    assert_eq!(a.remaining_path_len(), 3);
    assert_eq!(plan.remaining_path_len("e"), Some(1));
    let d = plan.node_at(3);
    assert_eq!(ids(&d.dependencies().collect::<Vec<_>>()), ["c"]);
    assert_eq!(d.position(), 3);
    assert_eq!(ids(&plan.critical_path()), ["a", "c", "d"]);
    let order: Vec<String> = plan.nodes().map(|n| n.id().to_string()).collect();
    assert_eq!(order, ["a", "b", "c", "d", "e"]);
}

#[test]
fn weights_from_numeric_context_estimate() {
    let p = prd(json!([
        {"id": "a", "title": "A", "context_estimate": 1},
        {"id": "b", "title": "B", "dependencies": ["a"], "context_estimate": 1},
        {"id": "c", "title": "C", "dependencies": ["a"], "context_estimate": "10"},
        {"id": "d", "title": "D", "dependencies": ["b"], "context_estimate": "large"},
    ]));
    let plan = validate_prd(&p).unwrap();
    assert_eq!(ids(&plan.critical_path()), ["a", "c"]);
    assert_eq!(plan.remaining_path_len("a"), Some(11));
    assert_eq!(plan.analysis().critical_path_len, 11);
}

#[test]
fn analysis_roots_bottlenecks_orphans() {
    let p = prd(json!([
        s("a", &[]),
        s("b", &["a"]),
        s("c", &["a"]),
        s("d", &["b", "c"]),
        s("e", &["b"]),
        s("lonely", &[]),
    ]));
    let plan = validate_prd(&p).unwrap();
    let a = plan.analysis();
    assert_eq!(a.roots, [0, 5]);
    assert_eq!(a.orphans, [5]);
    assert_eq!(a.bottlenecks, [0, 1]);
    assert_eq!(a.critical_path, [0, 1, 3]);
    assert_eq!(a.critical_path_len, 3);
    assert_eq!(a.max_depth(), Some(2));
    assert!(a.cycles.is_empty());
}

#[test]
fn duplicate_dependencies_are_merged() {
    let p = prd(json!([s("a", &[]), s("b", &["a", "a", " a "])]));
    let plan = validate_prd(&p).unwrap();
    assert_eq!(plan.node("b").unwrap().dependency_positions(), &[0]);
    assert_eq!(plan.node("a").unwrap().dependent_positions(), &[1]);
}

#[test]
fn every_problem_is_reported() {
    let p = prd(json!([
        {"title": "no id"},
        {"id": "", "title": "empty id"},
        {"id": "bad id", "title": "x"},
        {"id": "a", "title": ""},
        {"id": "a", "title": "dup"},
        {"id": "b", "title": "B", "dependencies": ["nope", "b"]},
        {"id": "c", "title": "C", "dependencies": ["d"]},
        {"id": "d", "title": "D", "dependencies": ["e"]},
        {"id": "e", "title": "E", "dependencies": ["c"]},
    ]));
    let err = validate_prd(&p).unwrap_err();
    assert_eq!(
        err.problems(),
        &[
            Problem::MissingId { index: 0 },
            Problem::EmptyId { index: 1 },
            Problem::InvalidId {
                index: 2,
                id: "bad id".into(),
                reason: "use only ASCII letters, digits, '-', '_' and '.'"
            },
            Problem::EmptyTitle {
                index: 3,
                id: "a".into()
            },
            Problem::DuplicateId {
                id: "a".into(),
                first: 3,
                second: 4
            },
            Problem::UnknownDependency {
                id: "b".into(),
                dependency: "nope".into()
            },
            Problem::SelfDependency { id: "b".into() },
            Problem::Cycle {
                path: vec!["c".into(), "d".into(), "e".into(), "c".into()],
                others: vec![]
            },
        ]
    );
    let text = err.to_string();
    assert!(text.starts_with("invalid PRD (8 problems):"), "{text}");
    assert!(text.contains("c -> d -> e -> c"), "{text}");
    assert!(
        text.contains("'b' depends on unknown story 'nope'"),
        "{text}"
    );
    assert!(err.has_cycle());
}

#[test]
fn cycle_path_is_closed_and_starts_at_first_story() {
    // story-001 -> story-003 -> story-002 -> story-001 (the example)
    let p = prd(json!([
        s("story-001", &["story-003"]),
        s("story-002", &["story-001"]),
        s("story-003", &["story-002"]),
        s("story-004", &["story-001"]),
    ]));
    let err = validate_prd(&p).unwrap_err();
    assert_eq!(err.messages().len(), 1);
    assert!(
        err.messages()[0].contains("story-001 -> story-003 -> story-002 -> story-001"),
        "{}",
        err.messages()[0]
    );
}

#[test]
fn two_cycles_and_a_tangle() {
    let p = prd(json!([
        s("a", &["b"]),
        s("b", &["a", "c"]),
        s("c", &["a"]),
        s("x", &["y"]),
        s("y", &["x"]),
        s("z", &["x"]),
    ]));
    let g = DepGraph::from_prd(&p);
    let a = Analysis::of(&g);
    assert_eq!(a.cycles.len(), 2);
    assert_eq!(a.cycles[0].path, [0, 1, 0]);
    assert_eq!(a.cycles[0].others, [2]);
    assert_eq!(a.cycles[1].path, [3, 4, 3]);
    assert_eq!(a.depth[5], None, "behind a cycle has no depth");
}

#[test]
fn long_cycle_does_not_overflow() {
    let n = 50_000;
    let stories: Vec<_> = (0..n)
        .map(|i| s(&format!("s{i}"), &[&format!("s{}", (i + 1) % n)]))
        .collect();
    let err = validate_prd(&prd(json!(stories))).unwrap_err();
    match &err.problems()[0] {
        Problem::Cycle { path, .. } => assert_eq!(path.len(), n + 1),
        other => panic!("{other:?}"),
    }
}

#[test]
fn deep_chain_batches() {
    let n = 20_000;
    let stories: Vec<_> = (0..n)
        .map(|i| {
            if i == 0 {
                s("s0", &[])
            } else {
                s(&format!("s{i}"), &[&format!("s{}", i - 1)])
            }
        })
        .collect();
    let plan = validate_prd(&prd(json!(stories))).unwrap();
    assert_eq!(plan.batch_count(), n);
    assert_eq!(plan.critical_path().len(), n);
}

#[test]
fn mega_plan_validation() {
    let text = json!({
        "goal": "g",
        "features": [
            {"id": "feature-001", "name": "user-auth", "title": "Auth"},
            {"id": "feature-002", "name": "Bad Name", "title": "x", "dependencies": ["user-auth"]},
            {"id": "feature-003", "name": "user-auth", "title": "y", "dependencies": ["feature-009"]},
            {"id": "feature-004", "name": "", "title": "z"},
        ]
    })
    .to_string();
    let m = MegaPlan::from_json(text.as_bytes(), Path::new("mega-plan.json")).unwrap();
    let err = validate_mega(&m).unwrap_err();
    let msgs = err.messages();
    assert_eq!(msgs.len(), 4, "{msgs:#?}");
    assert!(msgs[0].contains("invalid name 'Bad Name'"));
    assert!(msgs[1].contains("same name 'user-auth'"));
    assert!(msgs[2].contains("has no name"));
    assert!(msgs[3].contains("feature 'feature-003' depends on unknown feature 'feature-009'"));
    assert!(err
        .to_string()
        .starts_with("invalid mega-plan (4 problems):"));
}

#[test]
fn mega_plan_features_need_a_title_like_stories() {
    let text = json!({
        "features": [
            {"id": "f1", "name": "core", "title": "  "},
            {"id": "f2", "name": "api"},
            {"id": "f3", "name": "ui", "title": "UI"},
        ]
    })
    .to_string();
    let m = MegaPlan::from_json(text.as_bytes(), Path::new("mega-plan.json")).unwrap();
    let msgs = validate_mega(&m).unwrap_err().messages();
    assert_eq!(
        msgs,
        vec![
            "feature 'f1' has an empty title".to_string(),
            "feature 'f2' has an empty title".to_string()
        ]
    );
}

#[test]
fn mega_plan_batches_by_id_or_name() {
    let text = json!({
        "features": [
            {"id": "f3", "name": "api", "title": "t", "dependencies": ["f1", "ui"], "priority": "high"},
            {"id": "f1", "name": "core", "title": "t"},
            {"id": "f2", "name": "ui", "title": "t", "dependencies": ["core"]},
            {"id": "f4", "name": "docs", "title": "t", "status": "complete"},
        ]
    })
    .to_string();
    let m = MegaPlan::from_json(text.as_bytes(), Path::new("mega-plan.json")).unwrap();
    let plan = validate_mega(&m).unwrap();
    assert_eq!(plan.batches(), vec![vec!["f1"], vec!["f2"], vec!["f3"]]);
}

#[test]
fn feature_names() {
    for ok in ["a", "user-auth", "0x", "a-b-c-"] {
        assert!(validate::is_feature_name(ok), "{ok}");
    }
    for bad in ["", "-a", "A", "a_b", "a b", "é"] {
        assert!(!validate::is_feature_name(bad), "{bad}");
    }
}

#[test]
fn no_check_graph_reports_unknown_and_self() {
    let p = prd(json!([s("a", &["a", "ghost"]), s("b", &["a"])]));
    let g = DepGraph::from_prd(&p);
    assert_eq!(g.unknown_dependencies().collect::<Vec<_>>(), [(0, "ghost")]);
    assert_eq!(g.self_dependencies().collect::<Vec<_>>(), [0]);
    let a = Analysis::of(&g);
    assert_eq!(a.cycles.len(), 1);
    assert!(a.cycles[0].is_self_loop());
    assert_eq!(a.depth, [None, None]);
}

#[test]
fn ids_with_spaces_are_invalid_but_dependencies_are_trimmed() {
    let p = prd(json!([s(" a", &[]), s("b", &[" b2 "]), s("b2", &[])]));
    let err = validate_prd(&p).unwrap_err();
    assert_eq!(
        err.problems(),
        &[Problem::InvalidId {
            index: 0,
            id: " a".into(),
            reason: "use only ASCII letters, digits, '-', '_' and '.'"
        }]
    );
    let p = prd(json!([s("b", &[" b2 "]), s("b2", &[])]));
    let plan = validate_prd(&p).unwrap();
    assert_eq!(plan.batches(), vec![vec!["b2"], vec!["b"]]);
    assert_eq!(plan.position(" b2"), Some(1));
}
