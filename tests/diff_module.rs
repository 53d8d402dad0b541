//! Differential cases: see `run_all`.

/// Runs every case of this module.
pub fn run_all() {}
