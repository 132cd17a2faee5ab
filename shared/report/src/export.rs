//! Exports of a trace to other tools' formats: CSV for spreadsheets and scripts, Chrome
//! trace-event JSON for Perfetto / `chrome://tracing`.
//!
//! They live here, not in the collector, because the browser viewer offers the same exports and
//! must produce the same bytes.

use std::fmt::Write as _;

use serde_json::{Value, json};

use oomscope_format::{AllocatorStats, MISSING, Mark, Phase, Trace};

/// CSV with one row per sample and one per mark, in time order.
///
/// Columns: `t_secs`, `kind` (`sample`/`mark`), `stage` (the mark's own, or for samples the stage
/// active then), `step`, `phase`, one column per declared counter (named as recorded, e.g.
/// `gpu0.used`), `gpuN.total` per GPU, then the allocator's statistics of mark rows (`allocated`,
/// `reserved`, `active`, `inactive_split`, `peak_allocated`, `peak_reserved`,
/// `num_alloc_retries`, `num_ooms`). Memory in bytes; an empty cell means "not measured then".
pub fn to_csv(trace: &Trace) -> String {
    const ALLOCATOR_COLUMNS: [&str; 8] = AllocatorStats::FIELD_NAMES;
    let mut out = String::with_capacity(64 * (trace.samples.len() + trace.marks.len()) + 256);
    let mut header = vec!["t_secs", "kind", "stage", "step", "phase"]
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    header.extend(trace.counters.iter().map(|c| c.name.clone()));
    header.extend(
        trace
            .metadata
            .gpus
            .iter()
            .map(|g| format!("gpu{}.total", g.index)),
    );
    header.extend(ALLOCATOR_COLUMNS.iter().map(|c| (*c).to_owned()));
    let header: Vec<String> = header.iter().map(|h| csv_field(h)).collect();
    out.push_str(&header.join(","));
    out.push('\n');

    let totals: Vec<u64> = trace
        .metadata
        .gpus
        .iter()
        .map(|g| g.total_memory_bytes)
        .collect();
    let times = trace.samples.times_us();
    let (mut row, mut mark) = (0usize, 0usize);
    // The stage active at a sample: the latest mark at or before it.
    let mut active: Option<&Mark> = None;
    while row < times.len() || mark < trace.marks.len() {
        let take_mark = mark < trace.marks.len()
            && (row >= times.len() || trace.marks[mark].t_us <= times.at(row));
        if take_mark {
            let m = &trace.marks[mark];
            active = Some(m);
            let _ = write!(
                out,
                "{},mark,{},{},{}",
                secs(m.t_us),
                csv_field(m.name.as_ref()),
                m.step,
                m.phase.label()
            );
            for id in 0..trace.counters.len() {
                out.push(',');
                if let Some(v) = trace
                    .samples
                    .value_at(oomscope_format::CounterId(id as u32), m.t_us)
                {
                    let _ = write!(out, "{v}");
                }
            }
            for t in &totals {
                let _ = write!(out, ",{t}");
            }
            match trace.marks.allocator(mark) {
                Some(s) => {
                    for v in s.values() {
                        let _ = write!(out, ",{v}");
                    }
                }
                None => out.push_str(&",".repeat(ALLOCATOR_COLUMNS.len())),
            }
            mark += 1;
        } else {
            let (stage, step, phase) = active.map_or(("", String::new(), Phase::Unknown), |m| {
                (m.name.as_ref(), m.step.to_string(), m.phase)
            });
            let _ = write!(
                out,
                "{},sample,{},{step},{}",
                secs(times.at(row)),
                csv_field(stage),
                if active.is_some() { phase.label() } else { "" }
            );
            for id in 0..trace.counters.len() {
                out.push(',');
                if let Some(v) = trace
                    .samples
                    .value(oomscope_format::CounterId(id as u32), row)
                {
                    let _ = write!(out, "{v}");
                }
            }
            for t in &totals {
                let _ = write!(out, ",{t}");
            }
            out.push_str(&",".repeat(ALLOCATOR_COLUMNS.len()));
            row += 1;
        }
        out.push('\n');
    }
    out
}

fn secs(t_us: u64) -> String {
    format!("{}.{:06}", t_us / 1_000_000, t_us % 1_000_000)
}

/// RFC 4180: quote a field holding a comma, quote, or line break; double inner quotes.
pub(crate) fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

/// Chrome trace-event JSON (the "JSON Object Format"), which Perfetto and `chrome://tracing`
/// open: one counter track per GPU (`used`, `free`, `process`, ... in bytes), one for the host,
/// one for the allocator at marks, stage slices from each mark to the next, and instant events
/// for OOMs and notes. Counter events are written only when a value changes, which keeps a
/// long steady run small without losing any change.
pub fn to_chrome_json(trace: &Trace) -> String {
    let mut events: Vec<Value> = Vec::new();
    let pid = trace.metadata.pid;
    let command = trace.metadata.command.join(" ");
    events.push(json!({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": format!("oomscope: {command}")}}));
    events.push(
        json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "args": {"name": "stages"}}),
    );

    // Counter tracks: group counters by device (or host), one event per change of the group.
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, c) in trace.counters.iter().enumerate() {
        let track = match c.device {
            Some(d) => format!("gpu{d} memory (bytes)"),
            None => "host memory (bytes)".to_owned(),
        };
        match groups.iter_mut().find(|(name, _)| *name == track) {
            Some((_, members)) => members.push(i),
            None => groups.push((track, vec![i])),
        }
    }
    let times = trace.samples.times_us();
    for (track, members) in &groups {
        let columns: Vec<Option<oomscope_format::Column<'_>>> = members
            .iter()
            .map(|i| trace.samples.column(oomscope_format::CounterId(*i as u32)))
            .collect();
        let mut last: Vec<u64> = vec![MISSING; members.len()];
        for (row, t) in times.iter().enumerate() {
            let now: Vec<u64> = columns
                .iter()
                .map(|c| c.and_then(|c| c.get(row)).unwrap_or(MISSING))
                .collect();
            if now == last || now.iter().all(|v| *v == MISSING) {
                continue;
            }
            let mut args = serde_json::Map::new();
            for (k, v) in members.iter().zip(&now) {
                if *v != MISSING {
                    args.insert(counter_label(trace, *k), json!(v));
                }
            }
            events.push(json!({"ph": "C", "name": track, "pid": pid, "ts": t, "args": args}));
            last = now;
        }
    }
    for (m, stats) in trace.marks.iter().zip(trace.marks.allocator_iter()) {
        if let Some(s) = &stats {
            events.push(
                json!({"ph": "C", "name": "allocator (bytes)", "pid": pid, "ts": m.t_us,
                "args": {"allocated": s.allocated_bytes, "reserved": s.reserved_bytes}}),
            );
        }
    }
    // Stage slices: from each mark to the next (the last one to the end of the trace).
    let end = trace.duration_us();
    for (i, m) in trace.marks.iter().enumerate() {
        let next = trace.marks.get(i + 1).map_or(end, |n| n.t_us);
        events.push(json!({"ph": "X", "name": m.name.as_ref(), "pid": pid, "tid": 1, "ts": m.t_us,
            "dur": next.saturating_sub(m.t_us), "args": {"step": m.step, "epoch": m.epoch, "phase": m.phase.label()}}));
    }
    for o in &trace.ooms {
        events.push(json!({"ph": "i", "s": "g", "name": "OOM", "pid": pid, "tid": 1, "ts": o.t_us,
            "args": {"requested_bytes": o.requested_bytes, "device": o.device, "message": o.message}}));
    }
    for n in &trace.notes {
        events
            .push(json!({"ph": "i", "s": "g", "name": n.text, "pid": pid, "tid": 1, "ts": n.t_us}));
    }
    let doc = json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"host": trace.metadata.host, "command": command, "generator": "oomscope"},
    });
    doc.to_string()
}

/// `used` for `gpu0.used`: the part after the device prefix, unique within its track.
fn counter_label(trace: &Trace, index: usize) -> String {
    let c = &trace.counters[index];
    c.name.rsplit('.').next().unwrap_or(&c.name).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::{CounterKind, decode};
    use oomscope_testkit::synth::TrainingRun;

    fn trace() -> Trace {
        decode(
            &TrainingRun {
                steps: 3,
                ..TrainingRun::default()
            }
            .to_bytes(),
        )
        .unwrap()
        .trace
    }

    #[test]
    fn csv_has_a_row_per_sample_and_mark() {
        let t = trace();
        let csv = to_csv(&t);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 1 + t.samples.len() + t.marks.len());
        let header: Vec<&str> = lines[0].split(',').collect();
        assert_eq!(&header[..5], ["t_secs", "kind", "stage", "step", "phase"]);
        assert!(header.contains(&"gpu0.used") && header.contains(&"gpu0.total"));
        let width = header.len();
        assert!(lines.iter().all(|l| l.split(',').count() == width));
        let first_mark = lines.iter().find(|l| l.contains(",mark,")).unwrap();
        let allocated = first_mark
            .split(',')
            .nth(header.iter().position(|h| *h == "allocated_bytes").unwrap())
            .unwrap();
        assert_eq!(
            allocated.parse::<u64>().unwrap(),
            t.marks.allocator(0).unwrap().allocated_bytes
        );
        let used = t.counter(CounterKind::GpuUsed, Some(0)).unwrap();
        let sample = lines.iter().find(|l| l.contains(",sample,")).unwrap();
        let col = header.iter().position(|h| *h == "gpu0.used").unwrap();
        assert_eq!(
            sample.split(',').nth(col).unwrap().parse::<u64>().unwrap(),
            t.samples.value(used, 0).unwrap()
        );
    }

    #[test]
    fn csv_quotes_hostile_stage_names() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("plain"), "plain");
    }

    #[test]
    fn chrome_json_has_counters_slices_and_is_valid() {
        let t = trace();
        let json: Value = serde_json::from_str(&to_chrome_json(&t)).unwrap();
        let events = json["traceEvents"].as_array().unwrap();
        let slices = events.iter().filter(|e| e["ph"] == "X").count();
        assert_eq!(slices, t.marks.len());
        let counters: Vec<&Value> = events
            .iter()
            .filter(|e| e["ph"] == "C" && e["name"] == "gpu0 memory (bytes)")
            .collect();
        assert!(!counters.is_empty() && counters.len() <= t.samples.len());
        assert!(counters[0]["args"]["used"].as_u64().unwrap() > 0);
    }
}
