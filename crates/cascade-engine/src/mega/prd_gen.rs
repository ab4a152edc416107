//! Writing a missing feature PRD with the PRD agent (planning phase).
//!
//! The prompt carries the mega-plan's goal, the feature, the features it builds
//! on and the project's design doc, plus the PRD schema and the path the agent
//! must write to (also given as `CASCADE_PRD_PATH`). The agent may also write
//! the feature's design doc next to the PRD (`CASCADE_DESIGN_DOC_PATH`): it
//! names the project's `design_doc.json` as `metadata.parent_design_doc`, so
//! story prompts inherit the project's context, and its `story_mappings` are
//! checked like those of `cascade plan`. What the agent wrote
//! is validated with cascade-plan; on problems the agent is asked again with the
//! exact validation errors and what it wrote, up to [`MAX_FIX_ROUNDS`] times,
//! then the feature fails with every remaining problem listed.
//!
//! The loop itself is cascade-planning's [`make_valid`], the one
//! implementation of "ask an agent for a plan file and make it valid" that
//! `cascade plan` uses too; this module supplies the feature prompt. The
//! agent call is behind [`PrdAuthor`] so the loop is tested without
//! processes; the runner plugs in the cascade-agents executor.

use std::path::{Path, PathBuf};

use cascade_planning::generator::{self as shared, make_valid, Job, PlanAuthor, Start};

pub use cascade_planning::generator::{AuthorError, GenProgress};

/// How many times the agent is asked to fix an invalid PRD (after the first try).
pub const MAX_FIX_ROUNDS: u32 = 2;
/// Largest design doc (bytes) copied into the prompt.
const MAX_DESIGN_DOC: usize = 24 * 1024;

/// What the prompt says about the feature (taken from the mega-plan).
#[derive(Debug, Clone, Default)]
pub struct FeatureBrief {
    pub name: String,
    pub title: String,
    pub description: String,
    pub priority: String,
    /// Names of the features this one depends on (already merged).
    pub dependencies: Vec<String>,
}

/// Everything needed to build the PRD prompt.
#[derive(Debug, Clone)]
pub struct PrdRequest {
    /// The mega-plan's goal.
    pub goal: String,
    pub feature: FeatureBrief,
    /// Titles of the features this one depends on, for context.
    pub dependency_titles: Vec<(String, String)>,
    /// The project's design doc, if one was found: (path shown, text).
    pub design_doc: Option<(PathBuf, String)>,
    /// The project's `design_doc.json` (absolute), which a feature design doc
    /// names as its parent.
    pub parent_design_doc: Option<PathBuf>,
    /// Where the agent must write the PRD (the feature design doc goes beside it).
    pub prd_path: PathBuf,
}

impl PrdRequest {
    /// `design_doc.json` next to the PRD.
    pub fn design_doc_path(&self) -> PathBuf {
        self.prd_path.with_file_name("design_doc.json")
    }
}

/// A failed attempt's details, for the fix prompt.
#[derive(Debug, Clone)]
pub struct FixContext {
    /// 1-based attempt number of the coming call.
    pub attempt: u32,
    pub max_attempts: u32,
    /// Every problem found, verbatim.
    pub problems: Vec<String>,
    /// What the agent wrote last time (possibly truncated), if anything.
    pub previous: Option<String>,
}

/// Runs the PRD agent once.
pub trait PrdAuthor {
    /// Runs the agent with `prompt`, which must write the PRD to `prd_path`.
    /// `Err` when the agent could not run or exited unsuccessfully; the text
    /// says why. `AuthorError::Unavailable` stops the loop at once.
    fn write_prd(
        &self,
        attempt: u32,
        prompt: &str,
        prd_path: &Path,
    ) -> impl std::future::Future<Output = Result<(), AuthorError>> + Send;
}

/// The outcome of checking what the agent wrote: number of stories, or problems.
pub type PrdCheck = shared::PlanCheck;

/// A valid PRD was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    pub path: PathBuf,
    pub stories: usize,
    /// Agent calls it took (1 = first try).
    pub attempts: u32,
}

/// The PRD could not be produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerationFailed {
    pub attempts: u32,
    pub cancelled: bool,
    /// One paragraph: what happened, and the last problems verbatim.
    pub message: String,
}

/// The feature's PRD author as the shared loop's author: the prompt is
/// built here (with the fix section on later attempts).
struct FeatureAuthor<'a, A> {
    author: &'a A,
    request: &'a PrdRequest,
}

impl<A: PrdAuthor + Sync> PlanAuthor for FeatureAuthor<'_, A> {
    async fn write(
        &self,
        attempt: u32,
        fix: Option<&shared::FixContext>,
    ) -> Result<(), AuthorError> {
        let fix = fix.map(|f| FixContext {
            attempt: f.attempt,
            max_attempts: f.max_attempts,
            problems: f.problems.clone(),
            previous: f.previous.first().map(|(_, text)| text.clone()),
        });
        let prompt = build_prompt(self.request, fix.as_ref());
        self.author
            .write_prd(attempt, &prompt, &self.request.prd_path)
            .await
    }
}

/// Asks the author for a PRD, validates it with `check`, and asks for fixes
/// with the exact problems up to [`MAX_FIX_ROUNDS`] times.
pub async fn generate<A: PrdAuthor + Sync>(
    author: &A,
    request: &PrdRequest,
    check: impl Fn(&Path) -> PrdCheck,
    progress: impl FnMut(GenProgress),
) -> Result<Generated, GenerationFailed> {
    let what = format!("a valid PRD to '{}'", request.prd_path.display());
    let design = request.design_doc_path();
    let job = Job {
        files: vec![request.prd_path.clone(), design.clone()],
        check: || {
            let stories = check(&request.prd_path)?;
            check_feature_design(request, &design)?;
            Ok(stories)
        },
        max_fix_rounds: MAX_FIX_ROUNDS,
        what: &what,
    };
    let adapter = FeatureAuthor { author, request };
    match make_valid(&adapter, &job, Start::Fresh, progress).await {
        Ok(g) => Ok(Generated {
            path: request.prd_path.clone(),
            stories: g.items,
            attempts: g.attempts,
        }),
        Err(f) => Err(GenerationFailed {
            attempts: f.attempts,
            cancelled: f.cancelled,
            message: if f.cancelled {
                "PRD generation was interrupted".to_string()
            } else {
                f.message
            },
        }),
    }
}

/// Checks the feature design doc when the agent wrote one: it names the
/// project doc as its parent (set here when missing) and maps every story to
/// things it defines.
fn check_feature_design(request: &PrdRequest, path: &Path) -> Result<(), Vec<String>> {
    if !path.is_file() {
        return Ok(());
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| vec![format!("{}: {e}", path.display())])?;
    let mut doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        vec![format!(
            "{}:{}:{}: {e}",
            path.display(),
            e.line(),
            e.column()
        )]
    })?;
    if let (Some(parent), Some(obj)) = (&request.parent_design_doc, doc.as_object_mut()) {
        let meta = obj
            .entry("metadata")
            .or_insert_with(|| serde_json::json!({}));
        if let Some(m) = meta.as_object_mut() {
            if !m.contains_key("parent_design_doc") {
                m.insert(
                    "parent_design_doc".into(),
                    parent.display().to_string().into(),
                );
                if let Ok(text) = serde_json::to_string_pretty(&doc) {
                    let _ = std::fs::write(path, text);
                }
            }
        }
    }
    let ids: Vec<Vec<String>> = cascade_plan::load_prd(&request.prd_path)
        .map(|prd| prd.stories.iter().map(|s| vec![s.id.clone()]).collect())
        .unwrap_or_default();
    let problems = cascade_planning::design_doc::check(&doc, "story_mappings", &ids);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// The project's design doc as JSON (absolute path), if there is one: the
/// parent of feature design docs.
pub fn project_design_doc_json(plan_dir: &Path, root: &Path) -> Option<PathBuf> {
    [plan_dir, root]
        .iter()
        .map(|d| d.join("design_doc.json"))
        .find(|p| p.is_file())
}

/// The prompt for the PRD agent (markdown), with the fix section on retries.
pub fn build_prompt(req: &PrdRequest, fix: Option<&FixContext>) -> String {
    let f = &req.feature;
    let mut p = String::new();
    p.push_str(&format!(
        "# Write the PRD for feature `{}`\n\nYou are planning one feature of a larger plan. \
         Do not implement anything: write a PRD (product requirements document) as JSON.\n\n",
        f.name
    ));
    if let Some(fix) = fix {
        p.push_str(&format!(
            "## Fix the previous attempt (attempt {} of {})\n\nThe PRD written last time was rejected. \
             Fix every problem below and write the whole PRD again.\n\n",
            fix.attempt, fix.max_attempts
        ));
        for problem in &fix.problems {
            p.push_str(&format!("- {problem}\n"));
        }
        if let Some(prev) = &fix.previous {
            p.push_str("\nWhat was written last time:\n\n```json\n");
            p.push_str(prev);
            if !prev.ends_with('\n') {
                p.push('\n');
            }
            p.push_str("```\n");
        }
        p.push('\n');
    }
    if !req.goal.trim().is_empty() {
        p.push_str(&format!("## Overall goal\n\n{}\n\n", req.goal.trim()));
    }
    p.push_str(&format!("## The feature\n\n- name: `{}`\n", f.name));
    if !f.title.is_empty() {
        p.push_str(&format!("- title: {}\n", f.title));
    }
    if !f.priority.is_empty() {
        p.push_str(&format!("- priority: {}\n", f.priority));
    }
    if !f.description.trim().is_empty() {
        p.push_str(&format!("\n{}\n", f.description.trim()));
    }
    if !req.dependency_titles.is_empty() {
        p.push_str(
            "\n## Already built (features this one depends on, merged into the code you see)\n\n",
        );
        for (name, title) in &req.dependency_titles {
            if title.is_empty() {
                p.push_str(&format!("- `{name}`\n"));
            } else {
                p.push_str(&format!("- `{name}`: {title}\n"));
            }
        }
    }
    if let Some((path, text)) = &req.design_doc {
        p.push_str(&format!(
            "\n## Project design (from `{}`)\n\n{}\n",
            path.display(),
            truncate(text, MAX_DESIGN_DOC).trim_end()
        ));
    }
    p.push_str(
        "\n## Findings\n\n`mega-findings.md` in your working directory (read-only) holds what \
         the features before this one found: read it. Note anything the stories of this feature \
         should know in `findings.md` there; their agents get it.\n",
    );
    p.push_str(&format!(
        "\n## What to write\n\nWrite the PRD as JSON to this exact path (also in the environment \
         variable `CASCADE_PRD_PATH`):\n\n    {}\n\n",
        req.prd_path.display()
    ));
    p.push_str(SCHEMA_HELP);
    p.push_str(&format!(
        "\n## The feature's design document\n\nAlso write the feature's design document as JSON \
         to `{}` (also `CASCADE_DESIGN_DOC_PATH`), so each story's agent gets the components, \
         decisions and patterns its story maps to. Use Plan Cascade's feature-level schema: \
         `metadata` (`level`: `feature`",
        req.design_doc_path().display()
    ));
    if let Some(parent) = &req.parent_design_doc {
        p.push_str(&format!(
            ", `parent_design_doc`: `{}`), `inherited_context` (`patterns` and `decisions` of the \
             project document this feature relies on)",
            parent.display()
        ));
    } else {
        p.push(')');
    }
    p.push_str(
        ", `overview`, `architecture` (`components`, `patterns`), `decisions` (ADR-F001, ...), \
         and `story_mappings` naming, for every story, only components, decisions and patterns \
         the document defines.\n",
    );
    p
}

const SCHEMA_HELP: &str = r#"Schema (Plan Cascade's prd.json):

```json
{
  "metadata": {"description": "..."},
  "goal": "what this feature achieves",
  "objectives": ["..."],
  "stories": [
    {
      "id": "story-001",
      "title": "short title",
      "description": "what to do, precisely",
      "priority": "high",
      "dependencies": [],
      "status": "pending",
      "acceptance_criteria": ["..."]
    }
  ]
}
```

Rules: at least one story; story ids unique, made of letters, digits, `-`, `_` and `.`;
`priority` is high, medium or low; `dependencies` only name ids of this PRD and form no
cycle; every story `pending`. Keep stories small enough for one agent session each.
"#;

/// Finds the project's design doc: next to the mega-plan first, then at the root.
pub fn find_design_doc(plan_dir: &Path, root: &Path) -> Option<(PathBuf, String)> {
    const NAMES: [&str; 6] = [
        "design_doc.md",
        "design_doc.json",
        "DESIGN.md",
        "design.md",
        "docs/DESIGN.md",
        "docs/design.md",
    ];
    for dir in [plan_dir, root] {
        for name in NAMES {
            let path = dir.join(name);
            if let Ok(text) = std::fs::read_to_string(&path) {
                let shown = path
                    .strip_prefix(root)
                    .map(Path::to_path_buf)
                    .unwrap_or(path);
                return Some((shown, text));
            }
        }
    }
    None
}

fn truncate(text: &str, max: usize) -> String {
    shared::truncate(text, max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn request(dir: &Path) -> PrdRequest {
        PrdRequest {
            goal: "a shop".into(),
            feature: FeatureBrief {
                name: "auth".into(),
                title: "Authentication".into(),
                description: "Login and sessions.".into(),
                priority: "high".into(),
                dependencies: vec![],
            },
            dependency_titles: vec![("core".into(), "Core".into())],
            design_doc: Some((PathBuf::from("design_doc.md"), "Use JWT.".into())),
            parent_design_doc: None,
            prd_path: dir.join("prd.json"),
        }
    }

    /// Writes the scripted contents in order and records the prompts it got.
    struct Scripted {
        writes: Vec<Option<&'static str>>,
        prompts: Mutex<Vec<String>>,
    }

    impl PrdAuthor for Scripted {
        async fn write_prd(
            &self,
            attempt: u32,
            prompt: &str,
            path: &Path,
        ) -> Result<(), AuthorError> {
            self.prompts.lock().unwrap().push(prompt.to_string());
            match self.writes[(attempt - 1) as usize] {
                Some(text) => {
                    std::fs::write(path, text).unwrap();
                    Ok(())
                }
                None => Err(AuthorError::Failed("exit code 3".into())),
            }
        }
    }

    fn check(path: &Path) -> PrdCheck {
        let text = std::fs::read_to_string(path).map_err(|e| vec![format!("no PRD: {e}")])?;
        if text.contains("good") {
            Ok(2)
        } else {
            Err(vec![format!(
                "story 'x' depends on unknown story 'y' ({text})"
            )])
        }
    }

    #[test]
    fn prompt_names_path_feature_and_design() {
        let tmp = tempfile::tempdir().unwrap();
        let req = request(tmp.path());
        let p = build_prompt(&req, None);
        assert!(p.contains(&req.prd_path.display().to_string()));
        assert!(p.contains("CASCADE_PRD_PATH"));
        assert!(p.contains("Authentication") && p.contains("Login and sessions."));
        assert!(p.contains("Use JWT.") && p.contains("`core`: Core"));
        assert!(!p.contains("Fix the previous attempt"));
    }

    #[tokio::test]
    async fn invalid_prd_is_retried_with_the_exact_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let author = Scripted {
            writes: vec![Some("bad1"), None, Some("good")],
            prompts: Mutex::new(vec![]),
        };
        let mut notes = vec![];
        let got = generate(&author, &request(tmp.path()), check, |p| notes.push(p))
            .await
            .unwrap();
        assert_eq!(got.attempts, 3);
        assert_eq!(got.stories, 2);
        let prompts = author.prompts.lock().unwrap();
        assert!(prompts[1].contains("depends on unknown story 'y' (bad1)"));
        assert!(prompts[1].contains("attempt 2 of 3"));
        assert!(prompts[2].contains("the agent failed: exit code 3"));
        assert_eq!(notes.len(), 5);
    }

    #[tokio::test]
    async fn gives_up_after_two_fixes_naming_the_problems() {
        let tmp = tempfile::tempdir().unwrap();
        let author = Scripted {
            writes: vec![Some("bad1"), Some("bad2"), Some("bad3")],
            prompts: Mutex::new(vec![]),
        };
        let err = generate(&author, &request(tmp.path()), check, |_| {})
            .await
            .unwrap_err();
        assert_eq!(err.attempts, 3);
        assert!(err.message.contains("in 3 attempts"), "{}", err.message);
        assert!(err.message.contains("(bad3)"), "{}", err.message);
    }

    #[tokio::test]
    async fn a_feature_design_doc_gets_its_parent_and_its_mappings_checked() {
        let tmp = tempfile::tempdir().unwrap();
        let mut req = request(tmp.path());
        req.parent_design_doc = Some(tmp.path().join("project/design_doc.json"));
        let design = req.design_doc_path();
        struct WithDesign(PathBuf, Mutex<u32>);
        impl PrdAuthor for WithDesign {
            async fn write_prd(&self, _: u32, _: &str, prd: &Path) -> Result<(), AuthorError> {
                let n = {
                    let mut n = self.1.lock().unwrap();
                    *n += 1;
                    *n
                };
                std::fs::write(prd, r#"{"stories": [{"id": "s1", "title": "S"}]}"#).unwrap();
                let comp = if n == 1 { "Ghost" } else { "Real" };
                std::fs::write(
                    &self.0,
                    format!(
                        r#"{{"architecture": {{"components": [{{"name": "Real"}}]}},
                            "story_mappings": {{"s1": {{"components": ["{comp}"]}}}}}}"#
                    ),
                )
                .unwrap();
                Ok(())
            }
        }
        let author = WithDesign(design.clone(), Mutex::new(0));
        let prompt = build_prompt(&req, None);
        assert!(prompt.contains(&design.display().to_string()), "{prompt}");
        assert!(prompt.contains("parent_design_doc"), "{prompt}");
        let got = generate(&author, &req, cascade_planning::check::check_prd, |_| {})
            .await
            .unwrap();
        assert_eq!(got.attempts, 2);
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&design).unwrap()).unwrap();
        assert_eq!(
            doc["metadata"]["parent_design_doc"],
            tmp.path()
                .join("project/design_doc.json")
                .display()
                .to_string()
        );
    }

    #[test]
    fn design_doc_is_found_next_to_the_plan_first() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("plans")).unwrap();
        assert!(find_design_doc(&root.join("plans"), root).is_none());
        std::fs::write(root.join("DESIGN.md"), "root").unwrap();
        assert_eq!(
            find_design_doc(&root.join("plans"), root).unwrap().1,
            "root"
        );
        std::fs::write(root.join("plans/design_doc.md"), "plan").unwrap();
        let (path, text) = find_design_doc(&root.join("plans"), root).unwrap();
        assert_eq!(text, "plan");
        assert_eq!(path, PathBuf::from("plans/design_doc.md"));
    }
}
