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
use oomscope_trace::{Dropped, Name, OomEvent, Phase, Record, TraceWriter};

use super::Event;
use super::shared_state::RunState;
use crate::protocol::{self, Message};

/// Longest time between two flushes of the trace file.
pub const FLUSH_EVERY: Duration = Duration::from_millis(500);

/// What the program said last: a record that leaves a field to its context takes it from here.
#[derive(Debug, Default)]
struct Context {
    step: u64,
    /// Whether the program has named a step at all (a mark or a `step` message).
    step_known: bool,
    epoch: u32,
    phase: Phase,
    stage: Option<Name>,
    last_oom: Option<OomEvent>,
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
    let mut rows = Vec::new();
    loop {
        let event = events.recv_timeout(FLUSH_EVERY / 2);
        // The rows taken before what arrived go first, so the trace stays in time order.
        let through_us = match &event {
            Ok(Event::Message { t_us, .. }) => *t_us,
            Ok(Event::StderrOom(oom)) => oom.t_us,
            _ => u64::MAX,
        };
        state.rows.take_through(through_us, &mut rows);
        for (t_us, values) in rows.drain(..) {
            writer.sample(t_us, &values)?;
        }
        match event {
            Ok(Event::Finish {
                exit,
                host_kill,
                kills,
            }) => {
                let t_us = exit.t_us;
                write_drops(&mut writer, state, t_us, &mut dropped_written)?;
                for kill in kills {
                    writer.write(&Record::OomKill(kill))?;
                }
                if let Some(oom) = host_kill {
                    writer.write(&Record::Oom(oom))?;
                }
                writer.write(&Record::Exit(exit))?;
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
    for ((record_tag, now), written) in [tag::SAMPLES, tag::MARK]
        .into_iter()
        .zip(now)
        .zip(written.iter_mut())
    {
        if now > *written {
            writer.write(&Record::Dropped(Dropped {
                t_us,
                record_tag,
                count: now - *written,
            }))?;
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
        Event::SamplesReady => {}
        Event::StderrOom(oom) => {
            // The same OOM the program reported a moment ago (its traceback) is not recorded
            // twice; the analysis also keeps one of each (the order of arrival can be either).
            if !ctx.is_duplicate_oom(&oom) {
                let mut record = Record::Oom(oom);
                ctx.resolve(&mut record, &protocol::Context::default());
                w.write(&record)?;
            }
        }
        Event::Message { t_us, message } => match message {
            Message::Step { step, epoch } => {
                ctx.step = step;
                ctx.step_known = true;
                ctx.epoch = epoch.unwrap_or(ctx.epoch);
            }
            Message::Phase(phase) => ctx.phase = phase,
            Message::Record(mut record, given) => {
                record.set_t_us(t_us);
                ctx.resolve(&mut record, &given);
                if let Record::Mark(mark) = &record
                    && let Ok(mut shown) = state.stage.lock()
                {
                    shown.0.clear();
                    shown.0.push_str(&mark.name);
                    shown.1 = mark.step;
                }
                // The program's own report of an OOM is always kept.
                if let Record::Oom(oom) = &record {
                    ctx.is_duplicate_oom(oom);
                }
                w.write(&record)?;
            }
        },
        Event::Finish { .. } => {}
    }
    Ok(())
}

impl Context {
    /// Fills in what the record left to its context, and takes from it what the program says
    /// from now on (a mark's step, epoch, phase and stage).
    fn resolve(&mut self, record: &mut Record, given: &protocol::Context) {
        let step = given.step.unwrap_or(self.step);
        match record {
            Record::Mark(m) => {
                self.step = step;
                self.step_known = true;
                self.epoch = given.epoch.unwrap_or(self.epoch);
                self.phase = given.phase.unwrap_or(self.phase);
                self.stage = Some(m.name.clone());
                (m.step, m.epoch, m.phase) = (self.step, self.epoch, self.phase);
            }
            Record::Components(c) => c.step = step,
            Record::Gradients(g) => g.step = step,
            Record::Tensor(t) => t.step = step,
            Record::Oom(o) => {
                o.stage = given.stage.clone().or_else(|| self.stage.clone());
                o.step = given.step.or(self.step_known.then_some(self.step));
            }
            Record::Trial(_)
            | Record::Exit(_)
            | Record::Note(_)
            | Record::Dropped(_)
            | Record::Alive(_)
            | Record::OomKill(_)
            | Record::ProcessMemory(_) => {}
        }
    }

    fn is_duplicate_oom(&mut self, oom: &OomEvent) -> bool {
        let duplicate = self
            .last_oom
            .as_ref()
            .is_some_and(|last| last.same_oom(oom));
        self.last_oom = Some(oom.clone());
        duplicate
    }
}
