//! Story-type inference, for `story_type_overrides`.
//!
//! Order: the explicit `type` / `story_type` field, then the tags, then
//! keywords in the title and description. Keywords match whole words only
//! (so "Latest changes" is not a test story and "prefix" is not a bug fix),
//! and a keyword in the title counts three times as much as one in the
//! description. As in Plan Cascade, a tie goes to the type listed first
//! (feature, bugfix, refactor, test, documentation, infrastructure: "Add
//! crash reporter" is a feature) and a story without any keyword is
//! `unknown`, which agents.json can route with a `story_type_overrides.unknown`
//! (or `story_type_defaults.unknown`) entry.

use std::fmt;
use std::str::FromStr;

use cascade_plan::Story;

/// Plan Cascade's story types, in its order (which breaks ties).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StoryType {
    Feature,
    Bugfix,
    Refactor,
    Test,
    Documentation,
    Infrastructure,
    /// No keyword, tag or explicit type said what the story is.
    Unknown,
}

impl StoryType {
    pub const ALL: [StoryType; 7] = [
        StoryType::Feature,
        StoryType::Bugfix,
        StoryType::Refactor,
        StoryType::Test,
        StoryType::Documentation,
        StoryType::Infrastructure,
        StoryType::Unknown,
    ];

    /// The name used in agents.json's `story_type_overrides`.
    pub fn as_str(self) -> &'static str {
        match self {
            StoryType::Feature => "feature",
            StoryType::Bugfix => "bugfix",
            StoryType::Refactor => "refactor",
            StoryType::Test => "test",
            StoryType::Documentation => "documentation",
            StoryType::Infrastructure => "infrastructure",
            StoryType::Unknown => "unknown",
        }
    }
}

impl fmt::Display for StoryType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for StoryType {
    type Err = ();

    /// Accepts the names and common aliases (`bug`, `fix`, `docs`, `infra`, `tests`...).
    fn from_str(s: &str) -> Result<Self, ()> {
        let t = s.trim().to_ascii_lowercase().replace(['_', ' '], "-");
        Ok(match t.as_str() {
            "feature" | "feat" | "enhancement" | "story" => StoryType::Feature,
            "bugfix" | "bug" | "fix" | "bug-fix" | "hotfix" | "defect" => StoryType::Bugfix,
            "refactor" | "refactoring" | "cleanup" | "clean-up" | "tech-debt" => {
                StoryType::Refactor
            }
            "test" | "tests" | "testing" => StoryType::Test,
            "documentation" | "docs" | "doc" => StoryType::Documentation,
            "infrastructure" | "infra" | "ci" | "devops" | "ops" | "build" => {
                StoryType::Infrastructure
            }
            "unknown" => StoryType::Unknown,
            _ => return Err(()),
        })
    }
}

/// How a story's type was determined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypeEvidence {
    /// The story's `type` / `story_type` field.
    Explicit,
    /// A tag.
    Tag(String),
    /// Keywords, with the matched words.
    Keywords(Vec<String>),
    /// Nothing matched.
    Default,
}

/// A story's inferred type and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inferred {
    pub story_type: StoryType,
    pub evidence: TypeEvidence,
}

/// Single-word keywords per type.
const WORDS: &[(StoryType, &[&str])] = &[
    (
        StoryType::Bugfix,
        &[
            "fix",
            "fixes",
            "fixed",
            "fixing",
            "bug",
            "bugs",
            "bugfix",
            "bugfixes",
            "hotfix",
            "crash",
            "crashes",
            "crashing",
            "regression",
            "regressions",
            "broken",
            "defect",
            "defects",
            "incorrect",
            "wrong",
            "panic",
            "panics",
            "leak",
            "leaks",
        ],
    ),
    (
        StoryType::Refactor,
        &[
            "refactor",
            "refactors",
            "refactored",
            "refactoring",
            "restructure",
            "restructuring",
            "cleanup",
            "reorganize",
            "reorganise",
            "simplify",
            "simplification",
            "decouple",
            "modularize",
            "modularise",
            "deduplicate",
            "rename",
            "extract",
            "consolidate",
        ],
    ),
    (
        StoryType::Test,
        &[
            "test",
            "tests",
            "testing",
            "unittest",
            "unittests",
            "e2e",
            "coverage",
            "fixture",
            "fixtures",
            "pytest",
            "jest",
            "proptest",
            "benchmark",
            "benchmarks",
        ],
    ),
    (
        StoryType::Documentation,
        &[
            "doc",
            "docs",
            "documentation",
            "document",
            "documenting",
            "readme",
            "changelog",
            "docstring",
            "docstrings",
            "tutorial",
            "guide",
            "rustdoc",
            "jsdoc",
        ],
    ),
    (
        StoryType::Infrastructure,
        &[
            "ci",
            "cd",
            "pipeline",
            "pipelines",
            "deploy",
            "deployment",
            "deployments",
            "docker",
            "dockerfile",
            "container",
            "containers",
            "kubernetes",
            "k8s",
            "helm",
            "terraform",
            "ansible",
            "infra",
            "infrastructure",
            "provisioning",
            "devops",
            "workflow",
            "workflows",
            "monitoring",
        ],
    ),
    (
        StoryType::Feature,
        &[
            "add",
            "adds",
            "implement",
            "implements",
            "implementation",
            "create",
            "support",
            "feature",
            "introduce",
            "new",
            "enable",
            "build",
            "allow",
        ],
    ),
];

/// Two-word keywords (matched as consecutive words).
const PHRASES: &[(StoryType, [&str; 2])] = &[
    (StoryType::Refactor, ["clean", "up"]),
    (StoryType::Refactor, ["tech", "debt"]),
    (StoryType::Infrastructure, ["github", "actions"]),
    (StoryType::Infrastructure, ["build", "system"]),
    (StoryType::Documentation, ["api", "reference"]),
];

const TITLE_WEIGHT: u32 = 3;
const DESCRIPTION_WEIGHT: u32 = 1;

/// The story's type (see the module doc for the rules), without the
/// evidence for it (finding which list a keyword came from is most of the
/// work, and a large plan infers every story's type).
pub fn infer_story_type(story: &Story) -> StoryType {
    infer_with(
        story.story_type.as_deref(),
        &story.tags,
        &story.title,
        &story.description,
        false,
    )
    .story_type
}

/// The story's type with the evidence for it.
pub fn infer(story: &Story) -> Inferred {
    infer_parts(
        story.story_type.as_deref(),
        &story.tags,
        &story.title,
        &story.description,
    )
}

/// [`infer`] on the raw fields.
pub fn infer_parts(
    explicit: Option<&str>,
    tags: &[String],
    title: &str,
    description: &str,
) -> Inferred {
    infer_with(explicit, tags, title, description, true)
}

/// [`infer_parts`]; the keywords of the evidence only when `evidence` asks
/// for them (else the list is empty).
fn infer_with(
    explicit: Option<&str>,
    tags: &[String],
    title: &str,
    description: &str,
    evidence: bool,
) -> Inferred {
    if let Some(t) = explicit.and_then(|e| e.parse::<StoryType>().ok()) {
        return Inferred {
            story_type: t,
            evidence: TypeEvidence::Explicit,
        };
    }
    for tag in tags {
        if let Ok(t) = tag.parse::<StoryType>() {
            return Inferred {
                story_type: t,
                evidence: TypeEvidence::Tag(tag.clone()),
            };
        }
    }
    let vocab = Vocabulary::get();
    let mut scores = [0u32; StoryType::ALL.len()];
    // Keywords and phrases as they matched, first match first.
    let mut matched: Vec<Match> = Vec::new();
    for (text, weight) in [(title, TITLE_WEIGHT), (description, DESCRIPTION_WEIGHT)] {
        // Every phrase is two words: one ends at this word when the word
        // before it starts one.
        let mut previous: Option<u16> = None;
        for word in text.split(|c: char| !c.is_alphanumeric()) {
            if word.is_empty() {
                continue;
            }
            let id = vocab.id_of(word);
            if let (Some(first), Some(second)) = (previous, id) {
                for (p, (t, phrase)) in vocab.phrases.iter().enumerate() {
                    if *phrase == [first, second] {
                        scores[index(*t)] += weight;
                        if evidence && !matched.contains(&Match::Phrase(p)) {
                            matched.push(Match::Phrase(p));
                        }
                    }
                }
            }
            previous = id.filter(|&i| vocab.starts_phrase[i as usize]);
            let Some(id) = id else {
                continue;
            };
            let types = vocab.types[id as usize];
            if types != 0 {
                for (k, score) in scores.iter_mut().enumerate() {
                    if types & (1 << k) != 0 {
                        *score += weight;
                    }
                }
                if evidence && !matched.contains(&Match::Word(id)) {
                    matched.push(Match::Word(id));
                }
            }
        }
    }
    let best = StoryType::ALL
        .into_iter()
        .filter(|t| scores[index(*t)] > 0)
        .max_by(|a, b| {
            scores[index(*a)]
                .cmp(&scores[index(*b)])
                // `max_by` keeps the last of equals: the earlier type wins.
                .then(index(*b).cmp(&index(*a)))
        });
    match best {
        Some(t) => Inferred {
            story_type: t,
            evidence: TypeEvidence::Keywords(
                matched
                    .into_iter()
                    .filter(|m| vocab.first_type(*m) == Some(t))
                    .map(|m| vocab.text(m))
                    .collect(),
            ),
        },
        None => Inferred {
            story_type: StoryType::Unknown,
            evidence: TypeEvidence::Default,
        },
    }
}

fn index(t: StoryType) -> usize {
    StoryType::ALL.iter().position(|x| *x == t).unwrap_or(0)
}

/// A keyword (by its id in the [`Vocabulary`]) or a phrase (by its
/// position in [`PHRASES`]) found in a story's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Match {
    Word(u16),
    Phrase(usize),
}

/// Every word of [`WORDS`] and [`PHRASES`] by id, built once: a story's
/// words are looked up in it without allocating (a large plan infers the
/// type of every story, more than once).
struct Vocabulary {
    /// Looked up once per word of every story.
    ids: std::collections::HashMap<&'static str, u16>,
    words: Vec<&'static str>,
    /// Per word id, the types whose lists hold it (bit `index(t)`).
    types: Vec<u8>,
    /// [`PHRASES`] as word ids.
    phrases: Vec<(StoryType, [u16; 2])>,
    /// Per word id, whether a phrase starts with it.
    starts_phrase: Vec<bool>,
    /// The longest word: a longer one is none of them.
    longest: usize,
}

impl Vocabulary {
    fn get() -> &'static Vocabulary {
        static VOCABULARY: std::sync::OnceLock<Vocabulary> = std::sync::OnceLock::new();
        VOCABULARY.get_or_init(Vocabulary::build)
    }

    fn build() -> Vocabulary {
        let mut v = Vocabulary {
            ids: Default::default(),
            words: Vec::new(),
            types: Vec::new(),
            phrases: Vec::new(),
            starts_phrase: Vec::new(),
            longest: 0,
        };
        for (t, list) in WORDS {
            for w in *list {
                let id = v.intern(w);
                v.types[id as usize] |= 1 << index(*t);
            }
        }
        for (t, [first, second]) in PHRASES {
            let ids = [v.intern(first), v.intern(second)];
            v.phrases.push((*t, ids));
        }
        v.starts_phrase = vec![false; v.words.len()];
        for (_, ids) in &v.phrases {
            v.starts_phrase[ids[0] as usize] = true;
        }
        v
    }

    fn intern(&mut self, word: &'static str) -> u16 {
        if let Some(&id) = self.ids.get(word) {
            return id;
        }
        let id = self.words.len() as u16;
        self.ids.insert(word, id);
        self.words.push(word);
        self.types.push(0);
        self.longest = self.longest.max(word.len());
        id
    }

    /// The id of `word` lower-cased (as `str::to_lowercase` does), if it
    /// is one of the vocabulary's.
    fn id_of(&self, word: &str) -> Option<u16> {
        if !word.is_ascii() {
            return self.ids.get(word.to_lowercase().as_str()).copied();
        }
        if word.len() > self.longest {
            return None;
        }
        let mut buf = [0u8; 32];
        let lower = buf.get_mut(..word.len())?;
        lower.copy_from_slice(word.as_bytes());
        lower.make_ascii_lowercase();
        let lower = std::str::from_utf8(lower).ok()?;
        self.ids.get(lower).copied()
    }

    /// The type a matched keyword or phrase counts as in the evidence:
    /// the first list of [`WORDS`] holding the word, or the phrase's.
    fn first_type(&self, m: Match) -> Option<StoryType> {
        match m {
            Match::Word(id) => {
                let word = self.words[id as usize];
                WORDS
                    .iter()
                    .find(|(_, list)| list.contains(&word))
                    .map(|(t, _)| *t)
            }
            Match::Phrase(p) => PHRASES.get(p).map(|(t, _)| *t),
        }
    }

    fn text(&self, m: Match) -> String {
        match m {
            Match::Word(id) => self.words[id as usize].to_string(),
            Match::Phrase(p) => PHRASES.get(p).map(|(_, w)| w.join(" ")).unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(title: &str, description: &str) -> StoryType {
        infer_parts(None, &[], title, description).story_type
    }

    #[test]
    fn the_type_alone_is_the_type_with_evidence() {
        let texts = [
            ("Fix the login crash", "users see an error", None, vec![]),
            (
                "Clean up the tech debt",
                "refactor the build system",
                None,
                vec![],
            ),
            (
                "Add API reference docs",
                "document github actions",
                None,
                vec![],
            ),
            (
                "Story number 5",
                "Implement part 5 of the synthetic system.",
                None,
                vec![],
            ),
            ("Nothing", "at all", None, vec![]),
            ("Add tests", "", Some("bug"), vec![]),
            ("Add tests", "", None, vec!["docs".to_string()]),
            ("ÉCRIRE la doc", "Ünïcode words and TESTS", None, vec![]),
        ];
        for (title, description, explicit, tags) in texts {
            let story: Story = serde_json::from_value(serde_json::json!({
                "id": "s", "title": title, "description": description,
                "type": explicit, "tags": tags,
            }))
            .expect("a story");
            assert_eq!(
                infer_story_type(&story),
                infer(&story).story_type,
                "{title}"
            );
        }
    }

    /// Two-word keywords count where their words are consecutive in one
    /// text, and the evidence lists matches in the order they appear.
    #[test]
    fn phrases_match_consecutive_words_in_order() {
        let i = infer_parts(None, &[], "Refactor: clean clean up the build system", "");
        assert_eq!(i.story_type, StoryType::Refactor);
        assert_eq!(
            i.evidence,
            TypeEvidence::Keywords(vec!["refactor".into(), "clean up".into()])
        );
        let i = infer_parts(None, &[], "Tech debt", "and the api reference");
        assert_eq!(i.story_type, StoryType::Refactor);
        // A phrase never spans the title and the description, nor a word
        // in between.
        assert_eq!(t("Clean", "up the parser"), StoryType::Unknown);
        assert_eq!(t("Clean the up", ""), StoryType::Unknown);
        assert_eq!(t("", "the API reference"), StoryType::Documentation);
    }

    #[test]
    fn explicit_type_wins() {
        let i = infer_parts(Some("bug"), &["docs".into()], "Add tests", "");
        assert_eq!(i.story_type, StoryType::Bugfix);
        assert_eq!(i.evidence, TypeEvidence::Explicit);
        // Unknown explicit types fall through to the other rules.
        let i = infer_parts(Some("chore"), &[], "Update README", "");
        assert_eq!(i.story_type, StoryType::Documentation);
    }

    #[test]
    fn tags_before_keywords() {
        let i = infer_parts(None, &["ui".into(), "infra".into()], "Fix login crash", "");
        assert_eq!(i.story_type, StoryType::Infrastructure);
        assert_eq!(i.evidence, TypeEvidence::Tag("infra".into()));
    }

    #[test]
    fn keywords_on_word_boundaries_only() {
        assert_eq!(
            t("Latest changes view", "Show the latest changes"),
            StoryType::Unknown
        );
        assert_eq!(
            t("Prefix search", "Add a prefix index for contests"),
            StoryType::Feature
        );
        assert_eq!(
            t("Attestation service", "Protest handling, fixture-free"),
            StoryType::Test
        );
        assert_eq!(t("Fix: login crash", ""), StoryType::Bugfix);
        assert_eq!(t("Unit tests for the parser", ""), StoryType::Test);
        assert_eq!(t("Refactoring the store", ""), StoryType::Refactor);
        assert_eq!(t("Clean up the store", ""), StoryType::Refactor);
        assert_eq!(t("Update the README", ""), StoryType::Documentation);
        assert_eq!(t("GitHub Actions pipeline", ""), StoryType::Infrastructure);
        assert_eq!(
            t("User profile page", "Users can edit their profile"),
            StoryType::Unknown
        );
        // No keyword: `unknown`, as Plan Cascade types it.
        let i = infer_parts(None, &[], "Profile page", "");
        assert_eq!(i.story_type, StoryType::Unknown);
        assert_eq!(i.evidence, TypeEvidence::Default);
    }

    #[test]
    fn title_outweighs_description() {
        // One title keyword (3) beats two description keywords (2).
        assert_eq!(
            t("Fix the date parser", "Add tests and more tests for it"),
            StoryType::Bugfix
        );
        assert_eq!(t("Parser work", "fix the bug"), StoryType::Bugfix);
        // A tie goes to the type Plan Cascade lists first: feature, then
        // bugfix, refactor, test, documentation, infrastructure.
        assert_eq!(t("Add crash reporter", ""), StoryType::Feature);
        assert_eq!(t("Add tests for login", ""), StoryType::Feature);
        let i = infer_parts(None, &[], "Add tests for login", "");
        assert_eq!(i.evidence, TypeEvidence::Keywords(vec!["add".into()]));
        assert_eq!(t("Fix the flaky tests", ""), StoryType::Bugfix);
        assert_eq!(t("Refactor the docs", ""), StoryType::Refactor);
    }

    #[test]
    fn names_parse() {
        for ty in StoryType::ALL {
            assert_eq!(ty.as_str().parse::<StoryType>(), Ok(ty));
        }
        assert_eq!("Docs".parse::<StoryType>(), Ok(StoryType::Documentation));
        assert!("chore".parse::<StoryType>().is_err());
    }
}
