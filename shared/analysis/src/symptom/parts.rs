//! What a rise is made of, by kind of memory, each part measured over the rise's own span: the
//! model's state the hooks counted (parameters, gradients, the optimizer's state), resident pages
//! of memory-mapped files, the shared-memory tmpfs, and the private memory of the tree's other
//! processes. What the parts do not cover stays unexplained, and is said to be.

use oomscope_format::{CounterKind, Trace};
use serde::Serialize;

use crate::metrics::counter_with_data;

/// A kind of memory a rise can be made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PartKind {
    /// The trained models' parameters.
    Parameters,
    /// Their gradients.
    Gradients,
    /// The optimizers' state (moments, L-BFGS history).
    OptimizerState,
    /// Resident pages of memory-mapped files (the kernel's to drop).
    FilePages,
    /// Bytes on the shared-memory tmpfs (`/dev/shm`).
    SharedMemory,
    /// The private memory of the tree's processes other than the program (workers, pools).
    ChildProcesses,
}

/// One kind's part of a rise.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Part {
    /// The kind.
    pub kind: PartKind,
    /// How much it changed over the rise's span (negative: it fell).
    pub bytes: i64,
}

/// The parts of a rise of the host's memory (`host`) or a device's between `from_us` and `to_us`;
/// `model_here`: the model's state lives in this memory (a run without a device's readings keeps
/// it on the host). Kinds the trace does not measure, or that did not change, are left out.
pub fn parts(trace: &Trace, host: bool, model_here: bool, from_us: u64, to_us: u64) -> Vec<Part> {
    let mut out = Vec::new();
    let mut push = |kind: PartKind, bytes: i64| {
        if bytes != 0 {
            out.push(Part { kind, bytes });
        }
    };
    if let (Some(a), Some(b)) = (
        component_at(trace, from_us),
        component_at(trace, to_us).or_else(|| trace.components.last()),
    ) && model_here
    {
        let d = |x: u64, y: u64| y as i64 - x as i64;
        push(
            PartKind::Parameters,
            d(a.parameters_bytes, b.parameters_bytes),
        );
        push(PartKind::Gradients, d(a.gradients_bytes, b.gradients_bytes));
        push(
            PartKind::OptimizerState,
            d(a.optimizer_state_bytes, b.optimizer_state_bytes),
        );
    }
    if !host {
        return out;
    }
    for (kind, counter) in [
        (PartKind::FilePages, CounterKind::HostRssFile),
        (PartKind::SharedMemory, CounterKind::ShmUsed),
    ] {
        if let Some(id) = counter_with_data(trace, counter)
            && let (Some(a), Some(b)) = (
                trace.samples.value_at(id, from_us),
                trace.samples.value_at(id, to_us),
            )
        {
            push(kind, b as i64 - a as i64);
        }
    }
    push(
        PartKind::ChildProcesses,
        children_private(trace, to_us) - children_private(trace, from_us),
    );
    out
}

/// The breakdown in effect at `t_us`: the last one at or before it, else the first.
fn component_at(trace: &Trace, t_us: u64) -> Option<&oomscope_format::ComponentBreakdown> {
    let c = &trace.components;
    let i = c.partition_point(|x| x.t_us <= t_us);
    c.get(i.checked_sub(1)?).or_else(|| c.first())
}

/// The private memory of the tree's processes other than the program at `t_us` (each one's last
/// reading at or before it; a process read once after `t_us` counts as none then).
fn children_private(trace: &Trace, t_us: u64) -> i64 {
    let program = trace.metadata.pid;
    let mut last: std::collections::BTreeMap<u32, u64> = std::collections::BTreeMap::new();
    for r in trace
        .process_memory
        .iter()
        .filter(|r| r.t_us <= t_us && r.pid != program)
    {
        last.insert(r.pid, r.private_bytes);
    }
    last.values().sum::<u64>() as i64
}
