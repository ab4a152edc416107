//! Unit tests of `paths`: project ids against known values, the data
//! directory from the environment, manifest checks, discovery and the
//! output directory of `cascade plan`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::*;

// Expected hashes were computed outside Rust with coreutils, on the path
// already lowercased with backslashes turned into slashes, e.g.
//   printf '%s' '/home/dev/my project' | sha256sum | cut -c1-8   -> aaeeac88
// Expected names were worked out by hand from the rules in `sanitize_name`.

#[test]
fn project_id_with_spaces_and_uppercase() {
    // printf '%s' '/home/dev/my project' | sha256sum -> aaeeac88...
    assert_eq!(
        project_id(Path::new("/home/dev/My Project")),
        "my-project-aaeeac88"
    );
    // printf '%s' '/users/dev/myapp' | sha256sum -> ad6e84af...
    assert_eq!(project_id(Path::new("/Users/Dev/MyApp")), "myapp-ad6e84af");
}

#[test]
fn project_id_with_unicode() {
    // Non-ASCII letters are dropped from the name, but hashed in the path:
    // printf '%s' '/home/dev/café ünïcode 项目' | sha256sum -> 53e18034...
    assert_eq!(
        project_id(Path::new("/home/dev/Café Ünïcode 项目")),
        "caf-ncode-53e18034"
    );
    // Nothing left of the name: "project".
    // printf '%s' '/tmp/项目' | sha256sum -> 8b9f6db8...
    assert_eq!(project_id(Path::new("/tmp/项目")), "project-8b9f6db8");
}

#[test]
fn project_id_over_fifty_characters() {
    // printf '%s' '/srv/work/abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz0123456789' | sha256sum -> 09ac4d18...
    let id = project_id(Path::new(
        "/srv/work/abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz0123456789",
    ));
    assert_eq!(
        id,
        "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwx-09ac4d18"
    );
    // The cut comes after stripping, so it may end in a hyphen (as in Plan Cascade):
    // printf '%s' '/srv/work/abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvw x' | sha256sum -> bbe73764...
    assert_eq!(
        project_id(Path::new(
            "/srv/work/abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvw x"
        )),
        "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvw--bbe73764"
    );
}

#[test]
fn project_id_collapses_and_strips_hyphens() {
    // printf '%s' '/srv/--a   b__c--' | sha256sum -> 3e6542b8...
    assert_eq!(
        project_id(Path::new("/srv/--a   b__c--")),
        "a-b__c-3e6542b8"
    );
}

#[test]
fn project_id_of_a_windows_path_with_backslashes() {
    // Hashed as 'c:/users/dev/my project':
    // printf '%s' 'c:/users/dev/my project' | sha256sum -> e5a5378a...
    assert_eq!(
        project_id_from("My Project", r"C:\Users\Dev\My Project"),
        "my-project-e5a5378a"
    );
    // The same directory written with slashes or other case: the same id.
    assert_eq!(
        project_id_from("My Project", "c:/USERS/dev/My Project"),
        "my-project-e5a5378a"
    );
}

#[cfg(windows)]
#[test]
fn project_id_of_a_windows_path_object() {
    assert_eq!(
        project_id(Path::new(r"C:\Users\Dev\My Project")),
        "my-project-e5a5378a"
    );
}

#[test]
fn sanitize_name_rules() {
    assert_eq!(sanitize_name("My Project"), "my-project");
    assert_eq!(sanitize_name("a - b"), "a-b");
    assert_eq!(sanitize_name("!!!"), "project");
    assert_eq!(sanitize_name(""), "project");
    assert_eq!(sanitize_name("x.y_z"), "xy_z");
    assert_eq!(sanitize_name(&"A".repeat(80)), "a".repeat(50));
}

fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| OsString::from(v))
    }
}

#[cfg(not(windows))]
#[test]
fn data_home_from_home() {
    assert_eq!(
        data_home_with(&env(&[("HOME", "/home/u")])),
        Some(PathBuf::from("/home/u/.plan-cascade"))
    );
    // APPDATA means nothing outside Windows.
    assert_eq!(data_home_with(&env(&[("APPDATA", "/x")])), None);
    assert_eq!(data_home_with(&env(&[("HOME", "")])), None);
}

#[cfg(windows)]
#[test]
fn data_home_from_appdata() {
    assert_eq!(
        data_home_with(&env(&[("APPDATA", r"C:\Users\u\AppData\Roaming")])),
        Some(PathBuf::from(r"C:\Users\u\AppData\Roaming").join("plan-cascade"))
    );
}

/// A project root and a data home in one temp dir; returns (tmp, root, home).
fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("My Repo");
    let home = tmp.path().join("home/.plan-cascade");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let root = root.canonicalize().unwrap();
    (tmp, root, home)
}

fn data_dir_of(root: &Path, home: &Path) -> PathBuf {
    let dir = home.join(project_id(root));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn manifest(dir: &Path, root: &str) {
    let m = serde_json::json!({"project_root": root, "project_id": "x",
        "created_at": "2026-01-01T00:00:00Z", "platform": "linux"});
    std::fs::write(dir.join(MANIFEST_FILE), m.to_string()).unwrap();
}

#[test]
fn locate_without_data_dir_is_none_mode() {
    let (_t, root, home) = setup();
    let p = ProjectPaths::locate(&root, Some(&home));
    assert_eq!(p.state, DataDirState::Missing);
    assert_eq!(p.mode(&root), PathMode::None);
    assert_eq!(p.find_plan(PlanKind::Prd, &root, None), None);
    assert!(p.project_id.starts_with("my-repo-"));
    let none = ProjectPaths::locate(&root, None);
    assert_eq!(none.state, DataDirState::NoHome);
    assert_eq!(none.data_dir, None);
}

#[test]
fn discovery_in_new_mode_uses_the_data_dir() {
    let (_t, root, home) = setup();
    let dir = data_dir_of(&root, &home);
    manifest(&dir, &root.to_string_lossy());
    std::fs::write(dir.join(PRD_FILE), "{}").unwrap();
    let p = ProjectPaths::locate(&root, Some(&home));
    assert!(matches!(p.state, DataDirState::Ours { manifest: Some(_) }));
    assert_eq!(p.mode(&root), PathMode::New);
    let found = p.find_plan(PlanKind::Prd, &root, None).unwrap();
    assert_eq!(found.path, dir.join(PRD_FILE));
    assert_eq!(found.source, PlanSource::DataDir);
    assert!(found.warnings.is_empty());
    // No mega-plan in either place.
    assert_eq!(p.find_plan(PlanKind::Mega, &root, None), None);
    // A subdirectory of the project finds the same file.
    let sub = root.join("src");
    std::fs::create_dir(&sub).unwrap();
    let found = p.find_plan(PlanKind::Prd, &sub, None).unwrap();
    assert_eq!(found.path, dir.join(PRD_FILE));
}

#[test]
fn discovery_in_legacy_mode_and_the_flag() {
    let (_t, root, home) = setup();
    std::fs::write(root.join(PRD_FILE), "{}").unwrap();
    let p = ProjectPaths::locate(&root, Some(&home));
    assert_eq!(p.mode(&root), PathMode::Legacy);
    let found = p.find_plan(PlanKind::Prd, &root, None).unwrap();
    assert_eq!(found.path, root.join(PRD_FILE));
    assert_eq!(found.source, PlanSource::Project);
    let flag = p
        .find_plan(PlanKind::Prd, &root, Some(Path::new("plans/x.json")))
        .unwrap();
    assert_eq!(flag.path, PathBuf::from("plans/x.json"));
    assert_eq!(flag.source, PlanSource::Flag);
}

#[test]
fn both_places_differ_project_wins_with_a_warning() {
    let (_t, root, home) = setup();
    let dir = data_dir_of(&root, &home);
    std::fs::write(root.join(PRD_FILE), "{\"goal\": \"a\"}").unwrap();
    std::fs::write(dir.join(PRD_FILE), "{\"goal\": \"b\"}").unwrap();
    let p = ProjectPaths::locate(&root, Some(&home));
    let found = p.find_plan(PlanKind::Prd, &root, None).unwrap();
    assert_eq!(found.source, PlanSource::Project);
    assert_eq!(
        found.warnings,
        vec![PathWarning::BothDiffer {
            used: root.join(PRD_FILE),
            ignored: dir.join(PRD_FILE)
        }]
    );
    let text = found.warnings[0].to_string();
    assert!(text.contains(&root.join(PRD_FILE).display().to_string()));
    assert!(text.contains(&dir.join(PRD_FILE).display().to_string()));
    // The same contents: no warning.
    std::fs::write(dir.join(PRD_FILE), "{\"goal\": \"a\"}").unwrap();
    let found = p.find_plan(PlanKind::Prd, &root, None).unwrap();
    assert!(found.warnings.is_empty());
}

#[test]
fn a_manifest_naming_another_root_keeps_the_data_dir_out() {
    let (_t, root, home) = setup();
    let dir = data_dir_of(&root, &home);
    manifest(&dir, "/somewhere/else");
    std::fs::write(dir.join(PRD_FILE), "{}").unwrap();
    let p = ProjectPaths::locate(&root, Some(&home));
    assert_eq!(
        p.state,
        DataDirState::Foreign {
            manifest_root: "/somewhere/else".into()
        }
    );
    assert_eq!(p.usable_data_dir(), None);
    assert_eq!(p.mode(&root), PathMode::None);
    assert_eq!(p.find_plan(PlanKind::Prd, &root, None), None);
    assert!(matches!(
        p.warnings.as_slice(),
        [PathWarning::ForeignManifest { .. }]
    ));
    // Not used for output either.
    assert_eq!(p.plan_output(None).place, OutputPlace::Project);
}

#[test]
fn manifest_root_in_other_case_or_separators_is_ours() {
    let (_t, root, home) = setup();
    let dir = data_dir_of(&root, &home);
    let text = format!("{}/", root.to_string_lossy().to_uppercase());
    manifest(&dir, &text);
    let p = ProjectPaths::locate(&root, Some(&home));
    assert!(
        matches!(p.state, DataDirState::Ours { .. }),
        "{:?}",
        p.state
    );
}

#[test]
fn an_unreadable_manifest_warns_and_keeps_the_dir() {
    let (_t, root, home) = setup();
    let dir = data_dir_of(&root, &home);
    std::fs::write(dir.join(MANIFEST_FILE), "{not json").unwrap();
    let p = ProjectPaths::locate(&root, Some(&home));
    assert_eq!(p.usable_data_dir(), Some(dir.as_path()));
    assert!(matches!(
        p.warnings.as_slice(),
        [PathWarning::UnreadableManifest { .. }]
    ));
    // The file, line and column of the problem.
    let text = p.warnings[0].to_string();
    let at = format!("{}:1:2: ", dir.join(MANIFEST_FILE).display());
    assert!(text.starts_with(&at), "{text}");
    // Never rewritten.
    assert_eq!(
        std::fs::read_to_string(dir.join(MANIFEST_FILE)).unwrap(),
        "{not json"
    );
}

#[test]
fn find_either_prefers_project_files() {
    let (_t, root, home) = setup();
    let dir = data_dir_of(&root, &home);
    std::fs::write(dir.join(PRD_FILE), "{}").unwrap();
    std::fs::write(root.join(MEGA_FILE), "{}").unwrap();
    let p = ProjectPaths::locate(&root, Some(&home));
    let f = p.find_either(&root, None, None).unwrap();
    assert_eq!((f.kind, f.source), (PlanKind::Mega, PlanSource::Project));
    std::fs::remove_file(root.join(MEGA_FILE)).unwrap();
    let f = p.find_either(&root, None, None).unwrap();
    assert_eq!((f.kind, f.source), (PlanKind::Prd, PlanSource::DataDir));
    std::fs::remove_file(dir.join(PRD_FILE)).unwrap();
    std::fs::write(dir.join(MEGA_FILE), "{}").unwrap();
    let f = p.find_either(&root, None, None).unwrap();
    assert_eq!((f.kind, f.source), (PlanKind::Mega, PlanSource::DataDir));
    let f = p
        .find_either(&root, None, Some(Path::new("m.json")))
        .unwrap();
    assert_eq!((f.kind, f.source), (PlanKind::Mega, PlanSource::Flag));
}

#[test]
fn plan_output_follows_the_mode() {
    let (_t, root, home) = setup();
    let p = ProjectPaths::locate(&root, Some(&home));
    let out = p.plan_output(None);
    assert_eq!(out.place, OutputPlace::Project);
    assert_eq!(out.plan_dir, root);
    assert_eq!(out.design_doc_dir, root);
    assert!(out.describe().contains("no Plan Cascade data directory"));

    let dir = data_dir_of(&root, &home);
    let p = ProjectPaths::locate(&root, Some(&home));
    let out = p.plan_output(None);
    assert_eq!(out.place, OutputPlace::DataDir);
    assert_eq!(out.plan_dir, dir);
    assert_eq!(
        out.design_doc_dir, root,
        "design_doc.json stays in the project"
    );

    let out = p.plan_output(Some(Path::new("/tmp/plans")));
    assert_eq!(out.place, OutputPlace::Flag);
    assert_eq!(out.plan_dir, PathBuf::from("/tmp/plans"));
    assert_eq!(out.design_doc_dir, PathBuf::from("/tmp/plans"));
}

#[cfg(unix)]
#[test]
fn locate_resolves_symlinks_like_plan_cascade() {
    let (tmp, root, home) = setup();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&root, &link).unwrap();
    let via_link = ProjectPaths::locate(&link, Some(&home));
    let direct = ProjectPaths::locate(&root, Some(&home));
    assert_eq!(via_link.project_id, direct.project_id);
    assert_eq!(via_link.project_root, root);
}
