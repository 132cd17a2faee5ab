//! A read and analysed snapshot as a run of messages: how the viewer's Web Worker, which reads
//! and analyses a large snapshot off the page's thread, hands the result to the page.
//!
//! Why a run of messages rather than one: a 1 GB snapshot holds some 8 million entries (340 MB
//! as [`Event`]s). The page decodes one message per task, so it never stops for long, and the
//! worker never holds a second copy of every entry. The first message, the head, holds
//! everything but the entries — segments, frames, stacks, settings, the analysis and the stacked
//! timelines — and how many entries each device has; the entries follow in chunks of at most
//! [`CHUNK_EVENTS`]. Both ends are this module and the messages never leave the page, so the
//! layout is postcard's encoding of these types (their serde derives), not a file format.
//!
//! A damaged or unexpected message is an error, never a panic, and never more entries than the
//! head announced.

use serde::{Deserialize, Serialize};

use oomscope_analysis::snapshot::analysis::SnapshotAnalysis;
use oomscope_snapshot::timeline::StackedTimeline;
use oomscope_snapshot::{Event, Snapshot, SnapshotError, StackId};

/// Entries in one message: about 6 MB encoded, decoded by the page in a few milliseconds.
pub const CHUNK_EVENTS: usize = 1 << 18;

/// A snapshot and what the page shows of it.
#[derive(Debug, Clone)]
pub struct Parts {
    /// What was read.
    pub snapshot: Snapshot,
    /// Its analysis.
    pub analysis: SnapshotAnalysis,
    /// Each analysed device's stacked timeline, in the analysis's device order.
    pub stacked: Vec<StackedTimeline>,
}

/// The first message.
#[derive(Serialize, Deserialize)]
struct Head {
    /// The snapshot without its entries.
    snapshot: Snapshot,
    /// Entries of each device, which the chunks bring.
    events: Vec<u64>,
    analysis: SnapshotAnalysis,
    /// Each device's timeline, which the analysis's JSON leaves out (`#[serde(skip)]`).
    timelines: Vec<Vec<(u64, u64, u64)>>,
    /// Each device's sites' stacks (at the peak, then at the end), which the JSON leaves out.
    site_stacks: Vec<Vec<Option<StackId>>>,
    stacked: Vec<StackedTimeline>,
}

fn damaged(what: impl std::fmt::Display) -> SnapshotError {
    SnapshotError(format!(
        "the snapshot read in the background arrived damaged: {what}"
    ))
}

/// Hands `parts` to `post` as messages: the head, then the entries in chunks. Each device's
/// entries are dropped once they are sent.
#[inline]
pub fn send(parts: Parts, mut post: impl FnMut(Vec<u8>)) -> Result<(), SnapshotError> {
    let Parts {
        mut snapshot,
        mut analysis,
        stacked,
    } = parts;
    let devices = std::mem::take(&mut snapshot.devices);
    let timelines = analysis
        .devices
        .iter_mut()
        .map(|d| std::mem::take(&mut d.timeline))
        .collect();
    let site_stacks = analysis
        .devices
        .iter()
        .map(|d| d.at_peak.iter().chain(&d.at_end).map(|s| s.stack).collect())
        .collect();
    let head = Head {
        snapshot,
        events: devices.iter().map(|d| d.len() as u64).collect(),
        analysis,
        timelines,
        site_stacks,
        stacked,
    };
    post(postcard::to_allocvec(&head).map_err(damaged)?);
    drop(head);
    for (device, events) in devices.into_iter().enumerate() {
        for chunk in events.chunks(CHUNK_EVENTS) {
            post(postcard::to_allocvec(&(device as u32, chunk)).map_err(damaged)?);
        }
    }
    Ok(())
}

/// The page's end: takes the messages [`send`] posted, in order.
#[derive(Debug, Default)]
pub struct Receiver {
    /// What has arrived, once the head has, and the entries each device still waits for.
    received: Option<(Parts, Vec<u64>)>,
}

impl Receiver {
    /// Takes the next message: `Some` with the whole snapshot once its last entries arrived.
    #[inline]
    pub fn push(&mut self, message: &[u8]) -> Result<Option<Parts>, SnapshotError> {
        match &mut self.received {
            None => self.received = Some(unpack_head(message)?),
            Some((parts, waiting)) => {
                let (device, events): (u32, Vec<Event>) =
                    postcard::from_bytes(message).map_err(damaged)?;
                let i = device as usize;
                let (Some(left), Some(into)) =
                    (waiting.get_mut(i), parts.snapshot.devices.get_mut(i))
                else {
                    return Err(damaged(format!("entries of an unknown device {device}")));
                };
                *left = left
                    .checked_sub(events.len() as u64)
                    .ok_or_else(|| damaged(format!("more entries than announced, device {i}")))?;
                into.extend_from_slice(&events);
            }
        }
        let done = self
            .received
            .as_ref()
            .is_some_and(|(_, waiting)| waiting.iter().all(|n| *n == 0));
        Ok(if done {
            self.received.take().map(|(parts, _)| parts)
        } else {
            None
        })
    }
}

/// The head: the snapshot without entries, with the analysis made whole again.
#[inline]
fn unpack_head(message: &[u8]) -> Result<(Parts, Vec<u64>), SnapshotError> {
    let mut head: Head = postcard::from_bytes(message).map_err(damaged)?;
    if head.timelines.len() != head.analysis.devices.len()
        || head.site_stacks.len() != head.analysis.devices.len()
    {
        return Err(damaged("the analysis's devices do not match"));
    }
    for ((d, timeline), stacks) in head
        .analysis
        .devices
        .iter_mut()
        .zip(head.timelines)
        .zip(head.site_stacks)
    {
        if stacks.len() != d.at_peak.len() + d.at_end.len() {
            return Err(damaged("the sites' stacks do not match"));
        }
        d.timeline = timeline;
        for (site, stack) in d.at_peak.iter_mut().chain(&mut d.at_end).zip(stacks) {
            site.stack = stack;
        }
    }
    // Room for every announced entry at once: growing by doubling would copy hundreds of
    // megabytes at a time on the page's thread (measured: stalls of 0.3, 0.5 and 1 s for 1 GB).
    let mut devices = Vec::with_capacity(head.events.len());
    for n in &head.events {
        let mut events = Vec::new();
        usize::try_from(*n)
            .ok()
            .and_then(|n| events.try_reserve_exact(n).ok())
            .ok_or_else(|| damaged(format!("no room for {n} entries")))?;
        devices.push(events);
    }
    head.snapshot.devices = devices;
    Ok((
        Parts {
            snapshot: head.snapshot,
            analysis: head.analysis,
            stacked: head.stacked,
        },
        head.events,
    ))
}

// Natively: proptest needs an entropy source wasm32-unknown-unknown lacks.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use oomscope_analysis::snapshot::analysis::analyze_snapshot;
    use oomscope_snapshot::read_snapshot;
    use oomscope_snapshot::timeline::stacked_by_site;
    use proptest::prelude::*;

    fn parts_of(file: &str) -> Parts {
        let snapshot = read_snapshot(&oomscope_testkit::data::snapshot(file)[..]).unwrap();
        let analysis = analyze_snapshot(&snapshot);
        let stacked = analysis
            .devices
            .iter()
            .map(|d| stacked_by_site(&snapshot, d.device, 8, 600))
            .collect();
        Parts {
            snapshot,
            analysis,
            stacked,
        }
    }

    fn messages(parts: Parts) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        send(parts, |m| out.push(m)).unwrap();
        out
    }

    fn assert_same(a: &Parts, b: &Parts) {
        let (x, y) = (&a.snapshot, &b.snapshot);
        assert_eq!(x.devices, y.devices);
        assert_eq!(x.segments, y.segments);
        assert_eq!(x.frames, y.frames);
        assert_eq!(x.stacks, y.stacks);
        assert_eq!(x.streams, y.streams);
        assert_eq!(x.settings, y.settings);
        assert_eq!(x.warnings, y.warnings);
        assert_eq!(x.truncated, y.truncated);
        assert_eq!(a.analysis, b.analysis);
        assert_eq!(a.stacked, b.stacked);
    }

    #[test]
    fn a_snapshot_arrives_as_it_was_sent() {
        for file in ["small_p4.pickle", "small_p2.pickle", "small_p5.pickle"] {
            let sent = parts_of(file);
            assert!(sent.snapshot.events() > 0, "{file}");
            assert!(sent.analysis.devices.iter().any(|d| !d.timeline.is_empty()));
            let mut receiver = Receiver::default();
            let all = messages(sent.clone());
            let (last, first) = all.split_last().unwrap();
            for m in first {
                assert!(receiver.push(m).unwrap().is_none(), "{file}: done early");
            }
            let got = receiver
                .push(last)
                .unwrap()
                .expect("done at the last message");
            assert_same(&sent, &got);
        }
    }

    #[test]
    fn many_entries_come_in_chunks() {
        let mut sent = parts_of("small_p4.pickle");
        let devices = &mut sent.snapshot.devices;
        let busy = devices.iter().position(|d| !d.is_empty()).unwrap();
        devices[busy] = vec![devices[busy][0]; CHUNK_EVENTS * 2 + 7];
        let chunks: usize = devices.iter().map(|d| d.len().div_ceil(CHUNK_EVENTS)).sum();
        let all = messages(sent.clone());
        assert_eq!(all.len(), 1 + chunks);
        assert!(chunks >= 3);
        let mut receiver = Receiver::default();
        let got = all.iter().find_map(|m| receiver.push(m).unwrap()).unwrap();
        assert_same(&sent, &got);
    }

    #[test]
    fn a_snapshot_without_entries_is_whole_with_its_head() {
        let mut sent = parts_of("small_p4.pickle");
        for d in &mut sent.snapshot.devices {
            d.clear();
        }
        let all = messages(sent.clone());
        assert_eq!(all.len(), 1);
        let got = Receiver::default().push(&all[0]).unwrap().unwrap();
        assert_same(&sent, &got);
    }

    #[test]
    fn damage_is_an_error() {
        let all = messages(parts_of("small_p4.pickle"));
        assert!(all.len() >= 2);
        // A cut head; an entry chunk first; the same chunk twice (more than announced).
        assert!(
            Receiver::default()
                .push(&all[0][..all[0].len() / 2])
                .is_err()
        );
        assert!(Receiver::default().push(b"").is_err());
        let mut r = Receiver::default();
        r.push(&all[0]).unwrap();
        assert!(r.push(&all[0]).is_err(), "a head where entries belong");
        let mut r = Receiver::default();
        r.push(&all[0]).unwrap();
        let mut again = Ok(None);
        for _ in 0..3 {
            again = again.and_then(|_| r.push(&all[1]));
        }
        assert!(again.is_err(), "entries beyond the announced count");
        // Entries of a device the head did not name.
        let mut r = Receiver::default();
        r.push(&all[0]).unwrap();
        let stray = postcard::to_allocvec(&(99u32, Vec::<Event>::new())).unwrap();
        assert!(r.push(&stray).is_err());
    }

    proptest! {
        #[test]
        fn no_message_panics(head in proptest::collection::vec(any::<u8>(), 0..512),
                             next in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut r = Receiver::default();
            let _ = r.push(&head);
            let _ = r.push(&next);
        }
    }
}
