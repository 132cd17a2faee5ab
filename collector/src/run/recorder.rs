//! The recorder thread: the only owner of the trace writer.
//!
//! Every other thread hands it events through one bounded channel, so the writer needs no lock
//! and the sampler and marker threads never wait on disk I/O. It flushes the trace at least every
//! [`FLUSH_EVERY`] even when nothing arrives, so a killed collector leaves a readable file.

use std::fs::File;
use std::io::BufWriter;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::Result;
use oomscope_trace::codec::tag;
use oomscope_trace::{
    BatchTrial, ComponentBreakdown, GradientSummary, NamedBytes, OomEvent, OomSource, Phase,
    TensorStats, TraceWriter,
};

use super::Event;
use super::shared_state::RunState;
use crate::protocol::Message;
use oomscope_trace::oom_text::OomKind;

/// Longest time between two flushes of the trace file.
pub const FLUSH_EVERY: Duration = Duration::from_millis(500);
/// Two OOM reports closer than this with the same (or unknown) size are one OOM told twice
/// (e.g. a marker from the program and the traceback on stderr).
const OOM_DEDUP_US: u64 = 2_000_000;

/// What the program said last; marks without a step or phase inherit it.
#[derive(Debug, Default)]
struct Context {
    step: u64,
    epoch: u32,
    phase: Phase,
    stage: Option<String>,
    last_oom: Option<(u64, Option<u64>)>,
}

/// Writes events to the trace until the `Finish` event, then closes it.
pub fn record_loop(
    mut writer: TraceWriter<BufWriter<File>>,
    events: &Receiver<Event>,
    state: &RunState,
) -> Result<()> {
    let mut ctx = Context::default();
    let mut last_flush = Instant::now();
    let mut dropped_written = [0u64; 2];
    loop {
        match events.recv_timeout(FLUSH_EVERY / 2) {
            Ok(Event::Finish { exit, host_kill }) => {
                let t_us = exit.t_us;
                write_drops(&mut writer, state, t_us, &mut dropped_written)?;
                if let Some(oom) = host_kill {
                    writer.write_oom(&oom)?;
                }
                writer.write_exit(&exit)?;
                writer.finish(t_us)?;
                return Ok(());
            }
            Ok(event) => handle(&mut writer, &mut ctx, state, event)?,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                // Every sender is gone without a Finish: close what we have.
                writer.flush()?;
                return Ok(());
            }
        }
        if last_flush.elapsed() >= FLUSH_EVERY {
            write_drops(&mut writer, state, state.now_us(), &mut dropped_written)?;
            writer.flush()?;
            last_flush = Instant::now();
        }
    }
}

/// Records newly dropped samples and messages as DROPPED records.
fn write_drops(
    writer: &mut TraceWriter<BufWriter<File>>,
    state: &RunState,
    t_us: u64,
    written: &mut [u64; 2],
) -> Result<()> {
    let now = [
        state.dropped_samples.load(Ordering::Relaxed),
        state.dropped_messages.load(Ordering::Relaxed),
    ];
    for ((tag, now), written) in [tag::SAMPLES, tag::MARK]
        .into_iter()
        .zip(now)
        .zip(written.iter_mut())
    {
        if now > *written {
            writer.dropped(t_us, tag, now - *written)?;
            *written = now;
        }
    }
    Ok(())
}

fn handle(
    w: &mut TraceWriter<BufWriter<File>>,
    ctx: &mut Context,
    state: &RunState,
    event: Event,
) -> Result<()> {
    match event {
        Event::Sample { t_us, values } => w.sample(t_us, &values)?,
        Event::Message { t_us, message } => message_to_trace(w, ctx, state, t_us, message)?,
        Event::StderrOom { t_us, oom } => {
            if ctx.is_duplicate_oom(t_us, oom.requested_bytes) {
                return Ok(());
            }
            let stage = ctx.stage.clone().map(|s| w.intern(&s)).transpose()?;
            let source = match oom.kind {
                OomKind::Gpu => OomSource::Stderr,
                OomKind::Host => OomSource::HostError,
            };
            w.write_oom(&OomEvent {
                t_us,
                source,
                stage,
                step: ctx.stage.is_some().then_some(ctx.step),
                requested_bytes: oom.requested_bytes,
                device: oom.device,
                device_free_bytes: oom.free_bytes,
                device_total_bytes: oom.total_bytes,
                message: oom.message,
            })?;
        }
        Event::Finish { .. } => {}
    }
    Ok(())
}

impl Context {
    fn is_duplicate_oom(&mut self, t_us: u64, requested: Option<u64>) -> bool {
        let duplicate = self.last_oom.is_some_and(|(t, r)| {
            t_us.saturating_sub(t) < OOM_DEDUP_US
                && (r == requested || r.is_none() || requested.is_none())
        });
        self.last_oom = Some((t_us, requested));
        duplicate
    }
}

fn message_to_trace(
    w: &mut TraceWriter<BufWriter<File>>,
    ctx: &mut Context,
    state: &RunState,
    t_us: u64,
    message: Message,
) -> Result<()> {
    match message {
        Message::Mark {
            stage,
            step,
            epoch,
            phase,
            snapshot,
        } => {
            ctx.step = step.unwrap_or(ctx.step);
            ctx.epoch = epoch.unwrap_or(ctx.epoch);
            ctx.phase = phase.unwrap_or(ctx.phase);
            w.mark(
                t_us,
                &stage,
                ctx.step,
                ctx.epoch,
                ctx.phase,
                snapshot.as_ref(),
            )?;
            if let Ok(mut shown) = state.stage.lock() {
                shown.0.clone_from(&stage);
                shown.1 = ctx.step;
            }
            ctx.stage = Some(stage);
        }
        Message::Step { step, epoch } => {
            ctx.step = step;
            ctx.epoch = epoch.unwrap_or(ctx.epoch);
        }
        Message::Phase(phase) => ctx.phase = phase,
        Message::Note(text) => w.note(t_us, &text)?,
        Message::Components {
            step,
            batch_size,
            parameters_bytes,
            buffers_bytes,
            gradients_bytes,
            optimizer_state_bytes,
            extras,
        } => {
            let extras = extras
                .iter()
                .map(|(name, bytes)| {
                    Ok(NamedBytes {
                        name: w.intern(name)?,
                        bytes: *bytes,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            w.write_components(&ComponentBreakdown {
                t_us,
                step: step.unwrap_or(ctx.step),
                batch_size,
                parameters_bytes,
                buffers_bytes,
                gradients_bytes,
                optimizer_state_bytes,
                extras,
            })?;
        }
        Message::Gradients {
            step,
            params_with_grad,
            gradient_bytes,
            global_norm,
            nan_count,
            inf_count,
        } => w.write_gradients(&GradientSummary {
            t_us,
            step: step.unwrap_or(ctx.step),
            params_with_grad,
            gradient_bytes,
            global_norm,
            nan_count,
            inf_count,
        })?,
        Message::Tensor {
            name,
            step,
            shape,
            dtype,
            bytes,
            min,
            max,
            mean,
            std,
            nan_count,
            inf_count,
        } => {
            let name = w.intern(&name)?;
            let dtype = w.intern(&dtype)?;
            w.write_tensor(&TensorStats {
                t_us,
                step: step.unwrap_or(ctx.step),
                name,
                shape,
                dtype,
                bytes,
                min,
                max,
                mean,
                std,
                nan_count,
                inf_count,
            })?;
        }
        Message::Trial {
            batch_size,
            outcome,
            peak_bytes,
        } => w.write_batch_trial(&BatchTrial {
            t_us,
            batch_size,
            outcome,
            peak_bytes,
        })?,
        Message::Oom {
            stage,
            step,
            requested_bytes,
            device,
            free_bytes,
            total_bytes,
            message,
        } => {
            ctx.is_duplicate_oom(t_us, requested_bytes);
            let stage = stage.or_else(|| ctx.stage.clone());
            let stage = stage.map(|s| w.intern(&s)).transpose()?;
            w.write_oom(&OomEvent {
                t_us,
                source: OomSource::Marker,
                stage,
                step: step.or(Some(ctx.step)),
                requested_bytes,
                device,
                device_free_bytes: free_bytes,
                device_total_bytes: total_bytes,
                message,
            })?;
        }
    }
    Ok(())
}
