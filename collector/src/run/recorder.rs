//! The recorder thread: the only owner of the trace writer.
//!
//! Readings and marker messages reach it in time order through [`RunState::pending`] (the sampler
//! and the inbox append, nudging now and then); everything else through one bounded channel of
//! [`Event`]s. So the writer needs no lock and no producer ever waits on disk I/O. It flushes the trace at least every
//! [`FLUSH_EVERY`] even when nothing arrives, so a killed collector leaves a readable file.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::Result;
use oomscope_format::codec::tag;
use oomscope_format::{
    CounterId, Dropped, Name, OomEvent, Phase, ProcessInfo, Record, TraceWriter,
};

use super::event::{Ending, Event};
use super::shared_state::{Pending, PidCounters, RunState};
use oomscope_format::protocol::{self, Message};

/// Longest time between two flushes of the trace file.
pub const FLUSH_EVERY: Duration = Duration::from_millis(500);

/// What one sender said last: a record that leaves a field to its context takes it from here.
#[derive(Debug, Default)]
struct Context {
    step: u64,
    /// Whether the program has named a step at all (a mark or a `step` message).
    step_known: bool,
    epoch: u32,
    phase: Phase,
    stage: Option<Name>,
}

/// Every sender's context: several processes (torchrun's ranks) share one collector, and each
/// one's step, phase and stage are its own.
#[derive(Debug, Default)]
struct Senders {
    by_pid: HashMap<Option<u32>, Context>,
    /// Who sent the last record: a stderr OOM without a rank takes this sender's context.
    last: Option<u32>,
    last_oom: Option<OomEvent>,
    /// Provisional ids of per-process counters → declared ids.
    counters: HashMap<CounterId, CounterId>,
}

/// Writes events to the trace until the `Finish` event, then closes it.
pub fn record_loop(
    mut writer: TraceWriter<BufWriter<File>>,
    events: &Receiver<Event>,
    state: &RunState,
) -> Result<()> {
    let mut senders = Senders::default();
    let mut last_flush = Instant::now();
    let mut dropped_written = [0u64; 2];
    let mut pending = Vec::new();
    loop {
        let event = events.recv_timeout(FLUSH_EVERY / 2);
        // What the sampler took before what arrived goes first, so the trace stays in time order.
        let through_us = match &event {
            Ok(Event::StderrOom(oom)) => {
                // The program's marks before its traceback may still be in its ring, read at
                // the sampler's next drain: the OOM takes the stage they say.
                wait_for_inbox(state, oom.t_us);
                oom.t_us
            }
            _ => u64::MAX,
        };
        state.pending.take_through(through_us, &mut pending);
        if pending.iter().any(|p| matches!(p, Pending::Row(_))) {
            senders.declare_pending(&mut writer, state)?;
        }
        for item in pending.drain(..) {
            match item {
                Pending::Row((t_us, mut values)) => {
                    senders.map_provisional(&mut values);
                    writer.sample(t_us, &values)?;
                }
                Pending::Message {
                    t_us,
                    message,
                    sender,
                } => senders.message(&mut writer, state, t_us, *message, sender)?,
            }
        }
        match event {
            Ok(Event::Finish {
                ending,
                host_kill,
                kills,
            }) => {
                let t_us = ending.t_us();
                write_drops(&mut writer, state, t_us, &mut dropped_written)?;
                for kill in kills {
                    writer.write(&Record::OomKill(kill))?;
                }
                if let Some(oom) = host_kill {
                    writer.write(&Record::Oom(oom))?;
                }
                writer.write(&match ending {
                    Ending::Exited(exit) => Record::Exit(exit),
                    Ending::Watch(end) => Record::Attach(end),
                })?;
                writer.finish(t_us)?;
                return Ok(());
            }
            Ok(event) => senders.handle(&mut writer, state, event)?,
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

/// Longest the recorder holds a stderr OOM for the inbox to read the marks sent before it (the
/// sampler drains at least every tick, and every 50 ms).
const INBOX_WAIT: Duration = Duration::from_millis(200);

/// Waits (bounded) until the inbox has read what was sent up to `t_us`.
fn wait_for_inbox(state: &RunState, t_us: u64) {
    let start = Instant::now();
    while state.inbox_read_us.load(Ordering::Relaxed) < t_us && start.elapsed() < INBOX_WAIT {
        std::thread::sleep(Duration::from_millis(1));
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

impl Senders {
    /// Declares the per-process counters the sampler started using.
    fn declare_pending(
        &mut self,
        w: &mut TraceWriter<BufWriter<File>>,
        state: &RunState,
    ) -> Result<()> {
        let pending = match state.pid_counters.lock() {
            Ok(mut c) => c.take_pending(),
            Err(_) => return Ok(()),
        };
        for (provisional, kind, device, pid) in pending {
            let id = w.declare_process_counter(kind, device, pid)?;
            self.counters.insert(provisional, id);
        }
        Ok(())
    }

    /// Replaces provisional counter ids in a row by the declared ones (a value whose counter is
    /// unknown is left out).
    fn map_provisional(&self, values: &mut Vec<(CounterId, u64)>) {
        if values
            .iter()
            .any(|(id, _)| id.0 >= PidCounters::PROVISIONAL)
        {
            values.retain_mut(|(id, _)| {
                if id.0 < PidCounters::PROVISIONAL {
                    return true;
                }
                self.counters.get(id).map(|real| *id = *real).is_some()
            });
        }
    }

    fn handle(
        &mut self,
        w: &mut TraceWriter<BufWriter<File>>,
        state: &RunState,
        event: Event,
    ) -> Result<()> {
        match event {
            Event::Pending | Event::Finish { .. } => {}
            Event::Records(records) => {
                for record in records {
                    w.write(&record)?;
                }
            }
            Event::StderrOom(mut oom) => {
                // The rank a `[rankN]: ` prefix named, else the last sender.
                let sender = match oom.rank {
                    Some(rank) => state
                        .processes
                        .lock()
                        .ok()
                        .and_then(|p| p.ranks().into_iter().find(|(_, r)| *r == rank))
                        .map(|(pid, _)| pid),
                    None => self.last,
                };
                oom.pid = sender.filter(|_| oom.rank.is_some());
                // The same OOM the program reported a moment ago (its traceback) is not recorded
                // twice; the analysis also keeps one of each (the order of arrival can be either).
                if !self.is_duplicate_oom(&oom) {
                    let mut record = Record::Oom(oom);
                    self.context(sender)
                        .resolve(&mut record, &protocol::Context::default());
                    w.write(&record)?;
                }
            }
        }
        Ok(())
    }

    fn context(&mut self, sender: Option<u32>) -> &mut Context {
        self.by_pid.entry(sender).or_default()
    }

    fn message(
        &mut self,
        w: &mut TraceWriter<BufWriter<File>>,
        state: &RunState,
        t_us: u64,
        message: Message,
        kernel_pid: Option<u32>,
    ) -> Result<()> {
        // Contexts are kept per sender as the kernel states it (the tch `Session` sends from
        // inside the process: one context); a record names its sender by the kernel's pid,
        // else by its own `pid=`.
        let sender = kernel_pid;
        match message {
            Message::Step { step, epoch } => {
                let ctx = self.context(sender);
                ctx.step = step;
                ctx.step_known = true;
                ctx.epoch = epoch.unwrap_or(ctx.epoch);
            }
            Message::Phase(phase) => self.context(sender).phase = phase,
            // The sampler took its time and reading (`sampler::Drained`); nothing is left.
            Message::At(_) | Message::Ring(_) => {}
            Message::Record(Record::Process(said), _) => {
                if let Some(pid) = sender {
                    for record in state.with_processes(|p| p.said(pid, &said, t_us)) {
                        w.write(&record)?;
                    }
                }
            }
            Message::Record(mut record, given) => {
                // A host error the hooks saw is an OOM only when the one recogniser of OOM texts
                // says so (the hooks send what might be one); it also reads the request.
                if let Record::Oom(oom) = &mut record
                    && !read_host_error(oom)
                {
                    return Ok(());
                }
                record.set_t_us(t_us);
                self.attribute(w, state, &mut record, kernel_pid, t_us)?;
                self.last = sender;
                self.context(sender).resolve(&mut record, &given);
                if let Record::Mark(mark) = &record
                    && let Ok(mut shown) = state.stage.lock()
                {
                    shown.0.clear();
                    shown.0.push_str(&mark.name);
                    shown.1 = mark.step;
                }
                // The program's own report of an OOM is always kept.
                if let Record::Oom(oom) = &record {
                    self.is_duplicate_oom(oom);
                }
                w.write(&record)?;
            }
        }
        Ok(())
    }

    /// Names the sender of a mark, an OOM, an input, an eval's autograd state or a saved snapshot:
    /// its pid and (a mark's, an OOM's) its rank
    /// (the one it states, which the registry then keeps, else the registry's).
    fn attribute(
        &mut self,
        w: &mut TraceWriter<BufWriter<File>>,
        state: &RunState,
        record: &mut Record,
        sender: Option<u32>,
        t_us: u64,
    ) -> Result<()> {
        let (pid, rank) = match record {
            Record::Mark(m) => (&mut m.pid, &mut m.rank),
            Record::Oom(o) => (&mut o.pid, &mut o.rank),
            Record::Input(i) => {
                i.pid = sender.or(i.pid);
                return Ok(());
            }
            Record::EvalAutograd(e) => {
                e.pid = sender.or(e.pid);
                return Ok(());
            }
            Record::SavedSnapshot(s) => {
                s.pid = sender.or(s.pid);
                return Ok(());
            }
            Record::MarkSampling(m) => {
                m.pid = sender.or(m.pid);
                return Ok(());
            }
            Record::ProgramEnd(e) => {
                e.pid = sender.or(e.pid);
                return Ok(());
            }
            _ => return Ok(()),
        };
        *pid = sender.or(*pid);
        let Some(sender) = sender else {
            return Ok(());
        };
        match *rank {
            Some(stated) => {
                let said = ProcessInfo {
                    rank: Some(stated),
                    ..ProcessInfo::default()
                };
                for r in state.with_processes(|p| p.said(sender, &said, t_us)) {
                    w.write(&r)?;
                }
            }
            None => {
                *rank = state.processes.lock().ok().and_then(|p| p.rank_of(sender));
            }
        }
        Ok(())
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
            Record::Input(i) => i.step = step,
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
            | Record::ProcessMemory(_)
            | Record::Process(_)
            | Record::ProcessEnd(_)
            | Record::Held(_)
            | Record::Gc(_)
            | Record::EvalAutograd(_)
            | Record::SavedSnapshot(_)
            | Record::MarkSampling(_)
            | Record::ProgramEnd(_)
            | Record::Attach(_) => {}
        }
    }
}

/// A host error's OOM record as the hooks sent it (`source=host_error`, the error's line as its
/// message): whether [`oomscope_analysis::oom_text::recognise_text`] takes the line for a host
/// out-of-memory error (a device's the allocator's observer reports), and then its request when
/// the record has none. Other OOM records pass.
fn read_host_error(oom: &mut OomEvent) -> bool {
    if oom.source != oomscope_format::OomSource::HostError {
        return true;
    }
    match oomscope_analysis::oom_text::recognise_text(&oom.message) {
        Some(text) if text.kind == oomscope_format::OomKind::Host => {
            oom.requested_bytes = oom.requested_bytes.or(text.requested_bytes);
            true
        }
        _ => false,
    }
}
