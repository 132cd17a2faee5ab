//! The verdict a report opens with: one sentence per top finding, its size and the change to
//! make, and "no problem found" only with what was checked to say so.
//!
//! Why a module: someone opening a report has one question ("why did it run out of memory?")
//! and should read the answer before any metadata or chart. The sentences are the findings' own
//! (the terminal prints the same titles and changes), so the page and the terminal never
//! disagree; what a clean verdict may claim depends on what the trace could show (a run without
//! stage marks cannot show a per-step leak). A report carries its verdict as a typed value
//! ([`Verdict::to_bytes`]) so the page shows it before its own analysis of the same bytes.

use serde::{Deserialize, Serialize};

use oomscope_analysis::Analysis;
use oomscope_analysis::facts::slow_growth;
use oomscope_analysis::finding::{Detail, Finding, FindingKind, LeakDiagnosis, Severity};
use oomscope_analysis::{facts::GrowthFit, thresholds::FILE_BACKED_MIN_SHARE};
use oomscope_format::units::{format_bytes, format_bytes_f64, format_count, format_duration_us};
use oomscope_format::{ExitStatus, Trace};

use crate::findings::text;

/// At most this many findings lead the report.
pub const VERDICT_LINES: usize = 3;

/// One line of the verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerdictLine {
    /// How urgent.
    pub severity: Severity,
    /// What the finding is about.
    pub kind: FindingKind,
    /// What was found, with its size (the finding's title).
    pub title: String,
    /// Where memory runs out, when the finding projects it ("full at step 5 954 (in 4 min)").
    pub projection: Option<String>,
    /// The change to make first (the finding's first change).
    pub change: String,
}

impl VerdictLine {
    /// The line as the page says it: the title, and where memory runs out.
    pub fn said(&self) -> String {
        match &self.projection {
            Some(p) => format!("{} — {p}", self.title),
            None => self.title.clone(),
        }
    }
}

/// What a report says first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

/// The first byte of a verdict as [`Verdict::to_bytes`] writes it: the layout's version.
const BYTES_VERSION: u8 = 2;

impl Verdict {
    /// The verdict as bytes, for a report to carry next to its trace: the page shows it the
    /// moment it starts, before its own analysis (of the same trace, by the same code) replaces
    /// it. A version byte, then postcard's encoding of the value.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![BYTES_VERSION];
        out.extend(postcard::to_allocvec(self).expect("a verdict always encodes"));
        out
    }

    /// Reads [`Verdict::to_bytes`]'s bytes back; `None` for anything else (a damaged, cut or
    /// foreign page: the viewer then waits for its own analysis). A verdict has lines or says
    /// what it found clean.
    pub fn from_bytes(bytes: &[u8]) -> Option<Verdict> {
        let (&version, rest) = bytes.split_first()?;
        if version != BYTES_VERSION {
            return None;
        }
        let (verdict, tail): (Verdict, _) = postcard::take_from_bytes(rest).ok()?;
        (tail.is_empty() && verdict.clean.is_some() == verdict.lines.is_empty()).then_some(verdict)
    }
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
        Some(l) => l.title.clone(),
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
    let words = text(f);
    VerdictLine {
        severity: f.severity,
        kind: f.kind(),
        projection: projection(f),
        change: words.changes.first().cloned().unwrap_or_default(),
        title: words.title,
    }
}

/// Where a leak fills memory, on its own clock: "full at step 5 954 (in 4 min)", "memory was
/// full by forward 900".
fn projection(f: &Finding) -> Option<String> {
    if let Detail::Leak(LeakDiagnosis::Rising(r)) = &f.detail {
        let full = r.full.as_ref()?;
        let (unit, at) = (r.symptom.unit.word(), format_count(full.full_at));
        return Some(match full.time_to_full_us {
            Some(us) if full.full_at > r.symptom.last_at => {
                format!("full at {unit} {at} (in {})", format_duration_us(us))
            }
            _ => format!("memory was full by {unit} {at}"),
        });
    }
    let Detail::Leak(LeakDiagnosis::PerStep(d)) = &f.detail else {
        return None;
    };
    let p = d.headline.projection.as_ref()?;
    let (unit, at) = (d.headline.clock.unit(), format_count(p.full_at_step));
    Some(match p.time_to_full_us {
        // The projection's end is behind it: memory filled up during the run.
        Some(0) => format!("memory was full by {unit} {at}"),
        Some(us) => format!("full at {unit} {at} (in {})", format_duration_us(us)),
        None => format!("full at {unit} {at}"),
    })
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
            crate::phrases::transitions(f, "step"),
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

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_analysis::{AnalysisOptions, analyze};
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
        let leak = v
            .lines
            .iter()
            .find(|l| l.kind == FindingKind::Leak)
            .expect("the leak");
        assert!(leak.title.starts_with("Memory leak: +64"), "{}", leak.title);
        assert!(leak.said().contains(" — full at step "), "{}", leak.said());
        assert!(
            leak.change
                .starts_with("look for tensors kept across steps")
        );
        assert!(!leak.change.contains("; "));
        assert!(v.clean.is_none());
        assert!(v.short.starts_with("Memory leak") || v.lines[0].kind != FindingKind::Leak);
    }

    /// A leak on the forwards' clock (a serving loop) and on the epochs' says where memory is
    /// full on its own clock (the verdict once looked the projection up as `full_at_step` only).
    #[test]
    fn a_leak_on_the_forward_or_the_epoch_clock_says_when_memory_is_full() {
        use oomscope_analysis::facts::Clock;
        use oomscope_format::Phase;
        use oomscope_testkit::run::Run;
        // Every mark an eval one: a run that never trains, counted in forwards.
        let mut serving = Run {
            steps: 200,
            leak_bytes_per_step: 256 << 20,
            ..Run::default()
        }
        .build();
        for m in &mut serving.marks {
            m.phase = Phase::Eval;
        }
        let analysis = analyze(&serving, &AnalysisOptions::default());
        assert_eq!(
            analysis.headline_leak().map(|f| f.clock),
            Some(Clock::Forward)
        );
        let v = verdict(&serving, &analysis);
        let leak = v
            .lines
            .iter()
            .find(|l| l.kind == FindingKind::Leak)
            .unwrap();
        let said = leak.said();
        assert!(said.contains(" — full at forward "), "{said}");
        assert!(said.contains("/forward at "), "{said}");

        let mut epochs = Run {
            steps: 60,
            ..Run::default()
        }
        .build();
        oomscope_testkit::run::keep_at_epoch_ends(&mut epochs, 10, 2 << 30);
        let analysis = analyze(&epochs, &AnalysisOptions::default());
        assert_eq!(
            analysis.headline_leak().map(|f| f.clock),
            Some(Clock::Epoch)
        );
        let v = verdict(&epochs, &analysis);
        let leak = v
            .lines
            .iter()
            .find(|l| l.kind == FindingKind::Leak)
            .unwrap();
        let said = leak.said();
        assert!(said.contains(" — full at epoch "), "{said}");
    }

    #[test]
    fn the_bytes_a_report_carries_read_back_as_the_same_verdict() {
        let (_, leak) = of(&TrainingRun {
            steps: 60,
            leak_bytes_per_step: 64 << 20,
            ..TrainingRun::default()
        });
        let (_, clean) = of(&TrainingRun::default());
        let odd = Verdict {
            lines: vec![VerdictLine {
                severity: Severity::Critical,
                kind: FindingKind::Oom,
                title: "stage \"a\\tb\"\twith\nbreaks\r\\n and <script>".into(),
                projection: Some(String::new()),
                change: String::new(),
            }],
            more: 7,
            clean: None,
            short: "\\".into(),
        };
        for v in [leak, clean, odd] {
            assert_eq!(Verdict::from_bytes(&v.to_bytes()), Some(v.clone()));
        }
    }

    #[test]
    fn damaged_or_foreign_verdict_bytes_are_refused() {
        let good = of(&TrainingRun {
            steps: 60,
            leak_bytes_per_step: 64 << 20,
            ..TrainingRun::default()
        })
        .1
        .to_bytes();
        assert!(Verdict::from_bytes(&good).is_some());
        let mut other_version = good.clone();
        other_version[0] = 1;
        let mut longer = good.clone();
        longer.push(0);
        let clean_and_lines = {
            let mut v = Verdict::from_bytes(&good).unwrap();
            v.clean = Some("clean".into());
            v.to_bytes()
        };
        for bad in [
            Vec::new(),
            b"oomscope-verdict 1\nshort\tx\n".to_vec(),
            other_version,
            longer,
            good[..good.len() - 1].to_vec(),
            clean_and_lines,
        ] {
            assert_eq!(Verdict::from_bytes(&bad), None, "{bad:?}");
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
}
