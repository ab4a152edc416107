//! From `prd.json` text to a schedule in one call, and the view of a plan's
//! stories a dashboard shows: both read through the model ([`Prd`]), so
//! every reader of the file accepts, rejects and words errors (file, line,
//! column) the same way.

use std::path::Path;

use crate::error::PlanError;
use crate::index::IndexStats;
use crate::model::Prd;
use crate::plan::ValidPlan;
use crate::validate::{validate_prd, ValidationErrors};
use crate::vocabulary::PlanWarning;

/// Why [`validate_prd_json`] produced no plan.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The text is not a PRD (bad JSON or a field of the wrong type).
    #[error(transparent)]
    Parse(#[from] PlanError),
    /// The PRD parses but is invalid.
    #[error(transparent)]
    Invalid(#[from] ValidationErrors),
}

/// Parses and validates PRD text: `validate_prd(&Prd::from_json(bytes,
/// path)?)`. `path` is only used in messages.
pub fn validate_prd_json(bytes: &[u8], path: &Path) -> Result<ValidPlan, CheckError> {
    validate_prd_json_warned(bytes, path).map(|(plan, _)| plan)
}

/// [`validate_prd_json`] with the warnings reading gave ([`Prd::warnings`]).
pub fn validate_prd_json_warned(
    bytes: &[u8],
    path: &Path,
) -> Result<(ValidPlan, Vec<PlanWarning>), CheckError> {
    let prd = Prd::from_json(bytes, path)?;
    let plan = validate_prd(&prd)?;
    Ok((plan, prd.warnings))
}

/// Reads `path` and does [`validate_prd_json`].
pub fn load_valid_plan(path: impl AsRef<Path>) -> Result<ValidPlan, CheckError> {
    load_valid_plan_warned(path).map(|(plan, _)| plan)
}

/// [`load_valid_plan`] with the warnings reading gave.
pub fn load_valid_plan_warned(
    path: impl AsRef<Path>,
) -> Result<(ValidPlan, Vec<PlanWarning>), CheckError> {
    let path = path.as_ref();
    let bytes = crate::model::read(path, "prd")?;
    validate_prd_json_warned(&bytes, path)
}

/// What a view of a plan shows of its stories, in file order: each one's
/// id, title and dependencies as written ([`load_outline`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outline {
    prd: Prd,
}

/// A story of an [`Outline`]: the [`crate::Story`] fields of the same names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutlineStory<'a> {
    pub id: &'a str,
    pub title: &'a str,
    pub dependencies: Dependencies<'a>,
}

/// A story's dependencies as written, in order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(transparent)]
pub struct Dependencies<'a>(&'a [String]);

impl<'a> Dependencies<'a> {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The dependencies' ids, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &'a str> + Clone + 'a {
        self.0.iter().map(String::as_str)
    }
}

impl Outline {
    /// The number of stories.
    pub fn len(&self) -> usize {
        self.prd.stories.len()
    }

    pub fn is_empty(&self) -> bool {
        self.prd.stories.is_empty()
    }

    /// Story `i` (in file order), if there is one.
    pub fn story(&self, i: usize) -> Option<OutlineStory<'_>> {
        self.prd.stories.get(i).map(view)
    }

    /// The stories, in file order.
    pub fn stories(
        &self,
    ) -> impl ExactSizeIterator<Item = OutlineStory<'_>> + DoubleEndedIterator + '_ {
        self.prd.stories.iter().map(view)
    }

    /// Where the story with this id is (indexed, as [`Prd::position`]).
    pub fn position(&self, id: &str) -> Option<usize> {
        self.prd.position(id)
    }

    /// [`Outline::position`] of many ids at once: `f` gets a finder that
    /// answers as `position` does.
    pub fn with_positions<R>(&self, f: impl FnOnce(&dyn Fn(&str) -> Option<usize>) -> R) -> R {
        f(&|id| self.prd.position(id))
    }

    /// How the story index has been used.
    pub fn index_stats(&self) -> IndexStats {
        self.prd.index_stats()
    }

    /// Parses PRD text (`path` is only used in messages) with
    /// [`Prd::from_json`].
    pub fn from_json(bytes: &[u8], path: &Path) -> Result<Outline, PlanError> {
        Prd::from_json(bytes, path).map(|prd| Outline { prd })
    }
}

fn view(s: &crate::Story) -> OutlineStory<'_> {
    OutlineStory {
        id: &s.id,
        title: &s.title,
        dependencies: Dependencies(&s.dependencies),
    }
}

/// Reads `path` as [`crate::load_prd`] does, as an [`Outline`].
pub fn load_outline(path: impl AsRef<Path>) -> Result<Outline, PlanError> {
    crate::model::load_prd(path).map(|prd| Outline { prd })
}
