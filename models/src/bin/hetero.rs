//! `hetero`: train the study's models on the CPU, an accelerator, or both. `hetero --help`.

/// The CPU ops of a step allocate their outputs fresh (megabytes each); glibc's allocator hands
/// freed buffers of that size back to the kernel, so the next op takes page faults to map them
/// again, on every thread at once. mimalloc keeps them for reuse (see `benches/RESULTS.md`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(burn_hetero_models::cli::main());
}
