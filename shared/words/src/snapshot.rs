//! A memory snapshot's summary for the terminal (`collector summary snap.pickle`), in the same
//! plain 100-column text and the same findings section as a trace's.

use crate::summary::findings_of;
use crate::wrap::{line, section, shorten, wrap};
use oomscope_analysis::snapshot::analysis::{DeviceAnalysis, SiteBytes, SnapshotAnalysis};
use oomscope_format::units::{format_bytes, format_count, format_duration_us};
use oomscope_snapshot::Snapshot;

/// The snapshot in one line: entries, devices, segments, frames, stacks, expandable segments.
pub fn about_line(snap: &Snapshot, a: &SnapshotAnalysis) -> String {
    format!(
        "{} trace entries on {} device(s) · {} segments · {} unique frames in {} stacks · \
         expandable_segments {}",
        format_count(snap.events() as u64),
        a.devices.len(),
        format_count(snap.segments.len() as u64),
        format_count(snap.frames.len() as u64),
        format_count(snap.stacks.len() as u64),
        if a.expandable_segments { "on" } else { "off" },
    )
}

/// A device's facts, one line each: entries, peak active and reserved, what came before the
/// window, the state at the dump, then each OOM (the terminal and the page print these).
pub fn device_lines(d: &DeviceAnalysis) -> Vec<String> {
    let since = |t: u64| match d.span_us {
        Some((first, _)) if t >= first => format!("+{}", format_duration_us(t - first)),
        _ => "-".to_owned(),
    };
    let span = d.span_us.map_or_else(String::new, |(a, b)| {
        format!(" over {}", format_duration_us(b.saturating_sub(a)))
    });
    let mut lines = vec![
        format!("trace entries: {}{span}", format_count(d.events as u64)),
        format!(
            "peak active: {} at {}",
            format_bytes(d.peak_active_bytes),
            since(d.peak_time_us)
        ),
        format!("peak reserved: {}", format_bytes(d.peak_reserved_bytes)),
    ];
    if d.active_before_bytes > 0 {
        lines.push(format!(
            "before the window: {} active (allocated before the first recorded entry)",
            format_bytes(d.active_before_bytes)
        ));
    }
    lines.push(format!(
        "at the dump: {} reserved, {} active ({} in tensors), {} free inside segments in use, \
         largest free block {}, {} lost to rounding",
        format_bytes(d.reserved_bytes),
        format_bytes(d.active_bytes),
        format_bytes(d.allocated_bytes),
        format_bytes(d.inactive_split_bytes),
        format_bytes(d.largest_free_block_bytes),
        format_bytes(d.rounding_bytes),
    ));
    for o in &d.ooms {
        let free = o
            .device_free_bytes
            .map_or_else(String::new, |f| format!(" with {} free", format_bytes(f)));
        lines.push(format!(
            "OOM at {}: a request of {} from {} failed{free}; {} active, {} reserved",
            since(o.time_us),
            format_bytes(o.requested_bytes),
            o.site,
            format_bytes(o.active_bytes),
            format_bytes(o.reserved_bytes)
        ));
    }
    lines
}

/// What was alive just after entry `index` at `time_us` ([`oomscope_snapshot::timeline::alive_at`]), with
/// the device's first entry time `first_us`, as one line.
pub fn alive_line(
    index: usize,
    time_us: u64,
    first_us: u64,
    alive: &oomscope_snapshot::timeline::AliveAt,
) -> String {
    let before = match alive.before_bytes {
        0 => String::new(),
        b => format!(
            " (of which {} allocated before the recorded window)",
            format_bytes(b)
        ),
    };
    format!(
        "Alive after entry {} (+{}): {} in {} blocks{before}",
        format_count(index as u64 + 1),
        format_duration_us(time_us.saturating_sub(first_us)),
        format_bytes(alive.active_bytes),
        format_count(alive.blocks.len() as u64),
    )
}

/// Titles of the two site tables.
pub mod titles {
    /// Over [`oomscope_analysis::snapshot::analysis::DeviceAnalysis::at_peak`].
    pub const AT_PEAK: &str = "Alive at the peak, by first user frame";
    /// Over [`oomscope_analysis::snapshot::analysis::DeviceAnalysis::at_end`].
    pub const AT_DUMP: &str = "Alive at the dump, by first user frame";
}

/// Renders the summary of `snap` (read from `name`).
pub fn render_snapshot(name: &str, snap: &Snapshot, a: &SnapshotAnalysis) -> String {
    let mut out = String::new();
    line(&mut out, &format!("Memory snapshot: {name}"));
    wrap(&mut out, &about_line(snap, a), 2, 4);
    for w in &snap.warnings {
        wrap(&mut out, &format!("warning: {w}"), 2, 4);
    }
    for d in &a.devices {
        section(&mut out, &format!("GPU {}", d.device));
        for l in device_lines(d) {
            wrap(&mut out, &l, 2, 4);
        }
        sites(&mut out, titles::AT_PEAK, &d.at_peak);
        sites(&mut out, titles::AT_DUMP, &d.at_end);
    }
    let findings: Vec<_> = a
        .findings()
        .iter()
        .map(crate::findings::worded_snapshot)
        .collect();
    findings_of(&mut out, &findings);
    out
}

fn sites(out: &mut String, title: &str, sites: &[SiteBytes]) {
    if sites.is_empty() {
        return;
    }
    line(out, &format!("  {title}"));
    for s in sites {
        line(
            out,
            &shorten(
                &format!(
                    "    {:>10} {:>8}  {}",
                    format_bytes(s.bytes),
                    format!("{} bl.", format_count(s.blocks)),
                    s.site
                ),
                crate::wrap::WIDTH,
            ),
        );
    }
}
