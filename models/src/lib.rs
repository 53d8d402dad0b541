//! Models and data for burn-hetero.
