//! The words for what rose before a fatal OOM in an eval (`RunUp`): one fact and one change,
//! used by the kill finding (`host-memory-pressure`) and the CUDA OOM finding (`oom`) alike.

use oomscope_analysis::facts::RunUp;
use oomscope_format::units::{format_bytes, format_count, format_signed_bytes};
use oomscope_format::{HeldKind, HeldTensors, OomKind};

use crate::phrases::holder;

/// "it died in the eval at step 99, which had added +144 MiB of host.rss over its 19 batches
/// (8.02 MiB a batch); counted at its batches 5 and 13, list `all_logits` (12 items) gained 8
/// float32[64x32768] (8.00 MiB a batch)" (without growth: "… (19 batch(es) in)").
pub(crate) fn fact(r: &RunUp) -> String {
    let step = format_count(r.eval_step);
    let batches = format_count(r.batches as u64);
    let mut fact = match (r.metric_ran_out, r.growth_bytes.filter(|g| *g > 0)) {
        (true, Some(growth)) => format!(
            "it died in the eval at step {step}, which had added {} of {} over its {batches} \
             batches{}",
            format_signed_bytes(growth),
            r.metric.label(),
            r.per_batch_bytes()
                .map_or_else(String::new, |b| format!(" ({} a batch)", format_bytes(b)))
        ),
        _ => format!("it died in the eval at step {step} ({batches} batch(es) in)"),
    };
    if let Some(h) = r.held.first() {
        fact.push_str(&format!(
            "; counted at its batches {} and {}, {} gained {}",
            format_count(h.from_step),
            format_count(h.to_step),
            holder(h),
            gained(h)
        ));
    }
    fact
}

/// What the top row gained: "8 float32[64x32768] (8.00 MiB a batch)".
fn gained(h: &HeldTensors) -> String {
    let per_batch = format_bytes(h.bytes / h.steps());
    match h.kind {
        HeldKind::Objects => format!(
            "{} items ({per_batch} a batch of Python objects)",
            format_count(h.count)
        ),
        _ => format!(
            "{} {}[{}] ({per_batch} a batch)",
            format_count(h.count),
            h.dtype,
            h.shape
        ),
    }
}

/// The change when the eval grew batch by batch (or the hooks counted what it kept); `None`
/// when the eval did not grow: what filled memory is elsewhere.
pub(crate) fn change(r: &RunUp) -> Option<Vec<String>> {
    let grew = r.per_batch_bytes().is_some() && r.metric_ran_out;
    let holder = r.held.first().map(holder).filter(|h| !h.is_empty());
    if !grew && holder.is_none() {
        return None;
    }
    let kept = holder.map_or_else(
        || {
            "the eval keeps something of every batch (its outputs appended to a list, a dict of \
            predictions)"
                .to_owned()
        },
        |h| format!("the eval keeps every batch's results in {h}"),
    );
    let autograd = if r.autograd == Some(true) {
        "run it under torch.no_grad() (or torch.inference_mode()), since its outputs keep their \
         autograd graphs; and "
    } else {
        ""
    };
    let elsewhere = match r.kind {
        OomKind::Gpu => "move what must be kept to the CPU as it comes (.cpu()), ",
        OomKind::Host => "",
    };
    Some(vec![
        format!(
            "{kept} until it ends: {autograd}reduce each batch as it comes (update a running \
             metric, keep .item() or the top-k instead of whole logits), {elsewhere}or write the \
             outputs to disk as they come (np.memmap, one file per shard) and read them back"
        ),
        "a torch.cat over the list at the end needs as much again".to_owned(),
    ])
}

/// "list `validation_step_outputs` (12 items) gained 4 float32[512x1536] over batches 3-7 of
/// an eval (3.00 MiB a batch)".
pub(crate) fn kept_in(h: &HeldTensors) -> String {
    format!(
        "{} gained {} over batches {}-{} of an eval",
        holder(h),
        gained(h),
        format_count(h.from_step),
        format_count(h.to_step)
    )
}
