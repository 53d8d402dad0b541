//! `burn_hetero::spin`: rayon's workers kept looking for work for a window, then let sleep.

use crate::common::rng_for;
use burn_hetero::spin::{keep_workers_spinning, spinning_workers};
use rand::Rng;
use rayon::prelude::*;
use std::time::{Duration, Instant};

/// Waits up to `limit` for `done`; whether it came.
fn wait_for(limit: Duration, done: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    done()
}

fn busy(d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// One test: the spinning jobs are process-wide state.
#[test]
fn workers_spin_for_their_window_then_stop() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    let mut rng = rng_for("pool_spin");
    let values: Vec<f32> = (0..200_003).map(|_| rng.random_range(-1.0..1.0)).collect();
    let expected: f64 = values.iter().map(|&v| f64::from(v)).sum();
    for round in 0..2 {
        let window = Duration::from_millis(400);
        pool.install(|| {
            keep_workers_spinning(window);
            // Every worker but the caller's.
            assert!(
                wait_for(Duration::from_secs(5), || spinning_workers() == 2),
                "round {round}: {} workers spinning, expected 2",
                spinning_workers()
            );
            // The caller has no spinning job: waiting for the stolen (longer) half of a join,
            // it would run one and return only at the deadline.
            for _ in 0..10 {
                let start = Instant::now();
                rayon::join(
                    || busy(Duration::from_micros(500)),
                    || busy(Duration::from_millis(2)),
                );
                let took = start.elapsed();
                assert!(took < Duration::from_millis(150), "a join took {took:?}");
            }
            // Work handed to the pool runs on the spinning workers, and runs right.
            let sum: f64 = values
                .par_chunks(1000)
                .map(|c| c.iter().map(|&v| f64::from(v)).sum::<f64>())
                .sum();
            assert!((sum - expected).abs() <= 1e-9 * expected.abs().max(1.0));
            // Calling again moves the deadline without a second set of jobs (a second set
            // would be picked up by the spinning workers within microseconds, nested in theirs).
            keep_workers_spinning(window);
            std::thread::sleep(Duration::from_millis(20));
            assert_eq!(
                spinning_workers(),
                2,
                "round {round}: a second set of spinning jobs"
            );
        });
        // They stop after the window, and the pool takes work again.
        assert!(
            wait_for(window * 4, || spinning_workers() == 0),
            "round {round}: {} workers still spinning after the window",
            spinning_workers()
        );
        let threads = pool.broadcast(|ctx| ctx.index());
        assert_eq!(threads, vec![0, 1, 2]);
    }
}

/// `burn_hetero::pool::run_on_pool`: the closure runs on a thread of the global pool (where it
/// has two threads or more) and returns its value; called from a pool thread, it runs in place.
#[test]
fn run_on_pool_moves_the_loop_onto_a_pool_thread() {
    use burn_hetero::pool::{build_global_pool, run_on_pool};
    let caller = std::thread::current().id();
    let secret: u64 = rng_for("run_on_pool").random();
    let (value, index, thread, nested_in_place) = run_on_pool(|| {
        let here = std::thread::current().id();
        let nested = run_on_pool(|| std::thread::current().id());
        (secret, rayon::current_thread_index(), here, nested == here)
    });
    assert_eq!(value, secret);
    assert!(nested_in_place, "a nested call left its pool thread");
    if rayon::current_num_threads() >= 2 {
        assert!(index.is_some(), "the closure ran outside the pool");
        assert_ne!(thread, caller);
    } else {
        assert_eq!(
            thread, caller,
            "with one pool thread the closure runs on the caller"
        );
    }
    // The pool exists now: building it again changes nothing.
    assert!(!build_global_pool(true));
}
