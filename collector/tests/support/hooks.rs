//! What the zero-code hooks' test targets share (`python_hooks.rs`, `python_hooks_findings.rs`,
//! `python_hooks_processes.rs`, each `#[path = "support/hooks.rs"] mod hooks;`): the six stages,
//! counting marks, who sent them, the program's own stderr. Apart from `mod.rs` because only
//! these targets use it; each uses part of it, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::process::Output;

use oomscope_format::{Phase, Trace};

use crate::support::stderr;

/// The six stages the hooks mark in a training step, in loop order.
pub const STAGES: [&str; 6] = [
    "pre_forward",
    "post_forward",
    "pre_backward",
    "post_backward",
    "pre_optimizer_step",
    "post_optimizer_step",
];

/// The program's own stderr lines out of the collector's stderr (which adds `oomscope:` lines).
pub fn program_stderr(o: &Output) -> String {
    stderr(o)
        .lines()
        .filter(|l| !l.starts_with("oomscope:"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The marks of one stage in one phase.
pub fn count(t: &Trace, stage: &str, phase: Phase) -> usize {
    t.marks
        .iter()
        .filter(|m| m.name.as_ref() == stage && m.phase == phase)
        .count()
}

/// Who sent the marks: each mark's (pid, rank).
pub fn senders(t: &Trace) -> BTreeSet<(Option<u32>, Option<u32>)> {
    t.marks.iter().map(|m| (m.pid, m.rank)).collect()
}
