//! Owned by the quality-gates work (issue 4): fingerprint of a working tree.
