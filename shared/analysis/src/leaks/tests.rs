//! The fits and their verdicts on simulated runs.

use super::points::distinct_steps;
use super::*;
use crate::marks::is_train;
use crate::prepared::Prepared;
use oomscope_format::units::{GIB, MIB};
use oomscope_format::{CounterKind, Trace};
use oomscope_testkit::run::Run;

fn fits_of(trace: &Trace) -> Vec<GrowthFit> {
    let workers = crate::workers::growing_workers(trace);
    leak_fits(trace, &Prepared::new(trace), &workers, DEFAULT_MIN_STEPS)
}

fn fits(run: &Run) -> Vec<GrowthFit> {
    let trace = run.build();
    fits_of(&trace)
}

fn leaks(run: &Run) -> Vec<GrowthFit> {
    fits(run).into_iter().filter(GrowthFit::is_leak).collect()
}

#[test]
fn healthy_run_has_flat_fits_and_no_leak() {
    let fits = fits(&Run::default());
    // 4 stages × (allocated, reserved, host_rss).
    assert_eq!(fits.len(), 12);
    assert_eq!(fits[0].stage, "pre_forward");
    assert_eq!(fits[0].metric.label(), "allocated");
    assert!(fits.iter().all(|f| !f.is_leak() && f.projection.is_none()));
    assert!(fits.iter().all(|f| f.slope_bytes_per_step.abs() < 1.0));
}

#[test]
fn planted_leak_is_found_and_projected() {
    let run = Run {
        steps: 100,
        leak_bytes_per_step: 12 * MIB,
        ..Run::default()
    };
    let leaks = leaks(&run);
    let post_opt = leaks
        .iter()
        .find(|f| f.stage == "post_optimizer_step" && f.metric.label() == "allocated")
        .unwrap();
    assert!((post_opt.slope_bytes_per_step - (12 * MIB) as f64).abs() < 1.0);
    assert!(post_opt.r_squared > 0.999);
    assert_eq!(
        (post_opt.first_step, post_opt.last_step, post_opt.steps),
        (0, 99, 100)
    );
    assert_eq!(post_opt.growth_bytes, (99 * 12 * MIB) as i64);
    // Perfectly steady over 100 steps: only the absolute floor applies.
    assert_eq!(post_opt.min_leak_growth_bytes, MIN_GROWTH_BYTES);
    let p = post_opt.projection.as_ref().unwrap();
    assert_eq!(p.limit_basis, LimitBasis::DeviceTotal);
    // The highest stage at step 99 is post_forward: 28 GiB + 99 × 12 MiB.
    let current = 28 * GIB + 99 * 12 * MIB;
    assert_eq!(p.current_bytes, current);
    let remaining = (80 * GIB - current).div_ceil(12 * MIB);
    assert_eq!(p.steps_remaining, remaining);
    assert_eq!(p.full_at_step, 99 + remaining);
    assert_eq!(p.us_per_step, Some(250_000.0));
    assert_eq!(p.time_to_full_us, Some(remaining * 250_000));
    // Reserved grows with it; RSS does not.
    assert!(leaks.iter().any(|f| f.metric.label() == "reserved"));
    assert!(leaks.iter().all(|f| f.metric.label() != "host.rss"));
}

#[test]
fn a_long_run_is_fitted_on_each_block_s_last_step_with_its_rate_and_projection() {
    // 10 000 steps, a mark a stage each: more than a fit reads one by one.
    let leak = 2 * MIB;
    let run = Run {
        steps: 10_000,
        leak_bytes_per_step: leak,
        ..Run::default()
    };
    let fit = leaks(&run)
        .into_iter()
        .find(|f| f.stage == "post_optimizer_step" && f.metric.label() == "allocated")
        .unwrap();
    // Blocks of four steps: the first step and each block's last (step 3, 7, … 9 999).
    assert_eq!(fit.steps_per_point, 4);
    assert_eq!((fit.points, fit.steps), (2_501, 10_000));
    assert!(fit.is_leak());
    assert_eq!((fit.first_step, fit.last_step), (0, 9_999));
    assert!((fit.slope_bytes_per_step - leak as f64).abs() < 1.0);
    assert_eq!(fit.growth_bytes, (9_999 * leak) as i64);
    let p = fit.projection.unwrap();
    assert_eq!(p.current_bytes, 28 * GIB + 9_999 * leak);
    assert_eq!(p.us_per_step, Some(250_000.0));
    // The same run without the leak: flat, thinned the same way.
    let clean = fits(&Run {
        steps: 10_000,
        ..Run::default()
    });
    assert!(clean.iter().all(|f| !f.is_leak() && f.steps_per_point == 4));
}

#[test]
fn a_run_that_never_trains_is_fitted_per_forward() {
    // A serving loop: every mark an eval one, the step number never moving.
    let mut trace = Run {
        steps: 100,
        stages: vec!["pre_forward", "post_forward"],
        leak_bytes_per_step: 12 * MIB,
        ..Run::default()
    }
    .build();
    for m in &mut trace.marks {
        m.phase = oomscope_format::Phase::Eval;
        m.step = 0;
    }
    assert_eq!(Clock::of(&trace), Clock::Forward);
    let fits = fits_of(&trace);
    let pre = fits
        .iter()
        .find(|f| f.stage == "pre_forward" && f.metric.label() == "allocated" && f.is_leak())
        .expect("a leak per forward");
    assert_eq!(pre.clock, Clock::Forward);
    assert!((pre.slope_bytes_per_step - (12 * MIB) as f64).abs() < 1.0);
    assert_eq!((pre.first_step, pre.last_step), (1, 100));
}

#[test]
fn memory_kept_at_epoch_ends_is_fitted_per_epoch_not_per_step() {
    // Six epochs of ten steps; at each epoch's end the program keeps 2 GiB (a copy of the
    // weights): flat within epochs.
    let mut trace = Run {
        steps: 60,
        ..Run::default()
    }
    .build();
    oomscope_testkit::run::keep_at_epoch_ends(&mut trace, 10, 2 * GIB);
    let fits = fits_of(&trace);
    let allocated = |clock| {
        fits.iter()
            .find(|f| {
                f.stage == "pre_forward" && f.metric.label() == "allocated" && f.clock == clock
            })
            .unwrap()
    };
    let per_step = allocated(Clock::Step);
    assert!(!per_step.is_leak(), "{per_step:#?}");
    let per_epoch = allocated(Clock::Epoch);
    assert!(per_epoch.is_leak(), "{per_epoch:#?}");
    assert!((per_epoch.slope_bytes_per_step - (2 * GIB) as f64).abs() < 1.0);
    assert_eq!(
        (
            per_epoch.first_step,
            per_epoch.last_step,
            per_epoch.transitions
        ),
        (0, 5, 5)
    );
    // Without epochs in the marks the same staircase has no epoch fit.
    for m in &mut trace.marks {
        m.epoch = 0;
    }
    let fits = fits_of(&trace);
    assert!(fits.iter().all(|f| f.clock == Clock::Step));
}

#[test]
fn near_misses_are_not_leaks() {
    // Too small: 100 steps × 0.5 MiB = 50 MiB, below 1% of 80 GiB.
    assert!(
        leaks(&Run {
            steps: 100,
            leak_bytes_per_step: MIB / 2,
            ..Run::default()
        })
        .is_empty()
    );
    // Too short: 7 steps, even perfectly straight, without an OOM at the end.
    assert!(
        leaks(&Run {
            steps: 7,
            leak_bytes_per_step: 100 * MIB,
            ..Run::default()
        })
        .is_empty()
    );
    // One jump is not steady growth: eval at step 29 keeps 4 GiB, a step function whose
    // line fit explains only 75% of the variance.
    let jump = Run {
        steps: 60,
        eval_every: Some(30),
        eval_retained_bytes: 4 * GIB,
        ..Run::default()
    };
    let fits = fits(&jump);
    let post_opt = fits
        .iter()
        .find(|f| f.stage == "post_optimizer_step")
        .unwrap();
    assert!(post_opt.r_squared < MIN_R_SQUARED, "{}", post_opt.r_squared);
    assert!(fits.iter().all(|f| !f.is_leak()));
}

#[test]
fn a_small_steady_leak_on_a_large_device_is_a_leak() {
    // 4 MiB per step for 60 steps: 236 MiB, under 1% of 80 GiB, but perfectly steady.
    let run = Run {
        steps: 60,
        leak_bytes_per_step: 4 * MIB,
        ..Run::default()
    };
    let found = leaks(&run);
    assert!(!found.is_empty());
    assert!(
        found
            .iter()
            .all(|f| (f.slope_bytes_per_step - (4 * MIB) as f64).abs() < 1.0)
    );
    // The same rate over 20 steps (80 MiB) is too short to call steady: 1% of 80 GiB applies.
    let short = Run {
        steps: 20,
        leak_bytes_per_step: 4 * MIB,
        ..Run::default()
    };
    assert!(leaks(&short).is_empty());
    // Steady but tiny: 1 MiB per step for 60 steps stays under the 64 MiB floor.
    let tiny = Run {
        steps: 60,
        leak_bytes_per_step: MIB,
        ..Run::default()
    };
    assert!(leaks(&tiny).is_empty());
}

#[test]
fn steps_from_eval_are_not_fitted() {
    // Eval jumps 20 GiB every 5 steps; eval marks are excluded, so no train fit sees them.
    let run = Run {
        steps: 60,
        eval_every: Some(5),
        eval_jump_bytes: 20 * GIB,
        ..Run::default()
    };
    let fits = fits(&run);
    assert!(fits.iter().all(|f| f.stage != "eval_forward"));
    assert!(fits.iter().all(|f| !f.is_leak()));
}

#[test]
fn host_rss_growth_projects_against_host_memory() {
    let run = Run {
        steps: 50,
        host_rss_growth_per_step: 200 * MIB,
        ..Run::default()
    };
    let leaks = leaks(&run);
    let rss = leaks
        .iter()
        .find(|f| f.metric.label() == "host.rss")
        .unwrap();
    assert!(rss.host_memory);
    let p = rss.projection.as_ref().unwrap();
    assert_eq!(p.limit_basis, LimitBasis::HostMemory);
    assert_eq!(p.limit_bytes, 256 * GIB);
    assert!(leaks.iter().all(|f| f.metric.label() == "host.rss"));
}

#[test]
fn a_short_straight_leak_is_found_without_waiting_for_twenty_steps() {
    // +64 MiB kept every step for 12 steps (+704 MiB fitted): the example.
    let found = leaks(&Run {
        steps: 12,
        leak_bytes_per_step: 64 * MIB,
        ..Run::default()
    });
    let post_opt = found
        .iter()
        .find(|f| f.stage == "post_optimizer_step" && f.metric.label() == "allocated")
        .unwrap();
    assert_eq!(post_opt.verdict, LeakVerdict::Leak(LeakEvidence::Short));
    assert!((post_opt.slope_bytes_per_step - (64 * MIB) as f64).abs() < 1.0);
    assert!(post_opt.sustained);
    // Half a percent of 80 GiB.
    assert_eq!(
        post_opt.min_leak_growth_bytes,
        ((80 * GIB) as f64 * SHORT_MIN_GROWTH_FRACTION_OF_LIMIT) as u64
    );
}

/// A run whose allocated memory rises `warmup` per step for the first `warm_steps` steps and
/// then stays flat (a cache filling, lazily built buffers), with `noise` added to every mark
/// alternately up and down.
fn warmup_run(steps: u64, warm_steps: u64, warmup: u64, noise: u64) -> Trace {
    let mut trace = Run {
        steps,
        ..Run::default()
    }
    .build();
    trace.marks.edit_indexed(|i, mark| {
        let extra = warmup * mark.step.min(warm_steps) + if i % 2 == 0 { noise } else { 0 };
        if let Some(s) = mark.allocator.as_mut() {
            s.allocated_bytes += extra;
            s.peak_allocated_bytes += extra;
            s.reserved_bytes += extra;
        }
    });
    trace
}

#[test]
fn warm_up_and_noise_in_a_short_run_are_not_leaks() {
    let of = |trace: &Trace| -> Vec<GrowthFit> {
        fits_of(trace)
            .into_iter()
            .filter(GrowthFit::is_leak)
            .collect()
    };
    // 300 MiB per step for 4 steps, then flat for 8: a warm-up that levelled off.
    let warm = warmup_run(12, 4, 300 * MIB, 0);
    assert!(of(&warm).is_empty(), "{:#?}", of(&warm));
    // The same levelled-off shape, over 25 steps, is no leak either.
    assert!(of(&warmup_run(25, 4, 300 * MIB, 0)).is_empty());
    // ±500 MiB of noise around a flat line.
    assert!(of(&warmup_run(12, 0, 0, 500 * MIB)).is_empty());
}

#[test]
fn growth_that_ends_in_an_oom_is_a_leak_after_a_few_steps() {
    // 2 GiB kept per step, OOM in the forward pass of step 5: five steps of evidence.
    let oom = Run {
        steps: 6,
        leak_bytes_per_step: 2 * GIB,
        oom_at_step: Some(5),
        ..Run::default()
    };
    let found = leaks(&oom);
    assert!(
        found
            .iter()
            .any(|f| f.verdict == LeakVerdict::Leak(LeakEvidence::BeforeOom)),
        "{found:#?}"
    );
    // The same growth in a run that finished cleanly is too short to tell.
    let clean = Run {
        oom_at_step: None,
        ..oom
    };
    assert!(leaks(&clean).is_empty());
}

#[test]
fn memory_kept_at_every_eval_is_not_a_per_step_leak() {
    // Flat training steps; each eval (every 10 steps) keeps 200 MiB: a staircase whose line
    // fit is straight enough to pass for a leak.
    let staircase = Run {
        steps: 100,
        eval_every: Some(10),
        eval_jump_bytes: GIB,
        eval_retained_bytes: 200 * MIB,
        ..Run::default()
    };
    let fits = fits(&staircase);
    let post_opt = fits
        .iter()
        .find(|f| f.stage == "post_optimizer_step" && f.metric.label() == "allocated")
        .unwrap();
    assert!(post_opt.r_squared > MIN_R_SQUARED, "{}", post_opt.r_squared);
    assert_eq!(post_opt.transitions, 9);
    assert_eq!(post_opt.transition_growth_bytes, 9 * 200 * MIB as i64);
    assert!(post_opt.train_slope_bytes_per_step.abs() < 1.0);
    assert!(fits.iter().all(|f| !f.is_leak()), "{fits:#?}");
    // A real leak that also has evals is still a leak, at its per-step rate.
    let both = Run {
        leak_bytes_per_step: 20 * MIB,
        ..staircase
    };
    let found = leaks(&both);
    let post_opt = found
        .iter()
        .find(|f| f.stage == "post_optimizer_step" && f.metric.label() == "allocated")
        .unwrap();
    assert!(
        (post_opt.train_slope_bytes_per_step - (20 * MIB) as f64).abs() < 1.0,
        "{}",
        post_opt.train_slope_bytes_per_step
    );
    // Each transition carries its eval's 200 MiB plus the steps' own growth over it.
    assert!(post_opt.transition_growth_bytes >= 9 * 220 * MIB as i64);
}

#[test]
fn memory_kept_at_pauses_such_as_checkpoint_saves_is_not_a_per_step_leak() {
    // 100 flat training steps; every 10 steps a 5 s pause without marks (a checkpoint save)
    // after which 300 MiB more stay allocated: a staircase no eval mark explains.
    let mut trace = Run {
        steps: 100,
        ..Run::default()
    }
    .build();
    trace.marks.edit(|mark| {
        let saves = mark.step / 10;
        mark.t_us += saves * 5_000_000;
        if let Some(s) = mark.allocator.as_mut() {
            s.allocated_bytes += saves * 300 * MIB;
            s.peak_allocated_bytes += saves * 300 * MIB;
        }
    });
    let fits = fits_of(&trace);
    let post_opt = fits
        .iter()
        .find(|f| f.stage == "post_optimizer_step" && f.metric.label() == "allocated")
        .unwrap();
    assert!(post_opt.r_squared > MIN_R_SQUARED, "{}", post_opt.r_squared);
    assert_eq!(post_opt.transitions, 9);
    assert_eq!(post_opt.transition_growth_bytes, 9 * 300 * MIB as i64);
    assert!(!post_opt.is_leak(), "{post_opt:#?}");
}

/// A host-memory staircase: every eval keeps 200 MiB of RSS, and the training steps grow
/// `creep` a step besides.
fn host_staircase(creep: u64) -> Trace {
    let mut trace = Run {
        steps: 100,
        eval_every: Some(10),
        host_rss_growth_per_step: creep,
        ..Run::default()
    }
    .build();
    let mut starts = Vec::new();
    let mut in_eval = false;
    for m in &trace.marks {
        let eval = !is_train(m.phase);
        if eval && !in_eval {
            starts.push(m.t_us);
        }
        in_eval = eval;
    }
    let rss = trace.counter(CounterKind::HostRss, None).unwrap();
    let times = trace.samples.times_us().to_vec();
    trace.samples.edit_column(rss, |column| {
        for (v, t) in column.iter_mut().zip(&times) {
            let evals = starts.iter().filter(|s| *s <= t).count() as u64;
            if *v != oomscope_format::MISSING {
                *v += evals * 200 * MIB;
            }
        }
    });
    trace
}

fn host_fit(trace: &Trace) -> GrowthFit {
    fits_of(trace)
        .into_iter()
        .find(|f| f.stage == "post_optimizer_step" && f.host_memory)
        .unwrap()
}

#[test]
fn host_memory_creeping_up_after_the_evals_is_the_staircases_not_a_leak() {
    // 2 MiB a step inside the training steps (the C allocator's heap after what the evals
    // keep), 1.8 GiB at nine evals: the eval finding's, not a leak.
    let creep = host_fit(&host_staircase(2 * MIB));
    assert_eq!(creep.transitions, 9, "{creep:#?}");
    assert!(creep.train_growth_bytes > 64 * MIB as i64, "{creep:#?}");
    assert!(creep.train_growth_bytes < creep.transition_growth_bytes);
    assert!(
        (creep.verdict == LeakVerdict::Not(NotALeak::StaircaseCreep)) && !creep.is_leak(),
        "{creep:#?}"
    );
    // The same with live tensors counted growing: a leak of its own.
    let mut counted = host_staircase(2 * MIB);
    counted.held.push(oomscope_format::HeldTensors {
        t_us: 1,
        from_step: 20,
        to_step: 28,
        device: "cpu".into(),
        dtype: "float32".into(),
        shape: "1024".into(),
        grad_fn: "".into(),
        count: 8,
        bytes: 16 * MIB,
        holder: "list `losses`".into(),
        items: Some(28),
        ..oomscope_format::HeldTensors::default()
    });
    let fit = host_fit(&counted);
    assert!(
        fit.verdict != LeakVerdict::Not(NotALeak::StaircaseCreep) && fit.is_leak(),
        "{fit:#?}"
    );
    // Training steps whose rate adds more than the evals kept (30 MiB a step, 3 GiB over the
    // run, against 1.8 GiB): a leak of its own, though the steps around each eval, counted
    // with it, leave the training steps less growth than the transitions.
    let leak = host_fit(&host_staircase(30 * MIB));
    assert!(
        leak.train_growth_bytes < leak.transition_growth_bytes,
        "{leak:#?}"
    );
    assert!(
        leak.verdict != LeakVerdict::Not(NotALeak::StaircaseCreep) && leak.is_leak(),
        "{leak:#?}"
    );
}

#[test]
fn host_memory_the_workers_copied_while_it_grew_is_theirs_not_a_leak() {
    // 30 MiB a step of host memory over 100 steps; a worker whose private memory grew as
    // fast over the same time explains it; one that grew before the steps began does not.
    let trace = Run {
        steps: 100,
        host_rss_growth_per_step: 30 * MIB,
        ..Run::default()
    }
    .build();
    let (from, to) = (trace.marks[0].t_us, trace.marks.last().unwrap().t_us);
    let with_worker = |from_us: u64, to_us: u64| {
        let mut t = trace.clone();
        for i in 0..=10u64 {
            t.process_memory.push(oomscope_format::ProcessMemory {
                t_us: from_us + (to_us - from_us) * i / 10,
                pid: 4343,
                private_bytes: 10 * MIB + i * 300 * MIB,
                pss_bytes: 0,
            });
        }
        assert_eq!(
            crate::workers::growing_workers(&t).len(),
            1,
            "a growing worker"
        );
        host_fit(&t)
    };
    let leak = host_fit(&trace);
    assert!(
        leak.is_leak() && leak.verdict != LeakVerdict::Not(NotALeak::CopiedByWorkers),
        "{leak:#?}"
    );
    let copied = with_worker(from, to);
    assert!(
        (copied.verdict == LeakVerdict::Not(NotALeak::CopiedByWorkers)) && !copied.is_leak(),
        "{copied:#?}"
    );
    // A worker of another epoch, after the steps fitted.
    let after = with_worker(to + 1, to + 1 + (to - from));
    assert!(
        after.is_leak() && after.verdict != LeakVerdict::Not(NotALeak::CopiedByWorkers),
        "{after:#?}"
    );
}

#[test]
fn distinct_steps_counts_new_highs() {
    assert_eq!(distinct_steps([0, 0, 1, 2, 2, 3].into_iter()), 4);
    assert_eq!(distinct_steps([0, 1, 2, 0, 1, 2, 3].into_iter()), 4);
    assert_eq!(distinct_steps(std::iter::empty()), 0);
}
