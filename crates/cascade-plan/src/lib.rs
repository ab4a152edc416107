//! cascade-plan: the plan model (`prd.json`, `mega-plan.json`), its
//! validation, and the dependency analyzer that orders the work.
//!
//! The flow is `load_prd` -> [`validate_prd`] -> [`ValidPlan`]: a plan file is
//! parsed leniently into the model (Plan Cascade's variants are accepted and
//! unknown fields kept), validated strictly (every problem is collected, not
//! just the first), and only a validated plan can be batched or scheduled.
//! This crate never spawns processes, touches git or prints.
//!
//! # API summary
//!
//! Model (`model.rs`; serde in `wire.rs`):
//! - [`load_prd`]`(path) -> Result<`[`Prd`]`, `[`PlanError`]`>`,
//!   [`load_mega`]`(path) -> Result<`[`MegaPlan`]`, PlanError>`. Malformed JSON
//!   gives [`PlanError::Parse`] with `path`, `line`, `column`; a missing file
//!   [`PlanError::NotFound`]. `Prd::from_json(bytes, path)` parses text.
//! - [`Prd`]`::{save(path) (atomic temp + rename; unknown fields and key order
//!   kept), story(id), position(id), story_mut(id) (through an index built on the first
//!   lookup: [`IdIndex`]; `reindex()` after renaming stories in place,
//!   `index_stats()`), to_json()}`; same for [`MegaPlan`] (`feature(id)`,
//!   `feature_mut(id)`, linear: mega-plans hold a handful of features).
//! - [`Prd`] `{ metadata, goal, objectives, stories: Vec<Story>, quality_gates:
//!   Option<Value>, extra, source }`.
//! - [`Story`] `{ id, title, description, priority, dependencies, status,
//!   acceptance_criteria: Vec<Criterion>, agent, story_type (from "type" or
//!   "story_type"), tags, files, context_estimate, extra, source }`;
//!   `Story::new(id, title)`, `set_status(Status)`, `set_status_label("completed")`,
//!   `set_priority`, `is_complete()`, `status_label()`, `weight()`,
//!   `dependency_ids()`. [`Criterion::text`] gives a criterion's text.
//! - [`Priority`]`::{High, Medium, Low}` (exactly `high`, `medium`, `low`;
//!   anything else reads as `Medium` with a [`PlanWarning`] in
//!   `Prd::warnings` naming file:line:column; `rank()` 0/1/2),
//!   [`Status`]`::{Pending, InProgress, Complete}` (exactly Plan Cascade's
//!   `pending`, `in_progress`/`inprogress`, `complete`/`completed`, `failed`,
//!   `skipped`, see `Status::SPELLINGS`; any other story status is
//!   [`PlanError::Vocabulary`], every one named at file:line:column). The
//!   original spelling is written back unless the value was changed.
//! - [`MegaPlan`] `{ goal, execution_mode, target_branch, features: Vec<Feature>,
//!   extra, source }`, [`Feature`] `{ id, name, title, description, priority,
//!   dependencies, status, extra, source }` (`status_label()` keeps Plan
//!   Cascade's other feature statuses such as `prd_generated`).
//! - [`StoryId`]: a validated id (ASCII letters, digits, `-`, `_`, `.`; safe as
//!   a branch or path component); cheap to clone.
//!
//! Validation and analysis (`validate.rs`, `graph.rs`, `analysis.rs`,
//! `plan.rs`):
//! - [`validate_prd`]`(&Prd) -> Result<`[`ValidPlan`]`, `[`ValidationErrors`]`>`
//!   and [`validate_mega`]`(&MegaPlan)`: every problem at once (missing,
//!   empty, invalid or duplicate ids, empty titles, unknown dependencies,
//!   self-dependencies, cycles as closed paths `a -> b -> c -> a`, bad feature
//!   names). Forward references are fine.
//! - [`ValidPlan`]: `batches() -> Vec<Vec<StoryId>>` (Kahn layers over the
//!   stories not yet complete; a dependency on a complete story is satisfied;
//!   within a batch high > medium > low, then file order; each story in the
//!   earliest batch its dependencies allow), `batch_positions()` (the same as
//!   file positions, no allocation), `batch_count()`, `pending_len()`,
//!   `nodes()` in file order ([`Node`]: `id()`, `id_str()`, `position()`,
//!   `priority()`, `is_complete()`, `weight()`, `dependencies()`,
//!   `dependents()` (+ `_positions()`), `batch()`, `remaining_path_len()`),
//!   `node(id)`, `node_at(pos)`, `position(id)` (= index into `prd.stories`),
//!   `id_at(pos)`, `remaining_path_len(id)` (heaviest chain of unfinished
//!   stories from the story to a sink, the story included; 0 when complete;
//!   for eager schedulers), `critical_path()` (over unfinished stories) and
//!   `analysis()` (structural, all stories).
//! - Weights: a numeric `context_estimate` (number or numeric string) is the
//!   story's weight; anything else weighs 1.
//! - [`DepGraph`]: the graph of an unvalidated plan (`DepGraph::from_prd`,
//!   `from_mega`; dependencies of a mega-plan may name a feature by id or
//!   name) for reporting on broken files (`cascade deps --no-check`):
//!   `id(pos)`, `position(id)`, `dependencies(pos)`, `dependents(pos)`,
//!   `unknown_dependencies()`, `self_dependencies()`. [`Analysis::of`]`(&graph)`
//!   gives [`Analysis`] `{ depth, roots, critical_path, critical_path_len,
//!   bottlenecks, orphans, cycles: Vec<`[`Cycle`]`> }`, all by position.
//! - [`load_valid_plan`]`(path)` / [`validate_prd_json`]`(bytes, path) ->
//!   Result<ValidPlan, `[`CheckError`]`>`: `load_prd` + `validate_prd` in
//!   one call; [`Outline`]: the ids, titles and dependencies a view shows.
//! - [`ValidationErrors`]: `problems() -> &[`[`Problem`]`]`, `messages()`,
//!   `has_cycle()`; Display is `invalid PRD (N problems):` then one
//!   `  - ...` line per problem.
//!
//! Paths (`paths.rs`): where plan files live, the project or Plan Cascade's
//! per-user data directory (`~/.plan-cascade/<project-id>/`):
//! [`paths::project_id`]`(root)` / `project_id_from(name, path_text)`,
//! `sanitize_name`, `data_home()` (from `HOME` / `APPDATA`),
//! [`paths::ProjectPaths`]`::locate(root, data_home)` (id, data dir, manifest
//! check) with `find_plan(kind, cwd, flag)`, `find_either(cwd, prd, mega)`
//! (discovery: flag, `./<file>`, data directory; warnings as values),
//! `mode(cwd)` (new | legacy | none) and `plan_output(out)` (where `cascade
//! plan` writes plan files).
//!
//! [`IdIndex`]: positions of a list's items by id (the first wins), built
//! once and rebuilt only when the list's length changed; every hit is
//! checked against the list. Its [`IndexStats`] (`lookups`, `builds`) let
//! tests prove that a code path does no linear search per lookup.
//!
//! [`synthetic`]: generated plans of any size ([`synthetic::prd_json`]) for
//! benchmarks and tests at scale.
//!
//! Text (`text.rs`): [`text::printable`] / [`text::printable_line`] (text
//! from a plan file or an agent with its control characters shown as
//! escapes: the one sanitiser of every output) and [`text::closest`] /
//! [`text::suggestion`] ("did you mean" for unknown words).
//! Unknown keys in the other files a user writes (`strict.rs`):
//! [`strict::fields_of`]`::<T>()` (the keys a serde-derived type reads),
//! [`strict::unknown_keys`] and [`strict::Tracked`] (an object read by hand
//! that knows the keys it was asked for): warnings naming the closest key.
//!
//! Everything is linear in stories + dependencies: ids are hashed once into
//! a `HashMap`, adjacency is stored as flat arrays, and
//! cycles are named with petgraph's strongly connected components only when
//! Kahn's algorithm shows there is one.
//!
//! ```
//! use cascade_plan::{validate_prd, Prd};
//! let prd = Prd::from_json(br#"{"stories": [
//!     {"id": "b", "title": "B", "dependencies": ["a"]},
//!     {"id": "a", "title": "A"}]}"#, "prd.json".as_ref()).unwrap();
//! let plan = validate_prd(&prd).unwrap();
//! assert_eq!(plan.batches(), vec![vec!["a"], vec!["b"]]);
//! ```

mod analysis;
mod check;
mod error;
mod graph;
mod id;
mod index;
pub mod json;
mod model;
pub mod paths;
mod plan;
pub mod strict;
pub mod synthetic;
pub mod text;
mod validate;
mod vocabulary;
mod wire;

pub use analysis::{Analysis, Cycle};
pub use check::{
    load_outline, load_valid_plan, load_valid_plan_warned, validate_prd_json,
    validate_prd_json_warned, CheckError, Dependencies, Outline, OutlineStory,
};
pub use error::PlanError;
pub use graph::DepGraph;
pub use id::{InvalidId, StoryId};
pub use index::{IdIndex, IndexStats};
pub use model::{
    load_mega, load_prd, Criterion, Feature, MegaPlan, Prd, Priority, Source, Status, Story,
};
pub use plan::{Node, ValidPlan};
pub use validate::{validate_mega, validate_prd, Problem, ValidationErrors};
pub use vocabulary::PlanWarning;

#[cfg(test)]
mod graph_tests;
#[cfg(test)]
mod model_tests;
