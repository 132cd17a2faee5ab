//! Rule about host memory: near exhaustion, or the kernel's OOM killer.

use super::{Diagnose, Evidence, Finding, FindingKind, RuleContext, Severity, finding};
use crate::analysis::host::HostMemory;
use crate::analysis::oom::{OomContext, OomKind};
use crate::units::{format_bytes, format_count, format_duration_us, format_percent};

/// Available host memory below this share of (available + the process's RSS) is pressure: the
/// next DataLoader worker or checkpoint copy can trigger the OOM killer.
pub const HOST_AVAILABLE_MIN_FRACTION: f64 = 0.10;

/// `host-memory-pressure`: host memory nearly ran out, or the process was probably OOM-killed.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostMemoryPressure;

/// What [`HostMemoryPressure`] detected.
#[derive(Debug, Clone, Copy)]
pub struct HostPressure<'a> {
    /// The host's tightest moment (also when it was not tight: the evidence quotes it).
    pub host: Option<&'a HostMemory>,
    /// Whether available memory fell below [`HOST_AVAILABLE_MIN_FRACTION`] then.
    pub low: bool,
    /// The probable kill by the kernel's OOM killer.
    pub kill: Option<&'a OomContext>,
}

impl Diagnose for HostMemoryPressure {
    const KIND: FindingKind = FindingKind::HostMemoryPressure;
    type Diagnosis<'a> = HostPressure<'a>;

    /// Detection: the host ran low, or the process was probably OOM-killed; `None` otherwise.
    fn detect<'a>(&self, ctx: &RuleContext<'a>) -> Option<Self::Diagnosis<'a>> {
        let kill = ctx.analysis.ooms.iter().find(|o| o.kind == OomKind::Host);
        let host = ctx.analysis.host_memory.as_ref();
        let low = host.is_some_and(|h| {
            h.min_available_fraction
                .is_some_and(|f| f < HOST_AVAILABLE_MIN_FRACTION)
        });
        (low || kill.is_some()).then_some(HostPressure { host, low, kill })
    }

    /// Wording: what happened, the change to make, and the numbers.
    fn explain(&self, d: &Self::Diagnosis<'_>) -> Finding {
        let mut facts = Vec::new();
        if let Some(h) = d.host.filter(|_| d.low) {
            let total = h.rss_at_min_bytes.map(|r| r + h.min_available_bytes);
            let stage = h.stage.as_ref().map_or_else(String::new, |s| {
                format!(" at {} of step {}", s.stage, format_count(s.step))
            });
            facts.push(format!(
                "host memory available fell to {} ({} of {}){stage} while the process held {} \
                 resident",
                format_bytes(h.min_available_bytes),
                format_percent(h.min_available_fraction.unwrap_or(0.0)),
                format_bytes(total.unwrap_or(h.min_available_bytes)),
                format_bytes(h.rss_at_min_bytes.unwrap_or(0)),
            ));
        }
        if let Some(k) = d.kill {
            let mut fact = format!(
                "the process was killed with SIGKILL at {}",
                format_duration_us(k.event.t_us)
            );
            if let Some(step) = k.event.step {
                fact.push_str(&format!(" (step {})", format_count(step)));
            }
            if let Some(a) = k.host_available_bytes {
                fact.push_str(&format!(" with {} available", format_bytes(a)));
            }
            fact.push_str(": probably the kernel's OOM killer");
            facts.push(fact);
        }
        let mut evidence = Vec::new();
        if let Some(h) = d.host {
            evidence.push(Evidence::bytes(
                "min_available_bytes",
                h.min_available_bytes as f64,
            ));
            if let Some(f) = h.min_available_fraction {
                evidence.push(Evidence::share("min_available_fraction", f));
            }
            if let Some(r) = h.rss_at_min_bytes {
                evidence.push(Evidence::bytes("rss_at_min_bytes", r as f64));
            }
        }
        evidence.push(Evidence::count(
            "killed",
            if d.kill.is_some() { 1.0 } else { 0.0 },
        ));
        let (severity, title) = if d.kill.is_some() {
            (
                Severity::Critical,
                "The process was probably killed for host memory".to_owned(),
            )
        } else {
            (Severity::Warning, "Host memory nearly ran out".to_owned())
        };
        finding(
            self,
            severity,
            title,
            facts.join("; "),
            "use fewer DataLoader workers or a lower prefetch_factor, memory-map datasets \
             instead of loading them into RAM, keep per-sample Python objects out of worker \
             datasets (copy-on-write duplicates them per worker), and pin less memory"
                .to_owned(),
            evidence,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{evidence, find, with_context};
    use super::*;
    use crate::analysis::testkit::{GIB, MIB, Run};
    use crate::model::{ExitStatus, ProcessExit};

    #[test]
    fn host_nearly_full() {
        let run = Run {
            host_total_bytes: 64 * GIB,
            host_rss_bytes: 42 * GIB,
            host_rss_growth_per_step: 300 * MIB,
            ..Run::default()
        };
        let trace = run.build();
        // Detection, in numbers: 4.71 GiB of 64 GiB available at the tightest moment, no kill.
        let (low, available, killed) = with_context(&trace, |ctx| {
            let d = HostMemoryPressure.detect(ctx).unwrap();
            (d.low, d.host.unwrap().min_available_bytes, d.kill.is_some())
        });
        assert!(low && !killed);
        assert_eq!(available, 64 * GIB - (42 * GIB + 59 * 300 * MIB));
        let f = find(&trace, FindingKind::HostMemoryPressure).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        // Step 59: RSS 42 GiB + 59 × 300 MiB = 59.3 GiB, 4.71 GiB available (7%).
        assert_eq!(
            f.explanation,
            "host memory available fell to 4.71 GiB (7% of 64.0 GiB) at pre_forward of step 59 \
             while the process held 59.3 GiB resident"
        );
        assert!(evidence(&f, "min_available_fraction") < HOST_AVAILABLE_MIN_FRACTION);
        assert_eq!(evidence(&f, "killed"), 0.0);
    }

    #[test]
    fn oom_kill_is_critical() {
        let run = Run {
            host_total_bytes: 64 * GIB,
            host_rss_bytes: 61 * GIB,
            exit: Some(ProcessExit {
                t_us: 10_000_000,
                status: ExitStatus::Signal(9),
                probable_host_oom: true,
            }),
            ..Run::default()
        };
        let f = find(&run.build(), FindingKind::HostMemoryPressure).unwrap();
        assert_eq!(f.severity, Severity::Critical);
        assert!(
            f.explanation.ends_with(
                "; the process was killed with SIGKILL at 10.0 s (step 39) with 3.00 GiB \
                 available: probably the kernel's OOM killer"
            ),
            "{}",
            f.explanation
        );
        assert_eq!(evidence(&f, "killed"), 1.0);
    }

    #[test]
    fn comfortable_host_does_not_fire() {
        assert!(find(&Run::default().build(), FindingKind::HostMemoryPressure).is_none());
        // Near miss: 12% available at the end.
        let near = Run {
            host_total_bytes: 100 * GIB,
            host_rss_bytes: 88 * GIB,
            ..Run::default()
        };
        assert!(find(&near.build(), FindingKind::HostMemoryPressure).is_none());
    }
}
