//! `Session`: stage marks, steps, phases and statistics from inside a tch training loop.
//!
//! Three modes, one API:
//! - under `collector run` (`OOMSCOPE_SOCKET` set): messages go to the collector through the
//!   marker protocol, and the collector records them with its own GPU and host sampling;
//! - standalone ([`Session::start`]): the program records its own trace, with the collector's
//!   sampler thread (host memory of this process, NVML when present, and the caching allocator's
//!   counters) and recorder thread;
//! - off ([`Session::from_env`] outside the collector): every call returns at once.
//!
//! Marks carry the caching allocator's statistics whenever CUDA is in use.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use oomscope_format::protocol::{self, Message};
use oomscope_format::{
    AllocatorStats, ComponentBreakdown, CounterId, CounterKind, ExitStatus, GradientSummary, Name,
    NamedBytes, Note, OomEvent, OomSource, Phase, ProcessExit, Record, StageMark,
};

use super::allocator::{self, ObservedOom};
use super::stats::{PendingGradientStats, gradient_stats, gradient_stats_async, tensor_summary};
use crate::gpu::{GpuSelection, Gpus};
use crate::probe::{Probe, rank_from_env};
use crate::run::event::Event;
use crate::run::inbox;
use crate::run::recording::{self, ExtraCounters, Recording};
use oomscope_format::AllocatorQuantity;

/// Default sampling interval of a standalone session.
const STANDALONE_INTERVAL: Duration = Duration::from_millis(10);
/// Default: record tensor statistics at most this many times per step.
const DEFAULT_TENSOR_STATS_PER_STEP: u64 = 16;
/// Gradient summaries in flight before the oldest is waited for.
const MAX_PENDING_GRADIENTS: usize = 4;
/// After a non-finite gradient norm, this many steps are summarised synchronously, with NaN and
/// Inf elements counted exactly (the asynchronous path cannot count them: it never branches on
/// a device value).
const EXACT_GRADIENT_STEPS_AFTER_NON_FINITE: u64 = 10;

/// Where messages go.
enum Sink {
    Off,
    Parent(Probe),
    Own(Box<Recording>),
}

/// What the program last said.
#[derive(Debug, Default)]
struct Position {
    step: u64,
    stage: Option<Name>,
    tensor_stats_this_step: u64,
}

/// An instrumented training loop.
pub struct Session {
    sink: Arc<Sink>,
    cuda_device: Option<usize>,
    position: Arc<Mutex<Position>>,
    tensor_stats_every: AtomicU64,
    tensor_stats_per_step: AtomicU64,
    /// Asynchronous gradient summaries not yet recorded, oldest first.
    pending_gradients: Mutex<std::collections::VecDeque<PendingGradientStats>>,
    /// Steps before this one are summarised asynchronously on CUDA; from it on, exactly.
    exact_gradients_until: AtomicU64,
    /// This process's rank, sent on every mark with its pid.
    rank: Option<u32>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mode = match self.sink.as_ref() {
            Sink::Off => "off",
            Sink::Parent(_) => "collector",
            Sink::Own(_) => "standalone",
        };
        f.debug_struct("Session")
            .field("mode", &mode)
            .field("cuda_device", &self.cuda_device)
            .finish()
    }
}

/// An out-of-memory error caught by [`Session::catch_oom`]: the step failed, the process goes on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("out of memory{}: {message}", requested_bytes.map(|b| format!(" (requested {b} bytes)")).unwrap_or_default())]
pub struct OomError {
    /// Bytes the failing allocation asked for, when known.
    pub requested_bytes: Option<u64>,
    /// The error text.
    pub message: String,
}

/// A stage span: marks `pre_<name>` when created and `post_<name>` when dropped.
#[must_use = "the span marks its end when dropped"]
#[derive(Debug)]
pub struct Span<'a> {
    session: &'a Session,
    name: String,
}

impl Drop for Span<'_> {
    fn drop(&mut self) {
        self.session.mark(&format!("post_{}", self.name));
    }
}

impl Session {
    fn with_sink(sink: Sink) -> Session {
        let cuda_device = (allocator::device_count() > 0).then_some(0);
        let sink = Arc::new(sink);
        let position = Arc::new(Mutex::new(Position::default()));
        if cuda_device.is_some() && !matches!(*sink, Sink::Off) {
            attach_observer_once();
            // The allocator reports an OOM before throwing it: record it now, with the stage and
            // step the loop last announced, even if the program never catches the error.
            let (sink, position) = (Arc::clone(&sink), Arc::clone(&position));
            allocator::set_oom_hook(Some(Box::new(move |o: ObservedOom| {
                let (step, stage) = position
                    .lock()
                    .map_or((0, None), |p| (p.step, p.stage.clone()));
                // The allocator's state at the failure (the observer runs after the allocator
                // released its lock): the numbers on the record, and in the text to show.
                let state = usize::try_from(o.device)
                    .ok()
                    .and_then(|d| allocator::stats(d).ok());
                let oom = OomEvent {
                    requested_bytes: Some(o.requested_bytes),
                    device: u32::try_from(o.device).ok(),
                    device_free_bytes: Some(o.device_free_bytes),
                    device_total_bytes: Some(o.device_total_bytes),
                    allocated_bytes: state.map(|s| s.allocated_bytes),
                    reserved_bytes: state.map(|s| s.reserved_bytes),
                    ..marker_oom(observed_oom_message(&o, state))
                };
                send_to(&sink, oom_message(oom, stage, step));
            })));
        }
        Session {
            sink,
            cuda_device,
            position,
            tensor_stats_every: AtomicU64::new(1),
            tensor_stats_per_step: AtomicU64::new(DEFAULT_TENSOR_STATS_PER_STEP),
            pending_gradients: Mutex::new(std::collections::VecDeque::new()),
            exact_gradients_until: AtomicU64::new(0),
            rank: rank_from_env(),
        }
    }

    /// A session that records nothing (every call returns at once): for code paths that should
    /// run uninstrumented, e.g. to measure what the instrumentation costs.
    pub fn off() -> Session {
        Session::with_sink(Sink::Off)
    }

    /// Reports to the `collector run` watching this process; off when there is none.
    pub fn from_env() -> Session {
        let probe = Probe::from_env();
        Session::with_sink(if probe.is_enabled() {
            Sink::Parent(probe)
        } else {
            Sink::Off
        })
    }

    /// Under `collector run`, reports to it; otherwise records a trace of its own at `path`.
    pub fn auto(path: impl AsRef<Path>) -> Result<Session> {
        let probe = Probe::from_env();
        if probe.is_enabled() {
            return Ok(Session::with_sink(Sink::Parent(probe)));
        }
        Session::start(path)
    }

    /// Records this process into its own trace at `path` (no `collector run` needed).
    pub fn start(path: impl AsRef<Path>) -> Result<Session> {
        let path = path.as_ref().to_path_buf();
        let file = std::fs::File::create(&path)
            .with_context(|| format!("cannot write the trace to {}", path.display()))?;
        // The caching allocator's counters of device 0, read on every tick.
        let extra = (allocator::device_count() > 0).then(|| ExtraCounters {
            counters: vec![
                (
                    CounterKind::Allocator(AllocatorQuantity::Allocated),
                    Some(0),
                ),
                (CounterKind::Allocator(AllocatorQuantity::Reserved), Some(0)),
            ],
            read: Box::new(|ids: &[CounterId], row: &mut Vec<(CounterId, u64)>| {
                if let (&[allocated, reserved], Ok(s)) = (ids, allocator::stats(0)) {
                    row.extend([(allocated, s.allocated_bytes), (reserved, s.reserved_bytes)]);
                }
            }),
        });
        let recording = Recording::start(recording::Source {
            file,
            path,
            gpus: Gpus::open(&GpuSelection::All).ok().map(Arc::new),
            pid: std::process::id(),
            command: std::env::args().collect(),
            interval: STANDALONE_INTERVAL,
            writer: " (tch session)",
            socket: None,
            extra,
        })?;
        Ok(Session::with_sink(Sink::Own(Box::new(recording))))
    }

    /// Whether anything is recorded.
    pub fn is_enabled(&self) -> bool {
        !matches!(*self.sink, Sink::Off)
    }

    /// The CUDA device whose allocator is read (0), or `None` on a CPU-only host.
    pub fn cuda_device(&self) -> Option<usize> {
        self.cuda_device
    }

    /// Sends one message to wherever this session records.
    pub(super) fn send(&self, message: Message) {
        send_to(&self.sink, message);
    }

    /// The allocator's statistics now, when CUDA is in use.
    pub fn allocator_stats(&self) -> Option<AllocatorStats> {
        allocator::stats(self.cuda_device?).ok()
    }

    /// Announces the current training step.
    pub fn step(&self, step: u64) {
        if let Ok(mut p) = self.position.lock() {
            p.step = step;
            p.tensor_stats_this_step = 0;
        }
        self.send(Message::Step { step, epoch: None });
    }

    /// Announces the current epoch (keeping the step).
    pub fn epoch(&self, epoch: u32) {
        let step = self.position.lock().map_or(0, |p| p.step);
        self.send(Message::Step {
            step,
            epoch: Some(epoch),
        });
    }

    /// Announces the phase (train or eval).
    pub fn phase(&self, phase: Phase) {
        self.send(Message::Phase(phase));
    }

    /// Marks a stage, with the allocator's statistics when CUDA is in use.
    pub fn mark(&self, stage: &str) {
        if !self.is_enabled() {
            return;
        }
        let name: Name = stage.into();
        if let Ok(mut p) = self.position.lock() {
            p.stage = Some(name.clone());
        }
        self.send(Message::record(Record::Mark(StageMark {
            name,
            allocator: self.allocator_stats(),
            pid: Some(std::process::id()),
            rank: self.rank,
            ..StageMark::default()
        })));
    }

    /// Marks `pre_<name>` now and `post_<name>` when the returned guard is dropped.
    pub fn span(&self, name: &str) -> Span<'_> {
        self.mark(&format!("pre_{name}"));
        Span {
            session: self,
            name: name.to_owned(),
        }
    }

    /// Runs `f` and measures how much memory it left allocated: the caching allocator's
    /// `allocated` on CUDA, this process's resident memory on CPU. Use it around the first
    /// optimizer step to measure the optimizer's state (Adam creates its moments there).
    pub fn measure_allocation<T>(&self, f: impl FnOnce() -> T) -> (T, Option<i64>) {
        let read = || match self.cuda_device {
            Some(device) => allocator::stats(device).ok().map(|s| s.allocated_bytes),
            None => own_rss_bytes(),
        };
        let before = read();
        let value = f();
        let after = read();
        let delta = before.zip(after).map(|(b, a)| a as i64 - b as i64);
        (value, delta)
    }

    /// Records a note.
    pub fn note(&self, text: &str) {
        self.send(Message::record(Record::Note(Note {
            t_us: 0,
            text: text.to_owned(),
        })));
    }

    /// Records the model's memory by component: `params` (e.g. `vs.trainable_variables()`),
    /// `frozen` (variables without gradients, e.g. buffers and frozen layers), gradients as they
    /// are now, the optimizer's state in bytes, and named extra copies (EMA, teachers).
    pub fn components(
        &self,
        params: &[tch::Tensor],
        frozen: &[tch::Tensor],
        optimizer_state_bytes: u64,
        batch_size: Option<u64>,
        extras: &[(&str, u64)],
    ) {
        use super::stats::tensor_bytes;
        let gradients_bytes = params
            .iter()
            .map(tch::Tensor::grad)
            .filter(tch::Tensor::defined)
            .map(|g| tensor_bytes(&g))
            .sum();
        let count = params.iter().map(|p| p.numel() as u64).sum();
        self.send(Message::record(Record::Components(ComponentBreakdown {
            t_us: 0,
            step: 0,
            batch_size,
            parameters_bytes: params.iter().map(tensor_bytes).sum(),
            buffers_bytes: frozen.iter().map(tensor_bytes).sum(),
            gradients_bytes,
            optimizer_state_bytes,
            extras: extras
                .iter()
                .map(|(name, bytes)| NamedBytes {
                    name: (*name).into(),
                    bytes: *bytes,
                })
                .collect(),
            // `params` are what `parameters_bytes` counts: the trained ones.
            parameter_count: Some(count),
            trainable_parameter_count: Some(count),
            ..ComponentBreakdown::default()
        })));
    }

    /// Summarises the gradients of `params` after backward (global norm, NaN/Inf) and records
    /// the summary; nothing at all when the session is off.
    ///
    /// On CUDA the loop never waits for it: the summary is computed on the device and recorded
    /// once it has reached the host, usually at the next call (its step is kept). There NaN and
    /// Inf elements are not counted; after a non-finite norm the next
    /// `EXACT_GRADIENT_STEPS_AFTER_NON_FINITE` steps are summarised synchronously and counted.
    /// On CPU the summary is exact and recorded at once.
    pub fn gradients(&self, params: &[tch::Tensor]) {
        if !self.is_enabled() {
            return;
        }
        let step = self.position.lock().map_or(0, |p| p.step);
        self.record_gradients(false);
        if let Some(device) = self.cuda_device
            && step >= self.exact_gradients_until.load(Ordering::Relaxed)
            && let Some(pending) = gradient_stats_async(params, device, step)
        {
            if let Ok(mut queue) = self.pending_gradients.lock() {
                queue.push_back(pending);
            }
            return;
        }
        self.send_gradients(GradientSummary {
            step,
            ..gradient_stats(params)
        });
    }

    /// Records the asynchronous gradient summaries that have arrived (all of them, waiting, when
    /// `wait`; the oldest also when too many are in flight).
    fn record_gradients(&self, wait: bool) {
        loop {
            let next = self.pending_gradients.lock().ok().and_then(|mut queue| {
                let due = queue
                    .front()
                    .is_some_and(|p| wait || queue.len() >= MAX_PENDING_GRADIENTS || p.is_ready());
                if due { queue.pop_front() } else { None }
            });
            let Some(pending) = next else { break };
            let Some(summary) = pending.finish() else {
                continue;
            };
            if !summary.global_norm.is_finite() {
                self.exact_gradients_until.fetch_max(
                    summary.step + 1 + EXACT_GRADIENT_STEPS_AFTER_NON_FINITE,
                    Ordering::Relaxed,
                );
            }
            self.send_gradients(summary);
        }
    }

    /// Records a summary with its own step (an asynchronous one arrives a step late).
    fn send_gradients(&self, summary: GradientSummary) {
        let context = protocol::Context {
            step: Some(summary.step),
            ..protocol::Context::default()
        };
        self.send(Message::Record(Record::Gradients(summary), context));
    }

    /// Records statistics of a tensor (shape, dtype, bytes, min/max/mean/std, NaN/Inf counts),
    /// computed on its device. Bounded: only every [`Session::set_tensor_stats_every`]-th step,
    /// and at most [`Session::set_tensor_stats_per_step`] tensors per step. The tensor is never
    /// copied to the host.
    pub fn tensor_stats(&self, name: &str, t: &tch::Tensor) {
        if !self.is_enabled() {
            return;
        }
        let every = self.tensor_stats_every.load(Ordering::Relaxed).max(1);
        let cap = self.tensor_stats_per_step.load(Ordering::Relaxed);
        let allowed = self.position.lock().is_ok_and(|mut p| {
            let ok = p.step.is_multiple_of(every) && p.tensor_stats_this_step < cap;
            if ok {
                p.tensor_stats_this_step += 1;
            }
            ok
        });
        if !allowed {
            return;
        }
        self.send(Message::record(Record::Tensor(tensor_summary(name, t))));
    }

    /// Record tensor statistics only on steps that are multiples of `steps`.
    pub fn set_tensor_stats_every(&self, steps: u64) {
        self.tensor_stats_every
            .store(steps.max(1), Ordering::Relaxed);
    }

    /// Record at most `count` tensor statistics per step.
    pub fn set_tensor_stats_per_step(&self, count: u64) {
        self.tensor_stats_per_step.store(count, Ordering::Relaxed);
    }

    /// Runs `f`; an out-of-memory error inside it (a CUDA OOM, or libtorch failing to allocate
    /// host memory) is recorded with the current stage and step, the allocator's cache is
    /// emptied, and the error is returned instead of unwinding further, so the program can go on
    /// (e.g. retry with a smaller batch). Any other panic continues unwinding.
    pub fn catch_oom<T>(&self, f: impl FnOnce() -> T) -> Result<T, OomError> {
        quiet_oom_panics();
        CATCHING_OOM.with(|depth| depth.set(depth.get() + 1));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        CATCHING_OOM.with(|depth| depth.set(depth.get() - 1));
        let payload = match result {
            Ok(value) => return Ok(value),
            Err(payload) => payload,
        };
        let text = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default();
        if !is_oom_message(&text) {
            std::panic::resume_unwind(payload);
        }
        // An OOM the allocator reported was recorded by the hook already; only record here what
        // it did not see (a host allocation failure, or a CPU-only run).
        let observed: Option<ObservedOom> = allocator::take_observed_ooms().pop();
        let first_line = text
            .lines()
            .find(|l| is_oom_message(l))
            .unwrap_or(&text)
            .trim()
            .to_owned();
        let parsed = oomscope_analysis::oom_text::recognise_text(&text);
        let requested_bytes = observed
            .map(|o| o.requested_bytes)
            .or_else(|| parsed.as_ref().and_then(|p| p.requested_bytes));
        if observed.is_none() {
            let (step, stage) = self
                .position
                .lock()
                .map_or((0, None), |p| (p.step, p.stage.clone()));
            let oom = OomEvent {
                requested_bytes,
                device: parsed.as_ref().and_then(|p| p.device),
                device_free_bytes: parsed.as_ref().and_then(|p| p.free_bytes),
                device_total_bytes: parsed.as_ref().and_then(|p| p.total_bytes),
                allocated_bytes: parsed.as_ref().and_then(|p| p.allocated_bytes),
                reserved_bytes: parsed.as_ref().and_then(|p| p.reserved_bytes),
                ..marker_oom(first_line.clone())
            };
            self.send(oom_message(oom, stage, step));
        }
        let _ = allocator::empty_cache();
        Err(OomError {
            requested_bytes,
            message: first_line,
        })
    }

    /// Ends the session: a standalone session writes the exit and closes its trace (returning its
    /// path); under `collector run` nothing is needed (the collector closes the trace).
    pub fn finish(self) -> Result<Option<PathBuf>> {
        self.record_gradients(true);
        allocator::set_oom_hook(None);
        let sink =
            Arc::try_unwrap(self.sink).map_err(|_| anyhow!("the session is still shared"))?;
        let Sink::Own(recording) = sink else {
            return Ok(None);
        };
        let exit = ProcessExit {
            t_us: recording.state().now_us(),
            status: ExitStatus::Code(0),
            probable_host_oom: false,
        };
        recording
            .finish(crate::run::event::Ending::Exited(exit), None, Vec::new())
            .map(Some)
    }
}

/// This process's resident memory, from `/proc/self/statm`.
fn own_rss_bytes() -> Option<u64> {
    let mut rss = crate::host::TreeRss::new();
    rss.set_pids(&[std::process::id()]);
    rss.rss_bytes()
}

/// An OOM the program reports itself (its time, stage and step are the recorder's).
fn marker_oom(message: String) -> OomEvent {
    OomEvent::new(0, OomSource::Marker, message)
}

/// An OOM at the loop's position: the stage and step it last announced.
fn oom_message(oom: OomEvent, stage: Option<Name>, step: u64) -> Message {
    let context = protocol::Context {
        stage,
        step: Some(step),
        ..protocol::Context::default()
    };
    Message::Record(Record::Oom(oom), context)
}

/// Sends one message to a sink (also from the allocator's OOM hook).
fn send_to(sink: &Sink, message: Message) {
    match sink {
        Sink::Off => {}
        Sink::Parent(probe) => probe.send_message(&message),
        Sink::Own(recording) => {
            // As the inbox hands on what a socket brought (from inside the process: no sender).
            let state = recording.state();
            inbox::deliver(state, state.now_us(), Box::new(message), None);
            let _ = recording.events().try_send(Event::Pending);
        }
    }
}

/// The observer is attached once per process (every attach adds one more).
fn attach_observer_once() {
    static ATTACHED: std::sync::Once = std::sync::Once::new();
    ATTACHED.call_once(|| {
        let _ = allocator::attach_oom_observer();
    });
}

/// Whether libtorch's error text is an allocation failure (CUDA or host), by the one recogniser
/// of out-of-memory texts the recorder and the analysis use.
fn is_oom_message(text: &str) -> bool {
    oomscope_analysis::oom_text::recognise_text(text).is_some()
}

thread_local! {
    /// How many [`Session::catch_oom`] calls this thread is inside.
    static CATCHING_OOM: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Keeps the default panic message off stderr for OOM panics that [`Session::catch_oom`] is about
/// to catch (it records them); every other panic, an OOM outside `catch_oom` included (the
/// program dies of it), still prints.
fn quiet_oom_panics() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let text = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("");
            let caught = CATCHING_OOM.with(|depth| depth.get() > 0);
            if !(caught && is_oom_message(text)) {
                previous(info);
            }
        }));
    });
}

/// The text shown for an OOM the allocator observed, in PyTorch's own words (what a user knows
/// from the traceback); the record carries the same numbers as fields. `state` is the allocator's
/// at the failure (what the forward pass had allocated since the last mark included).
fn observed_oom_message(o: &ObservedOom, state: Option<AllocatorStats>) -> String {
    let mut text = format!(
        "CUDA out of memory (allocator observer). Tried to allocate {} bytes. GPU {} has a total capacity of {} bytes of which {} bytes is free.",
        o.requested_bytes, o.device, o.device_total_bytes, o.device_free_bytes
    );
    if let Some(s) = state {
        text.push_str(&format!(
            " Of the allocated memory {} bytes is allocated by PyTorch, and {} bytes is reserved by PyTorch but unallocated.",
            s.allocated_bytes,
            s.reserved_bytes.saturating_sub(s.allocated_bytes)
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_off_session_costs_nothing_and_records_nothing() {
        let s = Session::with_sink(Sink::Off);
        s.step(1);
        s.mark("x");
        drop(s.span("forward"));
        assert!(!s.is_enabled());
        assert_eq!(s.finish().unwrap(), None);
    }

    #[test]
    fn catch_oom_turns_a_host_allocation_failure_into_an_error() {
        let s = Session::with_sink(Sink::Off);
        // A real libtorch allocation failure: more bytes than any host has.
        let r =
            s.catch_oom(|| tch::Tensor::zeros([1i64 << 50], (tch::Kind::Float, tch::Device::Cpu)));
        let e = r.unwrap_err();
        assert!(is_oom_message(&e.message), "{e}");
        assert_eq!(e.requested_bytes, Some(1u64 << 52));
        // The process goes on, and other panics are not swallowed.
        assert_eq!(s.catch_oom(|| 7).unwrap(), 7);
        let other = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            s.catch_oom(|| panic!("a logic error"))
        }));
        assert!(other.is_err());
    }

    #[test]
    fn a_standalone_session_writes_a_trace() {
        let dir = std::env::temp_dir().join(format!("oomscope-session-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.oomt");
        let s = Session::start(&path).unwrap();
        for step in 0..3 {
            s.step(step);
            let _f = s.span("forward");
            std::thread::sleep(Duration::from_millis(15));
        }
        s.tensor_stats(
            "x",
            &tch::Tensor::ones([4, 4], (tch::Kind::Float, tch::Device::Cpu)),
        );
        assert_eq!(s.finish().unwrap().as_deref(), Some(path.as_path()));
        let t = oomscope_format::decode(&std::fs::read(&path).unwrap())
            .unwrap()
            .trace;
        assert_eq!(t.marks.len(), 6);
        assert_eq!(t.marks[1].name.as_ref(), "post_forward");
        assert_eq!(t.marks[5].step, 2);
        assert_eq!(t.tensors.len(), 1);
        assert_eq!(t.tensors[0].mean, 1.0);
        assert!(t.samples.len() > 3 && t.end_us.is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
