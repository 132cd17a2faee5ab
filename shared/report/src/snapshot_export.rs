//! A snapshot's allocation timeline in other tools' formats: CSV (a row per trace entry) for
//! pandas, DuckDB or a spreadsheet, and Chrome trace-event JSON for Perfetto.
//!
//! Both are written as they are produced (a 1 GB snapshot holds millions of entries), and both
//! carry the replayed active and reserved bytes after each entry ([`oomscope_snapshot::timeline::replay`]),
//! the numbers the summary and the viewer show.

use std::io::{self, Write};

use serde_json::json;

use crate::export::csv_field;
use oomscope_snapshot::timeline::{replay, start};
use oomscope_snapshot::{Action, Sites, Snapshot};

/// The CSV's header: `time_us` is torch's clock (µs since the Unix epoch); `addr` is empty on
/// OOM entries, whose `device_free_bytes` says what the device had free; `site` is the
/// allocation's first user frame.
pub const CSV_HEADER: &str = "time_us,device,action,addr,size_bytes,stream,active_bytes,reserved_bytes,device_free_bytes,site";

/// Every entry of every device, one CSV row each, devices in order.
pub fn write_csv(snap: &Snapshot, out: &mut dyn Write) -> io::Result<()> {
    let sites = Sites::new(snap);
    writeln!(out, "{CSV_HEADER}")?;
    for device in 0..snap.devices.len() as u32 {
        let events = oomscope_snapshot::timeline::events_of(snap, device);
        for step in replay(events, start(snap, device)) {
            let e = step.event;
            let (addr, free) = match e.device_free_bytes() {
                Some(f) => (String::new(), f.to_string()),
                None if e.action == Action::Oom => (String::new(), String::new()),
                None => (e.addr.to_string(), String::new()),
            };
            writeln!(
                out,
                "{},{device},{},{addr},{},{},{},{},{free},{}",
                e.time_us,
                e.action.name(),
                e.size,
                snap.streams.get(e.stream as usize).copied().unwrap_or(0),
                step.active_bytes,
                step.reserved_bytes,
                csv_field(sites.of(e.stack)),
            )?;
        }
    }
    Ok(())
}

/// Chrome trace-event JSON: per device a counter track of active and reserved bytes (an event
/// per entry that changes them) and an instant event per OOM; times are µs since the first entry
/// (the epoch time of that entry is in `otherData`).
pub fn write_chrome_json(snap: &Snapshot, out: &mut dyn Write) -> io::Result<()> {
    let sites = Sites::new(snap);
    let t0 = snap
        .devices
        .iter()
        .filter_map(|d| d.first())
        .map(|e| e.time_us)
        .min()
        .unwrap_or(0);
    out.write_all(b"{\"traceEvents\":[")?;
    let mut first = true;
    let mut event = |out: &mut dyn Write, value: serde_json::Value| -> io::Result<()> {
        if !std::mem::take(&mut first) {
            out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut *out, &value).map_err(|e| match e.io_error_kind() {
            Some(kind) => io::Error::from(kind),
            None => io::Error::other(e),
        })
    };
    for device in 0..snap.devices.len() as u32 {
        let events = oomscope_snapshot::timeline::events_of(snap, device);
        if events.is_empty() {
            continue;
        }
        event(
            out,
            json!({"ph": "M", "name": "process_name", "pid": device, "args": {"name": format!("GPU {device}")}}),
        )?;
        let mut last = None;
        for step in replay(events, start(snap, device)) {
            let e = step.event;
            let ts = e.time_us.saturating_sub(t0);
            let now = (step.active_bytes, step.reserved_bytes);
            if last != Some(now) {
                event(
                    out,
                    json!({"ph": "C", "name": "memory (bytes)", "pid": device, "ts": ts,
                        "args": {"active": now.0, "reserved": now.1}}),
                )?;
                last = Some(now);
            }
            if e.action == Action::Oom {
                event(
                    out,
                    json!({"ph": "i", "s": "p", "name": "OOM", "pid": device, "ts": ts,
                        "args": {"requested_bytes": e.size, "device_free_bytes": e.device_free_bytes(),
                            "site": sites.of(e.stack)}}),
                )?;
            }
        }
    }
    write!(
        out,
        "],\"displayTimeUnit\":\"ms\",\"otherData\":{}}}",
        json!({"generator": "oomscope", "first_entry_unix_us": t0})
    )?;
    Ok(())
}
