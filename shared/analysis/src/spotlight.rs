//! Where the text and the page put their emphasis, decided once from the analysis: the rows and
//! cells that are a finding's evidence (the stages a leak rests on, the OOM's steps, the eval that
//! kept the most) and never the warm-up; and the steady growth too slow to call a leak, which a
//! clean verdict must still state.

use crate::analysis::Analysis;
use crate::finding::FindingKind;
use crate::leaks::{GrowthFit, SHORT_MIN_STEPS, STEADY_R_SQUARED};
use crate::recommend::{Diagnose, EvalRetainsMemory, RuleContext};
use oomscope_format::Trace;

/// The fastest growth that is as straight as a steady leak and still rising, but too small to
/// be one (under its growth floor): the terminal and the clean verdict say it, so that "no
/// problem found" never reads as "memory does not grow".
pub fn slow_growth(analysis: &Analysis) -> Option<&GrowthFit> {
    analysis
        .leak_fits
        .iter()
        .filter(|f| {
            // Not a leak, and not the workers' copies (their finding tells that growth).
            !f.is_leak()
                && !f.copied_by_workers
                && f.sustained
                && f.train_slope_bytes_per_step > 0.0
                && f.train_r_squared >= STEADY_R_SQUARED
                && f.steps >= SHORT_MIN_STEPS
        })
        .max_by(|a, b| {
            a.train_slope_bytes_per_step
                .total_cmp(&b.train_slope_bytes_per_step)
        })
}

/// Where the page puts its emphasis: on the findings' evidence, never on warm-up.
///
/// The stage and step tables highlight these rows and cells; the largest rise between two marks
/// is shown too but only as a fact, and flagged when it is the first step's warm-up (allocating
/// weights, optimizer state and the caching allocator's first blocks is not a problem).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Spotlight {
    /// Stages whose memory grows across steps (the `leak` finding's evidence).
    pub leak_stages: Vec<String>,
    /// Steps at which an out-of-memory error happened.
    pub oom_steps: Vec<u64>,
    /// The step at which the eval that kept the most memory began (`eval-retains-memory`).
    pub retaining_eval_step: Option<u64>,
    /// The largest rise between two marks happened in the run's first step.
    pub growth_is_warm_up: bool,
}

/// The evidence of `analysis`'s findings, as rows and cells to highlight.
pub fn spotlight(trace: &Trace, analysis: &Analysis) -> Spotlight {
    let has = |kind: FindingKind| analysis.findings.iter().any(|f| f.kind() == kind);
    let mut leak_stages: Vec<String> = Vec::new();
    if has(FindingKind::Leak) {
        for f in analysis.leaks() {
            if !leak_stages.contains(&f.stage) {
                leak_stages.push(f.stage.clone());
            }
        }
    }
    let ctx = RuleContext { trace, analysis };
    let retaining_eval_step = has(FindingKind::EvalRetainsMemory)
        .then(|| EvalRetainsMemory.detect(&ctx))
        .flatten()
        .map(|r| r.worst.entry_step);
    let first_step = trace.marks.first().map(|m| m.step);
    Spotlight {
        leak_stages,
        // The step the error names, else the step of the last mark before it.
        oom_steps: analysis
            .ooms
            .iter()
            .filter_map(|o| {
                o.event.step.or_else(|| {
                    crate::marks::mark_at_or_before(trace, o.event.t_us)
                        .map(|i| trace.marks[i].step)
                })
            })
            .collect(),
        retaining_eval_step,
        growth_is_warm_up: analysis
            .largest_growth
            .as_ref()
            .is_some_and(|g| Some(g.step) == first_step),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AnalysisOptions, analyze};
    use oomscope_format::decode;
    use oomscope_testkit::synth::TrainingRun;

    #[test]
    fn the_spotlight_is_on_the_evidence_not_the_warm_up() {
        let run = TrainingRun {
            steps: 60,
            leak_bytes_per_step: 64 << 20,
            ..TrainingRun::default()
        };
        let trace = decode(&run.to_bytes()).unwrap().trace;
        let analysis = analyze(&trace, &AnalysisOptions::default());
        let s = spotlight(&trace, &analysis);
        let leaking: Vec<_> = analysis.leaks().map(|f| f.stage.clone()).collect();
        assert!(!s.leak_stages.is_empty());
        assert!(s.leak_stages.iter().all(|st| leaking.contains(st)));
        assert!(s.oom_steps.is_empty());
        assert_eq!(s.retaining_eval_step, None);

        let clean = decode(&TrainingRun::default().to_bytes()).unwrap().trace;
        let analysis = analyze(&clean, &AnalysisOptions::default());
        let s = spotlight(&clean, &analysis);
        assert!(s.leak_stages.is_empty());
        // The default run allocates its weights in the first step: the largest rise is warm-up.
        let g = analysis.largest_growth.as_ref().unwrap();
        assert_eq!(s.growth_is_warm_up, g.step == clean.marks[0].step);

        use oomscope_format::units::GIB;
        use oomscope_testkit::run::Run;
        let trace = Run {
            steps: 200,
            oom_at_step: Some(199),
            eval_every: Some(50),
            eval_jump_bytes: 2 * GIB,
            eval_retained_bytes: GIB,
            ..Run::default()
        }
        .build();
        let analysis = analyze(&trace, &AnalysisOptions::default());
        let s = spotlight(&trace, &analysis);
        let entries: Vec<u64> = analysis
            .phase_transitions
            .iter()
            .map(|t| t.entry_step)
            .collect();
        let step = s.retaining_eval_step.expect("the retaining eval");
        assert!(entries.contains(&step), "{step} in {entries:?}");
        assert_eq!(s.oom_steps, vec![199]);
    }
}
