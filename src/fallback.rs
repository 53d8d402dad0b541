//! Running accelerator work so that a failure costs nothing but a warning.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

thread_local! {
    static GUARDED: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

/// Number of [`guarded`] calls in progress, in any thread.
static GUARDING: AtomicUsize = AtomicUsize::new(0);
/// The last panic of another thread (a runtime's device thread failing to start) while some
/// [`guarded`] call was in progress.
static OTHER_THREAD_PANIC: Mutex<Option<String>> = Mutex::new(None);

fn describe(info: &std::panic::PanicHookInfo<'_>) -> String {
    let msg = if let Some(s) = info.payload().downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = info.payload().downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    };
    let at = info
        .location()
        .map(|l| format!(" (at {}:{})", l.file(), l.line()))
        .unwrap_or_default();
    format!("{msg}{at}")
}

/// Installs, once, a panic hook that stays quiet for panics inside [`guarded`] (they become a
/// logged fallback, not a trace on stderr) and defers to the previous hook for all others.
/// While a guarded call runs, panics of other threads are quiet too: runtimes initialise a
/// device on a thread of their own, whose panic (no driver, no adapter) is the real cause of
/// the guarded call's failure and is reported with it.
fn install_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if GUARDED.with(Cell::get) {
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(describe(info)));
            } else if GUARDING.load(Ordering::SeqCst) > 0 {
                *OTHER_THREAD_PANIC.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(describe(info));
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs `f`, turning a panic inside it into `Err(message)`; where another thread panicked
/// meanwhile (a device thread), its message is the one returned.
pub(crate) fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    install_hook();
    GUARDING.fetch_add(1, Ordering::SeqCst);
    let outer = GUARDED.with(|g| g.replace(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(outer));
    GUARDING.fetch_sub(1, Ordering::SeqCst);
    let other = OTHER_THREAD_PANIC
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    result.map_err(|_| {
        let own = LAST_PANIC
            .with(|p| p.borrow_mut().take())
            .unwrap_or_else(|| "unknown panic".to_string());
        match other {
            Some(other) => format!("{other} (on the device's thread, after: {own})"),
            None => own,
        }
    })
}

static WARNED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Logs `message` as a warning the first time this `cause` is seen in the process.
///
/// Goes through the `log` crate when a logger is installed, else straight to stderr, so that a
/// fallback is never silent.
pub(crate) fn warn_once(cause: &str, message: &str) {
    let first = WARNED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashSet::new)
        .insert(cause.to_string());
    if first {
        if log::log_enabled!(log::Level::Warn) {
            log::warn!("{message}");
        } else {
            eprintln!("[burn-hetero] warning: {message}");
        }
    }
}

/// Logs once per op and reason that a CPU op's own pass was refused and the backend's
/// tensor ops run in its place; `needs` says what the own pass needs.
pub(crate) fn op_by_op(op: &str, why: &str, needs: &str) {
    warn_once(
        &format!("{op}: {why}"),
        &format!("{op} runs op by op on the CPU backend ({why}); {needs}"),
    );
}

/// Fault injection, for testing the fallback path: the accelerator op with this ordinal fails.
static FAIL_AT: AtomicU64 = AtomicU64::new(0);
static ACCEL_OPS: AtomicU64 = AtomicU64::new(0);

/// Makes the `k`-th accelerator op from now (1-based) fail as a kernel failure would;
/// `None` clears it. Meant for tests of the fallback path and of strict mode.
pub fn inject_accelerator_failure(k: Option<u64>) {
    let base = ACCEL_OPS.load(Ordering::SeqCst);
    FAIL_AT.store(k.map_or(0, |k| base + k), Ordering::SeqCst);
}

/// Counts one accelerator op; panics if fault injection chose it.
pub(crate) fn injection_point() {
    let n = ACCEL_OPS.fetch_add(1, Ordering::SeqCst) + 1;
    if n == FAIL_AT.load(Ordering::SeqCst) {
        panic!("injected accelerator failure (op #{n})");
    }
}
