//! The verdict a report opens with: one sentence per top finding, its size and the change to
//! make, and "no problem found" only with what was checked to say so.
//!
//! Why a module: someone opening a report has one question ("why did it run out of memory?")
//! and should read the answer before any metadata or chart. The sentences are the findings' own
//! (the terminal prints the same titles and changes), cut to what fits a line, so the page and
//! the terminal never disagree; what a clean verdict may claim depends on what the trace could
//! show (a run without stage marks cannot show a per-step leak).

use crate::Analysis;
use crate::leaks::{FILE_BACKED_MIN_SHARE, GrowthFit, SHORT_MIN_STEPS, STEADY_R_SQUARED};
use crate::recommend::{Finding, Severity};
use oomscope_format::units::{format_bytes, format_bytes_f64, format_count, format_duration_us};
use oomscope_format::{ExitStatus, Trace};

/// At most this many findings lead the report.
pub const VERDICT_LINES: usize = 3;

/// One line of the verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct VerdictLine {
    /// How urgent.
    pub severity: Severity,
    /// The finding's id (`leak`, `oom`, …).
    pub id: String,
    /// What was found, with its size (the finding's title, and where memory runs out when the
    /// finding projects it).
    pub said: String,
    /// The change to make first (the finding's change up to its first `;`).
    pub change: String,
}

/// What a report says first.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The top findings, most severe first.
    pub lines: Vec<VerdictLine>,
    /// More findings below the verdict.
    pub more: usize,
    /// With no problem found: what the trace let the analysis check, and what it could not.
    pub clean: Option<String>,
    /// A few words for the browser tab (`Memory leak: +4.20 MiB/step at post_backward`).
    pub short: String,
}

/// The first line of a verdict as [`Verdict::to_text`] writes it.
const TEXT_VERSION: &str = "oomscope-verdict 1";

impl Verdict {
    /// The verdict as text, for a report to carry next to its trace: the page shows it the
    /// moment it starts, before its own analysis (of the same trace, by the same code) replaces
    /// it. A line per field, tab-separated, with `\\`, tab and line breaks escaped.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "{TEXT_VERSION}\nshort\t{}\nmore\t{}\n",
            escape(&self.short),
            self.more
        );
        if let Some(clean) = &self.clean {
            out.push_str(&format!("clean\t{}\n", escape(clean)));
        }
        for l in &self.lines {
            out.push_str(&format!(
                "line\t{}\t{}\t{}\t{}\n",
                l.severity.label(),
                escape(&l.id),
                escape(&l.said),
                escape(&l.change)
            ));
        }
        out
    }

    /// Reads [`Verdict::to_text`]'s text back; `None` for anything else (a damaged, cut or
    /// foreign page: the viewer then waits for its own analysis). `short` and `more` come once
    /// each, and a verdict has lines or says what it found clean.
    pub fn from_text(text: &str) -> Option<Verdict> {
        let mut lines = text.lines();
        if lines.next()? != TEXT_VERSION {
            return None;
        }
        let (mut short, mut more, mut clean) = (None, None, None);
        let mut verdict_lines = Vec::new();
        for line in lines {
            let fields: Vec<&str> = line.split('\t').collect();
            match fields.as_slice() {
                ["short", s] => short = unset(&short).and(unescape(s)).map(Some)?,
                ["more", n] => more = unset(&more).and(n.parse::<usize>().ok()).map(Some)?,
                ["clean", c] => clean = unset(&clean).and(unescape(c)).map(Some)?,
                ["line", severity, id, said, change] => verdict_lines.push(VerdictLine {
                    severity: Severity::from_label(severity)?,
                    id: unescape(id)?,
                    said: unescape(said)?,
                    change: unescape(change)?,
                }),
                _ => return None,
            }
        }
        // Either what was found or what "clean" rests on.
        if clean.is_some() != verdict_lines.is_empty() {
            return None;
        }
        Some(Verdict {
            lines: verdict_lines,
            more: more?,
            clean,
            short: short?,
        })
    }
}

/// `Some` while a field has not been read yet.
fn unset<T>(slot: &Option<T>) -> Option<()> {
    slot.is_none().then_some(())
}

fn escape(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('\t', "\\t")
        .replace('\n', "\\n")
        .replace('\r', "\\r")
}

fn unescape(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next()? {
            '\\' => '\\',
            't' => '\t',
            'n' => '\n',
            'r' => '\r',
            _ => return None,
        });
    }
    Some(out)
}

/// The verdict of a trace's analysis: its problems (warnings and critical findings; the
/// informational ones are below, with the rest).
pub fn verdict(trace: &Trace, analysis: &Analysis) -> Verdict {
    let lines: Vec<VerdictLine> = analysis
        .findings
        .iter()
        .filter(|f| f.severity >= Severity::Warning)
        .take(VERDICT_LINES)
        .map(line)
        .collect();
    let more = analysis.findings.len().saturating_sub(lines.len());
    let clean = lines.is_empty().then(|| clean_words(trace, analysis));
    let short = match lines.first() {
        Some(l) => l.said.split(" — ").next().unwrap_or(&l.said).to_owned(),
        None if trace.marks.is_empty() => "no problem seen (no stage marks)".to_owned(),
        None => "no memory problem found".to_owned(),
    };
    Verdict {
        lines,
        more,
        clean,
        short,
    }
}

fn line(f: &Finding) -> VerdictLine {
    let number = |label: &str| {
        f.evidence
            .iter()
            .find(|e| e.label == label)
            .map(|e| e.value)
    };
    let mut said = f.title.clone();
    if let Some(step) = number("full_at_step") {
        match number("time_to_full_us") {
            // The projection's end is behind it: memory filled up during the run.
            Some(us) if us < 1.0 => said.push_str(&format!(
                " — memory was full by step {}",
                format_count(step as u64)
            )),
            Some(us) => said.push_str(&format!(
                " — full at step {} (in {})",
                format_count(step as u64),
                format_duration_us(us as u64)
            )),
            None => said.push_str(&format!(" — full at step {}", format_count(step as u64))),
        }
    }
    let change = f.change.split("; ").next().unwrap_or(&f.change).to_owned();
    VerdictLine {
        severity: f.severity,
        id: f.kind.id().to_owned(),
        said,
        change,
    }
}

/// "No problem found", said with what the trace let the analysis check.
fn clean_words(trace: &Trace, analysis: &Analysis) -> String {
    let o = &analysis.overview;
    if trace.marks.is_empty() {
        return "No problem seen in what was recorded, but without stage marks the per-step \
                checks (leaks per step, memory kept after eval, growth between stages) could not \
                run: run a Python program under `collector run` with the zero-code hooks, or \
                mark stages with oomscope_probe.mark()"
            .to_owned();
    }
    let mut checked = format!(
        "No memory problem found in {} marks over {} steps",
        format_count(o.marks as u64),
        format_count(o.steps as u64)
    );
    let growth = slow_growth(analysis);
    // A straight rise too small to call a leak is not "no leak": it is said below.
    checked.push_str(match growth {
        None => ": no leak across steps, no memory kept after eval, no out-of-memory error",
        Some(_) => ": no memory kept after eval, no out-of-memory error",
    });
    if analysis.pressure.is_some() {
        checked.push_str(", no allocator fragmentation");
    }
    if analysis.host_memory.is_some() {
        checked.push_str(", host memory never short");
    }
    if let Some(words) = growth.map(slow_growth_words) {
        checked.push_str("; ");
        checked.push_str(&words);
    }
    match trace.exit.map(|e| e.status) {
        // No exit record: the recording stopped first (or was cut); a failure is not a fact.
        None => checked.push_str("; how the program ended was not recorded (see how it ended)"),
        Some(ExitStatus::Code(0)) => {}
        Some(_) => checked.push_str("; the program failed for another reason (see how it ended)"),
    }
    checked
}

/// The fastest growth that is as straight as a steady leak and still rising, but too small to
/// be one (under its growth floor): the terminal and the clean verdict say it, so that "no
/// problem found" never reads as "memory does not grow".
pub(crate) fn slow_growth(analysis: &Analysis) -> Option<&GrowthFit> {
    analysis
        .leak_fits
        .iter()
        .filter(|f| {
            !f.is_leak
                && !f.copied_by_workers // the workers' finding tells that growth
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

/// [`slow_growth`] in words: "memory at S (M) rises steadily by …/step (…), under the … a leak
/// needs here: a longer run will tell".
pub(crate) fn slow_growth_words(f: &GrowthFit) -> String {
    if let Some(file) = f
        .file_backed_growth_bytes
        .filter(|&b| b as f64 >= FILE_BACKED_MIN_SHARE * f.growth_bytes as f64)
    {
        // Pages of memory-mapped files: resident, counted in RSS, and the kernel's to drop.
        return format!(
            "memory at {} ({}) rises by {}/step (+{} from step {} to {}), {} of it resident \
             pages of memory-mapped files (file-backed: the kernel drops them when memory is \
             short), not a leak; anonymous memory {} {}",
            f.stage,
            f.metric,
            format_bytes_f64(f.slope_bytes_per_step),
            format_bytes(f.growth_bytes.max(0).unsigned_abs()),
            format_count(f.first_step),
            format_count(f.last_step),
            format_bytes(file.max(0).unsigned_abs()),
            if f.growth_bytes > file {
                "grew"
            } else {
                "did not grow"
            },
            if f.growth_bytes > file {
                format_bytes((f.growth_bytes - file).unsigned_abs())
            } else {
                String::new()
            },
        )
        .trim_end()
        .to_owned();
    }
    if f.transitions > 0 {
        // The steps' own rise: what the evals or pauses kept is theirs, not a per-step rate.
        let span = f.last_step.saturating_sub(f.first_step) as f64;
        return format!(
            "within training steps memory at {} ({}) rises steadily by {}/step (R² {:.2}, +{} \
             from step {} to {}, besides what {} kept), under the {} \
             a leak needs here: a longer run will tell",
            f.stage,
            f.metric,
            format_bytes_f64(f.train_slope_bytes_per_step),
            f.train_r_squared,
            format_bytes_f64((f.train_slope_bytes_per_step * span).max(0.0)),
            format_count(f.first_step),
            format_count(f.last_step),
            crate::words::transitions(f, "step"),
            format_bytes(f.min_leak_growth_bytes),
        );
    }
    format!(
        "memory at {} ({}) rises steadily by {}/step (R² {:.2}, +{} from step {} to {}), under \
         the {} a leak needs here: a longer run will tell",
        f.stage,
        f.metric,
        format_bytes_f64(f.slope_bytes_per_step),
        f.r_squared,
        format_bytes(f.growth_bytes.max(0).unsigned_abs()),
        format_count(f.first_step),
        format_count(f.last_step),
        format_bytes(f.min_leak_growth_bytes),
    )
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
    use crate::recommend::{Diagnose, EvalRetainsMemory, FindingKind, RuleContext};
    let has = |kind: FindingKind| analysis.findings.iter().any(|f| f.kind == kind);
    let mut leak_stages: Vec<String> = Vec::new();
    if has(FindingKind::Leak) {
        for f in analysis.leaks() {
            if !leak_stages.contains(&f.stage) {
                leak_stages.push(f.stage.clone());
            }
        }
    }
    let options = crate::AnalysisOptions::default();
    let ctx = RuleContext {
        trace,
        analysis,
        options: &options,
    };
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

    fn of(run: &TrainingRun) -> (Trace, Verdict) {
        let trace = decode(&run.to_bytes()).unwrap().trace;
        let analysis = analyze(&trace, &AnalysisOptions::default());
        let v = verdict(&trace, &analysis);
        (trace, v)
    }

    #[test]
    fn a_leak_leads_with_its_rate_where_it_fills_memory_and_the_change() {
        let (_, v) = of(&TrainingRun {
            steps: 60,
            leak_bytes_per_step: 64 << 20,
            ..TrainingRun::default()
        });
        let leak = v.lines.iter().find(|l| l.id == "leak").expect("the leak");
        assert!(leak.said.starts_with("Memory leak: +64"), "{}", leak.said);
        assert!(leak.said.contains(" — full at step "), "{}", leak.said);
        assert!(
            leak.change
                .starts_with("look for tensors kept across steps")
        );
        assert!(!leak.change.contains("; "));
        assert!(v.clean.is_none());
        assert!(v.short.starts_with("Memory leak") || v.lines[0].id != "leak");
    }

    #[test]
    fn the_text_a_report_carries_reads_back_as_the_same_verdict() {
        let (_, leak) = of(&TrainingRun {
            steps: 60,
            leak_bytes_per_step: 64 << 20,
            ..TrainingRun::default()
        });
        let (_, clean) = of(&TrainingRun::default());
        let odd = Verdict {
            lines: vec![VerdictLine {
                severity: Severity::Critical,
                id: "oom".into(),
                said: "stage \"a\\tb\"\twith\nbreaks\r\\n and <script>".into(),
                change: String::new(),
            }],
            more: 7,
            clean: None,
            short: "\\".into(),
        };
        for v in [leak, clean, odd] {
            assert_eq!(Verdict::from_text(&v.to_text()), Some(v.clone()));
        }
    }

    #[test]
    fn a_damaged_or_foreign_verdict_text_is_refused() {
        let good = of(&TrainingRun {
            steps: 60,
            leak_bytes_per_step: 64 << 20,
            ..TrainingRun::default()
        })
        .1
        .to_text();
        assert!(Verdict::from_text(&good).is_some());
        for bad in [
            String::new(),
            "oomscope-verdict 2\nshort\tx\n".to_owned(),
            good.replace("\twarning\t", "\tsevere\t")
                .replace("\tcritical\t", "\tsevere\t"),
            good.replace("more\t", "more\t-"),
            format!("{good}extra\tfield\n"),
            format!("{good}short\tbad escape \\q\n"),
            format!("{good}short\tonce more\n"),
            "oomscope-verdict 1\n".to_owned(),
            "oomscope-verdict 1\nshort\tx\nmore\t0\n".to_owned(),
            good.lines()
                .filter(|l| !l.starts_with("more"))
                .collect::<Vec<_>>()
                .join("\n"),
            good.replace("more\t", "more\t\t"),
        ] {
            assert_eq!(Verdict::from_text(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn clean_says_what_was_checked_and_no_marks_says_what_was_not() {
        let (_, v) = of(&TrainingRun::default());
        assert!(v.lines.is_empty(), "{:?}", v.lines);
        let clean = v.clean.unwrap();
        assert!(
            clean.starts_with("No memory problem found in 1 000 marks over 200 steps"),
            "{clean}"
        );
        assert_eq!(v.short, "no memory problem found");

        let mut trace = decode(&TrainingRun::default().to_bytes()).unwrap().trace;
        trace.marks.clear();
        let analysis = analyze(&trace, &AnalysisOptions::default());
        let v = verdict(&trace, &analysis);
        assert!(v.lines.is_empty(), "{:?}", v.lines);
        assert!(v.clean.unwrap().contains("without stage marks"));
        assert_eq!(v.short, "no problem seen (no stage marks)");
    }

    #[test]
    fn steady_growth_too_small_for_a_leak_is_said_not_denied() {
        // 1 MiB per step for 60 steps: straight, but under the 64 MiB a steady leak needs.
        let (_, v) = of(&TrainingRun {
            steps: 60,
            leak_bytes_per_step: 1 << 20,
            ..TrainingRun::default()
        });
        assert!(v.lines.is_empty(), "{:?}", v.lines);
        let clean = v.clean.unwrap();
        assert!(!clean.contains("no leak across steps"), "{clean}");
        assert!(clean.contains("rises steadily by 1.00 MiB/step"), "{clean}");
        assert!(clean.contains("a longer run will tell"), "{clean}");
    }

    #[test]
    fn a_clean_run_is_called_failed_only_when_its_exit_says_so() {
        let mut trace = decode(&TrainingRun::default().to_bytes()).unwrap().trace;
        let said = |trace: &Trace| {
            verdict(trace, &analyze(trace, &AnalysisOptions::default()))
                .clean
                .unwrap()
        };
        assert_eq!(trace.exit.map(|e| e.status), Some(ExitStatus::Code(0)));
        let ok = said(&trace);
        assert!(!ok.contains(';'), "{ok}");
        trace.exit.as_mut().unwrap().status = ExitStatus::Code(1);
        assert!(
            said(&trace).ends_with("; the program failed for another reason (see how it ended)")
        );
        // Still running when the recording stopped: no exit, so no failure to speak of.
        trace.exit = None;
        let unknown = said(&trace);
        assert!(!unknown.contains("failed"), "{unknown}");
        assert!(unknown.ends_with("; how the program ended was not recorded (see how it ended)"));
    }

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
