//! Validation: every problem in a plan at once, and the only way to make a
//! [`ValidPlan`].
//!
//! Checks ids (present, non-empty, valid as a [`StoryId`], unique), titles,
//! dependencies (each names a story; forward references are fine; none on
//! itself), cycles (each named as a closed path) and, for mega-plans, feature
//! names (`^[a-z0-9][a-z0-9-]*$`, unique). Problems come out in a fixed order
//! (by kind, then file position) so messages are stable.

use std::fmt;

use crate::analysis::find_cycles;
use crate::graph::{DepGraph, Kind};
use crate::id::StoryId;
use crate::model::{MegaPlan, Prd};
use crate::plan::ValidPlan;

/// One thing wrong with a plan. Indexes are file positions (0-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// An item without an `id` key.
    MissingId { index: usize },
    /// An item whose id is empty or blank.
    EmptyId { index: usize },
    /// An id that is not safe as a branch or path component.
    InvalidId {
        index: usize,
        id: String,
        reason: &'static str,
    },
    /// The same id on two items.
    DuplicateId {
        id: String,
        first: usize,
        second: usize,
    },
    /// A story with an empty title.
    EmptyTitle { index: usize, id: String },
    /// A dependency that names no story: both ids.
    UnknownDependency { id: String, dependency: String },
    /// An item that depends on itself.
    SelfDependency { id: String },
    /// A cycle as a closed path (each depends on the next), plus other members
    /// of the same tangle.
    Cycle {
        path: Vec<String>,
        others: Vec<String>,
    },
    /// A feature name that does not match `^[a-z0-9][a-z0-9-]*$`.
    BadFeatureName {
        index: usize,
        id: String,
        name: String,
    },
    /// Two features with the same name.
    DuplicateFeatureName {
        name: String,
        first: String,
        second: String,
    },
}

impl Problem {
    fn describe(&self, kind: Kind, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let noun = kind.noun();
        let list = kind.list();
        match self {
            Problem::MissingId { index } => {
                write!(f, "{list}[{index}] has no \"id\"; give every {noun} a unique id")
            }
            Problem::EmptyId { index } => {
                write!(f, "{list}[{index}] has an empty id; give every {noun} a unique id")
            }
            Problem::InvalidId { index, id, reason } => write!(
                f,
                "{list}[{index}] has an invalid id '{id}': {reason} (ids become branch and file names)"
            ),
            Problem::DuplicateId { id, first, second } => write!(
                f,
                "id '{id}' is used by {list}[{first}] and {list}[{second}]; ids must be unique"
            ),
            Problem::EmptyTitle { index, id } if id.is_empty() => {
                write!(f, "{list}[{index}] has an empty title")
            }
            Problem::EmptyTitle { id, .. } => write!(f, "{noun} '{id}' has an empty title"),
            Problem::UnknownDependency { id, dependency } => write!(
                f,
                "{noun} '{id}' depends on unknown {noun} '{dependency}'; fix the id or remove the dependency"
            ),
            Problem::SelfDependency { id } => write!(
                f,
                "{noun} '{id}' depends on itself ({id} -> {id}); remove '{id}' from its dependencies"
            ),
            Problem::Cycle { path, others } => {
                write!(
                    f,
                    "dependency cycle: {} (each depends on the next); remove one of these dependencies",
                    path.join(" -> ")
                )?;
                if !others.is_empty() {
                    write!(f, " (also tangled in it: {})", others.join(", "))?;
                }
                Ok(())
            }
            Problem::BadFeatureName { index, id, name } => {
                let who = if id.is_empty() {
                    format!("{list}[{index}]")
                } else {
                    format!("feature '{id}'")
                };
                if name.is_empty() {
                    write!(f, "{who} has no name; give it a short name like 'user-auth'")
                } else {
                    write!(
                        f,
                        "{who} has an invalid name '{name}': use lowercase letters, digits and '-', starting with a letter or digit (like 'user-auth')"
                    )
                }
            }
            Problem::DuplicateFeatureName {
                name,
                first,
                second,
            } => write!(
                f,
                "features '{first}' and '{second}' have the same name '{name}'; names must be unique"
            ),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.describe(Kind::Story, f)
    }
}

/// Every problem found in a plan. Display lists them all, one per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors {
    kind: Kind,
    problems: Vec<Problem>,
}

impl ValidationErrors {
    /// The problems, by kind then file position.
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    /// One message per problem.
    pub fn messages(&self) -> Vec<String> {
        struct One<'a>(&'a Problem, Kind);
        impl fmt::Display for One<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.describe(self.1, f)
            }
        }
        self.problems
            .iter()
            .map(|p| One(p, self.kind).to_string())
            .collect()
    }

    /// Whether any problem is a cycle (or a self-dependency).
    pub fn has_cycle(&self) -> bool {
        self.problems
            .iter()
            .any(|p| matches!(p, Problem::Cycle { .. } | Problem::SelfDependency { .. }))
    }

    /// `PRD` or `mega-plan`.
    pub fn plan_kind(&self) -> &'static str {
        match self.kind {
            Kind::Story => "PRD",
            Kind::Feature => "mega-plan",
        }
    }
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        write!(
            f,
            "invalid {} ({n} problem{}):",
            self.plan_kind(),
            if n == 1 { "" } else { "s" }
        )?;
        for p in &self.problems {
            f.write_str("\n  - ")?;
            p.describe(self.kind, f)?;
        }
        Ok(())
    }
}

/// Validates a PRD: every problem, or a [`ValidPlan`] ready to schedule.
pub fn validate_prd(prd: &Prd) -> Result<ValidPlan, ValidationErrors> {
    let graph = DepGraph::from_prd(prd);
    let mut problems = Vec::new();
    for (index, story) in prd.stories.iter().enumerate() {
        let blank = story.title.trim().is_empty();
        check_story(
            index,
            &story.id,
            story.source.has_key(0),
            blank,
            &mut problems,
        );
    }
    finish(graph, problems)
}

/// The per-story checks (id, title).
pub(crate) fn check_story(
    index: usize,
    id: &str,
    has_id: bool,
    title_blank: bool,
    problems: &mut Vec<Problem>,
) {
    check_id(index, id, has_id, problems);
    if title_blank {
        problems.push(Problem::EmptyTitle {
            index,
            id: id.trim().to_owned(),
        });
    }
}

/// Validates a mega-plan: every problem, or a [`ValidPlan`] over its features.
pub fn validate_mega(mega: &MegaPlan) -> Result<ValidPlan, ValidationErrors> {
    let graph = DepGraph::from_mega(mega);
    let mut problems = Vec::new();
    for (index, feature) in mega.features.iter().enumerate() {
        check_story(
            index,
            &feature.id,
            feature.source.has_key(0),
            feature.title.trim().is_empty(),
            &mut problems,
        );
    }
    let mut names = std::collections::HashMap::new();
    for (index, feature) in mega.features.iter().enumerate() {
        let name = feature.name.trim();
        if !is_feature_name(name) {
            problems.push(Problem::BadFeatureName {
                index,
                id: feature.id.trim().to_owned(),
                name: feature.name.clone(),
            });
        } else if let Some(first) = names.insert(name, index) {
            problems.push(Problem::DuplicateFeatureName {
                name: name.to_owned(),
                first: mega.features[first].id.trim().to_owned(),
                second: feature.id.trim().to_owned(),
            });
        }
    }
    finish(graph, problems)
}

/// `^[a-z0-9][a-z0-9-]*$`.
pub(crate) fn is_feature_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn check_id(index: usize, id: &str, has_key: bool, problems: &mut Vec<Problem>) {
    // Not trimmed: the id as written becomes branch and file names, so
    // surrounding spaces make it invalid rather than silently different.
    if id.trim().is_empty() {
        problems.push(if has_key {
            Problem::EmptyId { index }
        } else {
            Problem::MissingId { index }
        });
    } else if let Err(reason) = StoryId::check(id) {
        problems.push(Problem::InvalidId {
            index,
            id: id.to_owned(),
            reason,
        });
    }
}

/// Adds the graph's problems, then builds the plan if there were none.
pub(crate) fn finish(
    graph: DepGraph,
    mut problems: Vec<Problem>,
) -> Result<ValidPlan, ValidationErrors> {
    let id = |p: u32| graph.id(p as usize).to_owned();
    for &(first, second) in &graph.duplicates {
        problems.push(Problem::DuplicateId {
            id: id(first),
            first: first as usize,
            second: second as usize,
        });
    }
    for (pos, dep) in graph.unknown_dependencies() {
        problems.push(Problem::UnknownDependency {
            id: graph.id(pos).to_owned(),
            dependency: dep.to_owned(),
        });
    }
    for pos in graph.self_dependencies() {
        problems.push(Problem::SelfDependency {
            id: graph.id(pos).to_owned(),
        });
    }
    let all = vec![true; graph.len()];
    let (order, depth) = graph.layer(&all);
    if order.len() < graph.len() {
        for cycle in find_cycles(&graph, &depth) {
            if cycle.is_self_loop() {
                continue; // reported as a self-dependency
            }
            problems.push(Problem::Cycle {
                path: cycle.path.iter().map(|&p| id(p as u32)).collect(),
                others: cycle.others.iter().map(|&p| id(p as u32)).collect(),
            });
        }
    }
    if !problems.is_empty() {
        return Err(ValidationErrors {
            kind: graph.kind,
            problems,
        });
    }
    Ok(ValidPlan::new(graph, Some((order, depth))))
}
