//! Counters of the placed ops: what ran where, how many bytes crossed the bus, where the time went.

use crate::placement::{OpKind, Precision};
use core::fmt;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// Where an op actually ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ran {
    /// On the CPU backend because it was placed there.
    Cpu,
    /// On the CPU backend although it was placed on the accelerator (see the logged cause).
    CpuFallback,
    /// On the accelerator with operands at this precision.
    Accelerator(Precision),
}

impl fmt::Display for Ran {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ran::Cpu => f.write_str("cpu"),
            Ran::CpuFallback => f.write_str("cpu (fallback)"),
            Ran::Accelerator(p) => write!(f, "accelerator/{p}"),
        }
    }
}

/// Accumulated counters of one op kind at one place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpCounters {
    /// Number of calls.
    pub calls: u64,
    /// Output elements produced.
    pub elements: u64,
    /// Floating-point operations (multiply and add counted separately).
    pub flops: u64,
    /// Bytes uploaded to the accelerator.
    pub bytes_up: u64,
    /// Bytes downloaded from the accelerator.
    pub bytes_down: u64,
    /// Operand bytes the op found on the accelerator already and did not upload: an earlier
    /// upload of the same CPU buffer (a conv's forward input and weight serve its backward).
    pub bytes_reused: u64,
    /// Calls whose result was read back after the call returned: the next CPU ops ran while
    /// the accelerator computed it (a weight gradient; see `Part::read_later`). Its download
    /// time is not counted: nothing waits for it.
    pub deferred_reads: u64,
    /// Time spent uploading (until the accelerator holds the operands).
    pub upload: Duration,
    /// Time the accelerator spent computing (launch to completion).
    pub compute: Duration,
    /// Time spent downloading the result.
    pub download: Duration,
    /// CPU time: the whole op when it ran on the CPU; reading operands, casting and writing the
    /// result back when it ran on the accelerator.
    pub cpu: Duration,
}

impl OpCounters {
    /// Total wall time of the recorded calls.
    pub fn total_time(&self) -> Duration {
        self.upload + self.compute + self.download + self.cpu
    }

    pub(crate) fn add(&mut self, other: &OpCounters) {
        self.calls += other.calls;
        self.elements += other.elements;
        self.flops += other.flops;
        self.bytes_up += other.bytes_up;
        self.bytes_down += other.bytes_down;
        self.bytes_reused += other.bytes_reused;
        self.deferred_reads += other.deferred_reads;
        self.upload += other.upload;
        self.compute += other.compute;
        self.download += other.download;
        self.cpu += other.cpu;
    }
}

/// A snapshot of all counters, see [`stats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    entries: BTreeMap<(OpKind, Ran), OpCounters>,
}

impl Stats {
    /// Counters of `op` where it ran as `ran` (zero if it never did).
    pub fn get(&self, op: OpKind, ran: Ran) -> OpCounters {
        self.entries.get(&(op, ran)).copied().unwrap_or_default()
    }

    /// Counters of `op` summed over every place.
    pub fn total(&self, op: OpKind) -> OpCounters {
        let mut sum = OpCounters::default();
        for ((o, _), c) in &self.entries {
            if *o == op {
                sum.add(c);
            }
        }
        sum
    }

    /// Calls of `op` that ran on the accelerator, at any precision.
    pub fn accelerator_calls(&self, op: OpKind) -> u64 {
        self.entries
            .iter()
            .filter(|((o, r), _)| *o == op && matches!(r, Ran::Accelerator(_)))
            .map(|(_, c)| c.calls)
            .sum()
    }

    /// Every (op, place, counters) entry, sorted.
    pub fn entries(&self) -> impl Iterator<Item = (OpKind, Ran, &OpCounters)> {
        self.entries.iter().map(|((o, r), c)| (*o, *r, c))
    }

    /// The counters accumulated since `earlier` was taken.
    pub fn since(&self, earlier: &Stats) -> Stats {
        let mut entries = BTreeMap::new();
        for (key, c) in &self.entries {
            let e = earlier.entries.get(key).copied().unwrap_or_default();
            let d = OpCounters {
                calls: c.calls - e.calls,
                elements: c.elements - e.elements,
                flops: c.flops - e.flops,
                bytes_up: c.bytes_up - e.bytes_up,
                bytes_down: c.bytes_down - e.bytes_down,
                bytes_reused: c.bytes_reused - e.bytes_reused,
                deferred_reads: c.deferred_reads - e.deferred_reads,
                upload: c.upload.saturating_sub(e.upload),
                compute: c.compute.saturating_sub(e.compute),
                download: c.download.saturating_sub(e.download),
                cpu: c.cpu.saturating_sub(e.cpu),
            };
            if d.calls > 0 {
                entries.insert(*key, d);
            }
        }
        Stats { entries }
    }
}

impl fmt::Display for Stats {
    /// A markdown table, one row per (op, place).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "| op | ran on | calls | read later | MB up | MB reused | MB down | upload ms | compute ms | download ms | cpu ms |"
        )?;
        writeln!(f, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")?;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        for (op, ran, c) in self.entries() {
            writeln!(
                f,
                "| {op} | {ran} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
                c.calls,
                c.deferred_reads,
                c.bytes_up as f64 / 1e6,
                c.bytes_reused as f64 / 1e6,
                c.bytes_down as f64 / 1e6,
                ms(c.upload),
                ms(c.compute),
                ms(c.download),
                ms(c.cpu)
            )?;
        }
        Ok(())
    }
}

static STATS: Mutex<Stats> = Mutex::new(Stats {
    entries: BTreeMap::new(),
});

/// A snapshot of the counters of every `Hetero` backend in this process.
pub fn stats() -> Stats {
    STATS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Sets every counter back to zero.
pub fn reset_stats() {
    STATS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entries
        .clear();
}

pub(crate) fn record(op: OpKind, ran: Ran, counters: OpCounters) {
    let mut stats = STATS.lock().unwrap_or_else(|e| e.into_inner());
    stats.entries.entry((op, ran)).or_default().add(&counters);
}
