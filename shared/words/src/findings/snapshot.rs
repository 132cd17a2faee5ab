//! The words of a memory snapshot's findings: its OOM, the sites that kept memory, and
//! fragmentation, with the same advice as a trace's.

use super::allocator::expandable_segments;
use super::finding_text::FindingText;
use oomscope_analysis::snapshot::analysis::{
    OomCause, SnapshotDetail, SnapshotFragmentation, SnapshotOomFound,
};
use oomscope_format::units::{format_bytes, format_count, format_percent};

/// A snapshot's finding.
pub(super) fn text(d: &SnapshotDetail) -> FindingText {
    match d {
        SnapshotDetail::Oom(o) => oom(o),
        SnapshotDetail::Kept { site: k, .. } => FindingText::new(
            format!(
                "Memory kept across the recording at {}: {} in {} blocks, none freed",
                k.site,
                format_bytes(k.bytes),
                format_count(k.blocks)
            ),
            format!(
                "{} allocations at {} spread over {}% of the recording are all still live at its \
                 end, while other sites' memory was freed and reused",
                format_count(k.blocks),
                k.site,
                k.spread_permille / 10
            ),
            vec![format!(
                "look for tensors kept across steps at {}: a list that grows (losses, outputs), a \
                 tensor stored without .detach() or .item(), a cache that is never cleared",
                k.site
            )],
        ),
        SnapshotDetail::Fragmented(f) => fragmented(f),
    }
}

/// The device's first OOM: where the request came from, what held memory, and why it failed.
fn oom(d: &SnapshotOomFound) -> FindingText {
    let o = &d.oom;
    let mut facts = vec![format!(
        "the request came from {}; {} were active and {} reserved when it failed",
        o.site,
        format_bytes(o.active_bytes),
        format_bytes(o.reserved_bytes)
    )];
    let holders: Vec<String> = d
        .holders
        .iter()
        .map(|s| format!("{} {}", s.site, format_bytes(s.bytes)))
        .collect();
    if !holders.is_empty() {
        facts.push(format!(
            "the largest holders at the peak: {}",
            holders.join(", ")
        ));
    }
    let changes = match d.cause {
        OomCause::TooLarge => {
            facts.push(format!(
                "the request alone is larger than all this process had ({} reserved + {} free)",
                format_bytes(o.reserved_bytes),
                format_bytes(o.device_free_bytes.unwrap_or(0))
            ));
            vec![format!(
                "check the shape of the tensor made at {}: no freeing elsewhere makes room for it",
                o.site
            )]
        }
        OomCause::Fragmented {
            free_cached_bytes,
            largest_free_block_bytes,
        } => {
            facts.push(format!(
                "the cache held {} free, but its largest free block is {}",
                format_bytes(free_cached_bytes),
                format_bytes(largest_free_block_bytes)
            ));
            expandable_segments()
        }
        OomCause::Short => vec![format!(
            "make room for the request at {}: a smaller batch or sequence, activation \
             checkpointing, or freeing what the largest holders keep",
            o.site
        )],
    };
    let free = o.device_free_bytes.map_or_else(String::new, |f| {
        format!(" with {} free on the device", format_bytes(f))
    });
    FindingText::new(
        format!(
            "Out of memory on GPU {}: a request of {} failed{free}",
            d.device,
            format_bytes(o.requested_bytes)
        ),
        facts.join("; "),
        changes,
    )
}

/// Free memory split between live blocks.
fn fragmented(f: &SnapshotFragmentation) -> FindingText {
    FindingText::new(
        format!(
            "Allocator fragmentation on GPU {}: {} free inside segments still in use",
            f.device,
            format_bytes(f.inactive_split_bytes)
        ),
        format!(
            "{} of the {} reserved is free but split between live blocks, so it can neither be \
             released nor serve a request larger than {}",
            format_percent(f.share()),
            format_bytes(f.reserved_bytes),
            format_bytes(f.largest_free_block_bytes)
        ),
        if f.expandable {
            vec![
                "expandable_segments is already on: pad varying input shapes to a few fixed \
                 sizes, or set max_split_size_mb to keep large blocks from being split"
                    .to_owned(),
            ]
        } else {
            expandable_segments()
        },
    )
}
