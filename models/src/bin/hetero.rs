//! `hetero`: train the study's models on the CPU, an accelerator, or both. `hetero --help`.

fn main() {
    std::process::exit(burn_hetero_models::cli::main());
}
