//! Owned by the engine work (issue 5): worktree helpers.
