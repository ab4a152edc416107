//! Owned by the quality-gates work (issue 4): status of a working tree.
