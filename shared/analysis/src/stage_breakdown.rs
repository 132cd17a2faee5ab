//! What the memory is at each stage of one iteration.
//!
//! The breakdown at the peak says what the peak is made of; an OOM in backward or in the
//! optimizer step asks what memory is at *that* stage: gradients appear in backward and go at
//! `zero_grad(set_to_none=True)`, optimizer state appears at the first step, activations rise in
//! the forward and are freed by backward. The zero-code hooks send, in the iteration after their
//! first breakdown, the breakdown again at its first mark and at every later mark where the
//! gradients or the optimizer state changed; this module reads the iteration mark by mark: the
//! primary metric there, the model's parts as last sent before the next mark, and the rest
//! (activations and temporaries on the GPU; on the host also data, the interpreter and its
//! libraries). A trace whose breakdowns come only at iteration ends (the tch `Session`, a
//! program's own `components()`) has no such iteration: one breakdown can't speak for the other
//! stages, where gradients may not exist.

use serde::Serialize;

use crate::marks::is_train;
use crate::metrics::{MarkValues, MetricKey};
use oomscope_format::{ComponentBreakdown, ProcessRole, Trace};

/// Most marks an iteration is read over (a stage that never comes back ends it here).
pub const MAX_MARKS: usize = 64;

/// The iteration read stage by stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StageBreakdown {
    /// The metric each row's `bytes` is (the primary).
    pub metric: MetricKey,
    /// The step of the iteration (of its last mark: a frozen forward that opens an iteration
    /// is numbered with the step before).
    pub step: u64,
    /// Its training marks, in order.
    pub rows: Vec<StageBreakdownRow>,
}

/// One mark of that iteration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StageBreakdownRow {
    /// The mark's stage.
    pub stage: String,
    /// The metric at the mark.
    pub bytes: u64,
    /// Parameters and buffers of the trained models and the untrained ones (an EMA copy, a
    /// frozen encoder).
    pub weights_bytes: u64,
    /// Gradients then.
    pub gradients_bytes: u64,
    /// Optimizer state then.
    pub optimizer_state_bytes: u64,
    /// `bytes` less the three (never below zero).
    pub rest_bytes: u64,
}

/// The iteration the hooks sent stage by stage: from the mark before the second breakdown
/// (the first is the iteration end before it) to the next mark of the same stage, when at
/// least two breakdowns came in that span; read mark by mark. `None` without one, without a
/// primary metric, or with fewer than two marks read.
pub fn stage_breakdown(trace: &Trace, values: &MarkValues) -> Option<StageBreakdown> {
    // Breakdowns carry no sender: with several ranks one rank's could be read at another's marks.
    let ranks = trace
        .processes
        .iter()
        .filter(|p| p.role == ProcessRole::Rank)
        .count();
    if ranks >= 2 {
        return None;
    }
    let primary = values.primary()?;
    let column = values.column(primary);
    let marks = &trace.marks;
    let components = &trace.components;
    let second = components.get(1)?;
    let start = marks
        .partition_point(|m| m.t_us <= second.t_us)
        .checked_sub(1)?;
    let stage = marks[start].name.as_ref();
    let end = (start + 1..marks.len().min(start + MAX_MARKS))
        .find(|&j| marks[j].name.as_ref() == stage)
        .unwrap_or(marks.len().min(start + MAX_MARKS));
    let until_us = marks.get(end).map_or(u64::MAX, |m| m.t_us);
    let sent = components
        .iter()
        .filter(|c| (marks[start].t_us..until_us).contains(&c.t_us))
        .count();
    if sent < 2 {
        return None;
    }
    let in_iteration: Vec<usize> = (start..end).filter(|&i| is_train(marks[i].phase)).collect();
    let rows: Vec<StageBreakdownRow> = in_iteration
        .iter()
        .filter_map(|&i| {
            let bytes = column.get(i)?;
            let c = crate::peaks::breakdown_near(trace, marks[i].t_us)?;
            Some(row(marks[i].name.as_ref(), bytes, c))
        })
        .collect();
    (rows.len() >= 2).then(|| StageBreakdown {
        metric: values.key(primary),
        step: marks[in_iteration[in_iteration.len() - 1]].step,
        rows,
    })
}

fn row(stage: &str, bytes: u64, c: &ComponentBreakdown) -> StageBreakdownRow {
    let extras: u64 = c.extras.iter().map(|e| e.bytes).sum();
    let weights_bytes = c
        .parameters_bytes
        .saturating_add(c.buffers_bytes)
        .saturating_add(extras);
    StageBreakdownRow {
        stage: stage.to_owned(),
        bytes,
        weights_bytes,
        gradients_bytes: c.gradients_bytes,
        optimizer_state_bytes: c.optimizer_state_bytes,
        rest_bytes: bytes
            .saturating_sub(weights_bytes)
            .saturating_sub(c.gradients_bytes)
            .saturating_sub(c.optimizer_state_bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::units::MIB;
    use oomscope_testkit::run::Run;

    fn breakdown(t_us: u64, step: u64, gradients: u64, state: u64) -> ComponentBreakdown {
        ComponentBreakdown {
            t_us,
            step,
            parameters_bytes: 100 * MIB,
            buffers_bytes: MIB,
            gradients_bytes: gradients * MIB,
            optimizer_state_bytes: state * MIB,
            ..ComponentBreakdown::default()
        }
    }

    #[test]
    fn the_iteration_after_the_first_breakdown_is_read_stage_by_stage() {
        let mut trace = Run {
            steps: 4,
            ..Run::default()
        }
        .build();
        let at = |step: u64, stage: &str| {
            trace
                .marks
                .iter()
                .find(|m| m.step == step && m.name.as_ref() == stage)
                .unwrap()
                .t_us
        };
        // The end of iteration 0 (gradients and state), then iteration 1: its first mark
        // (gradients set to None), and after its backward (gradients again).
        trace.components = vec![
            breakdown(at(0, "post_optimizer_step") + 1, 0, 100, 200),
            breakdown(at(1, "pre_forward") + 1, 1, 0, 200),
            breakdown(at(1, "post_backward") + 1, 1, 100, 200),
        ];
        let b = stage_breakdown(&trace, &MarkValues::new(&trace)).unwrap();
        assert_eq!(b.step, 1);
        let stages: Vec<(&str, u64)> = b
            .rows
            .iter()
            .map(|r| (r.stage.as_str(), r.gradients_bytes / MIB))
            .collect();
        assert_eq!(
            stages,
            [
                ("pre_forward", 0),
                ("post_forward", 0),
                ("post_backward", 100),
                ("post_optimizer_step", 100)
            ]
        );
        for r in &b.rows {
            assert_eq!(r.weights_bytes, 101 * MIB);
            assert_eq!(r.optimizer_state_bytes, 200 * MIB);
            assert_eq!(
                r.rest_bytes,
                r.bytes - r.weights_bytes - r.gradients_bytes - r.optimizer_state_bytes
            );
        }
    }

    #[test]
    fn breakdowns_only_at_iteration_ends_say_nothing_per_stage() {
        let mut trace = Run {
            steps: 4,
            ..Run::default()
        }
        .build();
        let ends: Vec<(u64, u64)> = trace
            .marks
            .iter()
            .filter(|m| m.name.as_ref() == "post_optimizer_step")
            .map(|m| (m.t_us, m.step))
            .collect();
        trace.components = ends
            .into_iter()
            .map(|(t, step)| breakdown(t + 1, step, 100, 200))
            .collect();
        assert_eq!(stage_breakdown(&trace, &MarkValues::new(&trace)), None);
    }
}
