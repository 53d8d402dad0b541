//! Sizes read from the environment, for measuring one setting against another without a
//! rebuild.

use std::ops::RangeInclusive;

/// The number the variable `name` holds when it lies in `range`; `default` when it is unset,
/// and, with a warning, when it does not parse or lies outside (`unit` names what it counts).
pub(crate) fn usize_from_env(
    name: &str,
    unit: &str,
    range: RangeInclusive<usize>,
    default: usize,
) -> usize {
    let Ok(v) = std::env::var(name) else {
        return default;
    };
    match v.trim().parse::<usize>() {
        Ok(n) if range.contains(&n) => n,
        _ => {
            log::warn!(
                "{name}={v}: expected {unit} from {} to {}; using {default}",
                range.start(),
                range.end()
            );
            default
        }
    }
}
