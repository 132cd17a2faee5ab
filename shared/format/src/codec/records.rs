//! The body of each record kind, its encoder and decoder side by side, in `FORMAT.md`'s order.
//!
//! Why one file: a record's layout is one fact. With the encoder in the writer and the decoder in
//! the reader, a field added to one and forgotten in the other only shows as garbled traces; here
//! the pair sits on one screen and the round-trip tests hold them together. The writer and the
//! reader keep only what is not a record: chunks, budgets and resynchronisation (the SAMPLES
//! body is `samples`', laid out the same way).
//!
//! Every body starts with the record's time (`t_us`, varint). Names (stages, tensors, dtypes,
//! component extras) are written as string-table ids: the writer defines a string the first time
//! a record uses it, before that record, and [`Names`] resolves an id while reading (an id whose
//! definition was lost with a damaged chunk reads as `?`).
//!
//! Bodies may grow at their end: a reader reads the fields it knows and ignores bytes after them,
//! and reads a trailing field only when bytes remain (the mark's sender, format 1.2).

use std::sync::Arc;

use super::tag;
use crate::error::EncodeError;
use crate::model::{
    AliveSite, AllocatorStats, Attach, AttachEvent, BatchTrial, ComponentBreakdown, Dropped,
    EvalAutograd, ExitStatus, GcCollection, GpuInfo, GradientSummary, HeldClock, HeldKind,
    HeldTensors, MarkSampling, Metadata, Name, NamedBytes, Note, OomEvent, OomKill, OomSource,
    Phase, ProcessEnd, ProcessExit, ProcessInfo, ProcessMemory, ProcessRole, ProgramEnd,
    RankSource, Record, SavedSnapshot, StageMark, StartMethod, StepInput, TensorStats,
    TrialOutcome,
};
use crate::varint::{Cursor, ReadError, put_u64, zigzag};

/// Where an encoder writes a record: the trace writer, which interns names in its string table
/// and frames each body into its chunk. (A trait so that the bodies here need not know the
/// writer, which calls them.)
pub(super) trait RecordSink {
    /// The string-table id of `text`, defining it first if it is new.
    fn name(&mut self, text: &str) -> Result<u32, EncodeError>;
    /// Starts a record at `t_us`; the body is appended to the returned buffer.
    fn begin(&mut self, t_us: u64) -> &mut Vec<u8>;
    /// Ends the record begun last, as a record of `record_tag`.
    fn end(&mut self, record_tag: u8) -> Result<(), EncodeError>;
}

/// Writes one record through the writer's string table and chunking.
pub(super) fn encode(w: &mut impl RecordSink, record: &Record) -> Result<(), EncodeError> {
    match record {
        Record::Mark(m) => encode_mark(w, m),
        Record::Components(c) => encode_components(w, c),
        Record::Gradients(g) => encode_gradients(w, g),
        Record::Tensor(t) => encode_tensor(w, t),
        Record::Oom(o) => encode_oom(w, o),
        Record::Trial(t) => encode_trial(w, t),
        Record::Exit(e) => encode_exit(w, e),
        Record::Note(n) => encode_note(w, n),
        Record::Dropped(d) => encode_dropped(w, d),
        Record::Alive(a) => encode_alive(w, a),
        Record::OomKill(k) => encode_oom_kill(w, k),
        Record::ProcessMemory(p) => encode_process_memory(w, p),
        Record::Process(p) => encode_process(w, p),
        Record::ProcessEnd(e) => encode_process_end(w, e),
        Record::Held(h) => encode_held(w, h),
        Record::Gc(g) => encode_gc(w, g),
        Record::Input(i) => encode_input(w, i),
        Record::EvalAutograd(e) => encode_eval_autograd(w, e),
        Record::SavedSnapshot(s) => encode_saved_snapshot(w, s),
        Record::MarkSampling(m) => encode_mark_sampling(w, m),
        Record::ProgramEnd(e) => encode_program_end(w, e),
        Record::Attach(a) => encode_attach(w, a),
    }
}

/// Reads the body of a record kind; `Ok(None)` for a tag that is not a record kind here
/// (metadata, strings, counters, samples and the end are the reader's own).
pub(super) fn decode(
    record_tag: u8,
    c: &mut Cursor<'_>,
    names: &Names,
) -> Result<Option<Record>, ReadError> {
    Ok(Some(match record_tag {
        tag::MARK => Record::Mark(decode_mark(c, names)?),
        tag::COMPONENTS => Record::Components(decode_components(c, names)?),
        tag::GRADIENTS => Record::Gradients(decode_gradients(c)?),
        tag::TENSOR => Record::Tensor(decode_tensor(c, names)?),
        tag::OOM => Record::Oom(decode_oom(c, names)?),
        tag::BATCH_TRIAL => Record::Trial(decode_trial(c)?),
        tag::EXIT => Record::Exit(decode_exit(c)?),
        tag::NOTE => Record::Note(decode_note(c)?),
        tag::DROPPED => Record::Dropped(decode_dropped(c)?),
        tag::ALIVE => Record::Alive(decode_alive(c, names)?),
        tag::OOM_KILL => Record::OomKill(decode_oom_kill(c, names)?),
        tag::PROCESS_MEMORY => Record::ProcessMemory(decode_process_memory(c)?),
        tag::PROCESS => Record::Process(decode_process(c, names)?),
        tag::PROCESS_END => Record::ProcessEnd(decode_process_end(c)?),
        tag::HELD => Record::Held(decode_held(c, names)?),
        tag::GC => Record::Gc(decode_gc(c)?),
        tag::INPUT => Record::Input(decode_input(c, names)?),
        tag::EVAL_AUTOGRAD => Record::EvalAutograd(decode_eval_autograd(c)?),
        tag::SAVED_SNAPSHOT => Record::SavedSnapshot(decode_saved_snapshot(c, names)?),
        tag::MARK_SAMPLING => Record::MarkSampling(decode_mark_sampling(c)?),
        tag::PROGRAM_END => Record::ProgramEnd(decode_program_end(c)?),
        tag::ATTACH => Record::Attach(decode_attach(c)?),
        _ => return Ok(None),
    }))
}

/// The string table as read so far: ids to shared names.
#[derive(Debug)]
pub(super) struct Names {
    table: Vec<Name>,
    unknown: Name,
}

impl Default for Names {
    fn default() -> Names {
        Names {
            table: Vec::new(),
            unknown: Arc::from("?"),
        }
    }
}

impl Names {
    /// Defines (or redefines) a string id; ids skipped by a damaged chunk read as `?`.
    pub(super) fn define(&mut self, id: usize, text: String) {
        if id >= self.table.len() {
            self.table.resize(id + 1, self.unknown.clone());
        }
        self.table[id] = Arc::from(text);
    }

    /// How many ids are defined (or skipped) so far.
    pub(super) fn len(&self) -> usize {
        self.table.len()
    }

    /// Reads a string id and resolves it (`?` when it was never defined).
    fn read(&self, c: &mut Cursor<'_>) -> Result<Name, ReadError> {
        let id = c.u32()? as usize;
        Ok(self.table.get(id).unwrap_or(&self.unknown).clone())
    }
}

// METADATA (the first record; no time): host, pid, command (count, strings), start (Unix ns),
// collector version, sample interval (µs), rank?, world size?, GPUs (count, then index, name,
// UUID, total bytes, driver version, CUDA version each).

/// Lays out the metadata body.
pub(super) fn encode_metadata(b: &mut Vec<u8>, m: &Metadata) {
    b.clear();
    put_str(b, &m.host);
    put_u64(b, u64::from(m.pid));
    put_u64(b, m.command.len() as u64);
    for arg in &m.command {
        put_str(b, arg);
    }
    put_u64(b, m.start_unix_ns);
    put_str(b, &m.collector_version);
    put_u64(b, m.sample_interval_us);
    put_opt_u32(b, m.rank);
    put_opt_u32(b, m.world_size);
    put_u64(b, m.gpus.len() as u64);
    for g in &m.gpus {
        put_u64(b, u64::from(g.index));
        put_str(b, &g.name);
        put_str(b, &g.uuid);
        put_u64(b, g.total_memory_bytes);
        put_str(b, &g.driver_version);
        put_str(b, &g.cuda_version);
    }
}

/// Reads the metadata body.
pub(super) fn decode_metadata(c: &mut Cursor<'_>) -> Result<Metadata, ReadError> {
    let host = c.string()?;
    let pid = c.u32()?;
    let argc = c.count(1)?;
    let mut command = Vec::with_capacity(argc);
    for _ in 0..argc {
        command.push(c.string()?);
    }
    let start_unix_ns = c.u64()?;
    let collector_version = c.string()?;
    let sample_interval_us = c.u64()?;
    let rank = opt_u32(c)?;
    let world_size = opt_u32(c)?;
    let gpu_count = c.count(6)?;
    let mut gpus = Vec::with_capacity(gpu_count);
    for _ in 0..gpu_count {
        gpus.push(GpuInfo {
            index: c.u32()?,
            name: c.string()?,
            uuid: c.string()?,
            total_memory_bytes: c.u64()?,
            driver_version: c.string()?,
            cuda_version: c.string()?,
        });
    }
    Ok(Metadata {
        host,
        pid,
        command,
        start_unix_ns,
        collector_version,
        sample_interval_us,
        rank,
        world_size,
        gpus,
    })
}

// Each kind below: the encoder (names defined first — a definition is a record of its own and
// may flush the chunk, which must not see this record's time yet — then the body after its
// time), and the decoder reading the same fields in the same order.

// MARK: name id, step, epoch, phase, allocator flag [+ 8 allocator values], then (1.2) the
// sender's pid and rank as two optional values, written only when either is known.

fn encode_mark(w: &mut impl RecordSink, m: &StageMark) -> Result<(), EncodeError> {
    let name = w.name(&m.name)?;
    let b = w.begin(m.t_us);
    put_u64(b, u64::from(name));
    put_u64(b, m.step);
    put_u64(b, u64::from(m.epoch));
    b.push(m.phase.code());
    match &m.allocator {
        None => b.push(0),
        Some(s) => {
            b.push(1);
            for v in s.values() {
                put_u64(b, v);
            }
        }
    }
    if m.pid.is_some() || m.rank.is_some() {
        put_opt_u32(b, m.pid);
        put_opt_u32(b, m.rank);
    }
    w.end(tag::MARK)
}

fn decode_mark(c: &mut Cursor<'_>, names: &Names) -> Result<StageMark, ReadError> {
    // Fields in the order they were written: a struct literal evaluates in source order.
    let mut mark = StageMark {
        t_us: c.u64()?,
        name: names.read(c)?,
        step: c.u64()?,
        epoch: c.u32()?,
        phase: Phase::from_code(c.u8()?),
        allocator: decode_allocator(c)?,
        pid: None,
        rank: None,
    };
    if !c.is_empty() {
        mark.pid = opt_u32(c)?;
        mark.rank = opt_u32(c)?;
    }
    Ok(mark)
}

/// A mark's allocator statistics: a flag, then the eight values when it is set.
fn decode_allocator(c: &mut Cursor<'_>) -> Result<Option<AllocatorStats>, ReadError> {
    if c.u8()? == 0 {
        return Ok(None);
    }
    let mut values = [0u64; 8];
    for v in &mut values {
        *v = c.u64()?;
    }
    Ok(Some(AllocatorStats::from_values(values)))
}

// COMPONENTS: step, batch size?, parameters, buffers, gradients, optimizer state, extras
// (count, then name id and bytes each).

fn encode_components(w: &mut impl RecordSink, c: &ComponentBreakdown) -> Result<(), EncodeError> {
    let extra_names = c
        .extras
        .iter()
        .map(|e| w.name(&e.name))
        .collect::<Result<Vec<_>, _>>()?;
    let optimizer_names = c
        .optimizers
        .iter()
        .map(|o| w.name(&o.name))
        .collect::<Result<Vec<_>, _>>()?;
    let b = w.begin(c.t_us);
    put_u64(b, c.step);
    put_opt_u64(b, c.batch_size);
    for v in [
        c.parameters_bytes,
        c.buffers_bytes,
        c.gradients_bytes,
        c.optimizer_state_bytes,
    ] {
        put_u64(b, v);
    }
    put_u64(b, c.extras.len() as u64);
    for (e, name) in c.extras.iter().zip(extra_names) {
        put_u64(b, u64::from(name));
        put_u64(b, e.bytes);
    }
    let counts = [c.parameter_count, c.trainable_parameter_count];
    if !c.optimizers.is_empty() || counts.iter().any(Option::is_some) {
        put_u64(b, c.optimizers.len() as u64);
        for (o, name) in c.optimizers.iter().zip(optimizer_names) {
            put_u64(b, u64::from(name));
            put_u64(b, o.bytes);
        }
        for count in counts {
            put_opt_u64(b, count);
        }
    }
    w.end(tag::COMPONENTS)
}

fn decode_components(c: &mut Cursor<'_>, names: &Names) -> Result<ComponentBreakdown, ReadError> {
    let t_us = c.u64()?;
    let step = c.u64()?;
    let batch_size = opt_u64(c)?;
    let parameters_bytes = c.u64()?;
    let buffers_bytes = c.u64()?;
    let gradients_bytes = c.u64()?;
    let optimizer_state_bytes = c.u64()?;
    let named = |c: &mut Cursor<'_>| -> Result<Vec<NamedBytes>, ReadError> {
        let count = c.count(2)?;
        let mut list = Vec::with_capacity(count);
        for _ in 0..count {
            list.push(NamedBytes {
                name: names.read(c)?,
                bytes: c.u64()?,
            });
        }
        Ok(list)
    };
    let extras = named(c)?;
    // Since v1.10, when known.
    let optimizers = if c.is_empty() { Vec::new() } else { named(c)? };
    let parameter_count = if c.is_empty() { None } else { opt_u64(c)? };
    let trainable_parameter_count = if c.is_empty() { None } else { opt_u64(c)? };
    Ok(ComponentBreakdown {
        t_us,
        step,
        batch_size,
        parameters_bytes,
        buffers_bytes,
        gradients_bytes,
        optimizer_state_bytes,
        extras,
        optimizers,
        parameter_count,
        trainable_parameter_count,
    })
}

// GRADIENTS: step, parameters with a gradient, gradient bytes, global norm (f64 LE), NaN and
// Inf element counts.

fn encode_gradients(w: &mut impl RecordSink, g: &GradientSummary) -> Result<(), EncodeError> {
    let b = w.begin(g.t_us);
    put_u64(b, g.step);
    put_u64(b, g.params_with_grad);
    put_u64(b, g.gradient_bytes);
    b.extend_from_slice(&g.global_norm.to_le_bytes());
    put_u64(b, g.nan_count);
    put_u64(b, g.inf_count);
    w.end(tag::GRADIENTS)
}

fn decode_gradients(c: &mut Cursor<'_>) -> Result<GradientSummary, ReadError> {
    Ok(GradientSummary {
        t_us: c.u64()?,
        step: c.u64()?,
        params_with_grad: c.u64()?,
        gradient_bytes: c.u64()?,
        global_norm: c.f64()?,
        nan_count: c.u64()?,
        inf_count: c.u64()?,
    })
}

// TENSOR: step, name id, shape (count, dims), dtype id, bytes, min/max/mean/std (f64 LE), NaN
// and Inf element counts.

fn encode_tensor(w: &mut impl RecordSink, t: &TensorStats) -> Result<(), EncodeError> {
    let name = w.name(&t.name)?;
    let dtype = w.name(&t.dtype)?;
    let b = w.begin(t.t_us);
    put_u64(b, t.step);
    put_u64(b, u64::from(name));
    put_u64(b, t.shape.len() as u64);
    for d in &t.shape {
        put_u64(b, *d);
    }
    put_u64(b, u64::from(dtype));
    put_u64(b, t.bytes);
    for v in [t.min, t.max, t.mean, t.std] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    put_u64(b, t.nan_count);
    put_u64(b, t.inf_count);
    w.end(tag::TENSOR)
}

fn decode_tensor(c: &mut Cursor<'_>, names: &Names) -> Result<TensorStats, ReadError> {
    let t_us = c.u64()?;
    let step = c.u64()?;
    let name = names.read(c)?;
    let dims = c.count(1)?;
    let mut shape = Vec::with_capacity(dims);
    for _ in 0..dims {
        shape.push(c.u64()?);
    }
    Ok(TensorStats {
        t_us,
        step,
        name,
        shape,
        dtype: names.read(c)?,
        bytes: c.u64()?,
        min: c.f64()?,
        max: c.f64()?,
        mean: c.f64()?,
        std: c.f64()?,
        nan_count: c.u64()?,
        inf_count: c.u64()?,
    })
}

// OOM: source, stage id?, step?, requested bytes?, device?, device free?, device total?, message;
// since v1.5, when either is known (or anything after them is), pid?, rank? of the process that
// ran out; since v1.7, when either is known, the allocator's allocated?, reserved? at the failure.

fn encode_oom(w: &mut impl RecordSink, o: &OomEvent) -> Result<(), EncodeError> {
    let stage = o.stage.as_ref().map(|s| w.name(s)).transpose()?;
    let b = w.begin(o.t_us);
    b.push(o.source.code());
    put_opt_u32(b, stage);
    put_opt_u64(b, o.step);
    put_opt_u64(b, o.requested_bytes);
    put_opt_u32(b, o.device);
    put_opt_u64(b, o.device_free_bytes);
    put_opt_u64(b, o.device_total_bytes);
    put_str(b, &o.message);
    let allocator = o.allocated_bytes.is_some() || o.reserved_bytes.is_some();
    if o.pid.is_some() || o.rank.is_some() || allocator {
        put_opt_u32(b, o.pid);
        put_opt_u32(b, o.rank);
    }
    if allocator {
        put_opt_u64(b, o.allocated_bytes);
        put_opt_u64(b, o.reserved_bytes);
    }
    w.end(tag::OOM)
}

fn decode_oom(c: &mut Cursor<'_>, names: &Names) -> Result<OomEvent, ReadError> {
    let mut oom = OomEvent {
        t_us: c.u64()?,
        source: OomSource::from_code(c.u8()?),
        stage: if c.u8()? == 0 {
            None
        } else {
            Some(names.read(c)?)
        },
        step: opt_u64(c)?,
        requested_bytes: opt_u64(c)?,
        device: opt_u32(c)?,
        device_free_bytes: opt_u64(c)?,
        device_total_bytes: opt_u64(c)?,
        message: c.string()?,
        pid: None,
        rank: None,
        allocated_bytes: None,
        reserved_bytes: None,
    };
    if !c.is_empty() {
        (oom.pid, oom.rank) = (opt_u32(c)?, opt_u32(c)?);
    }
    if !c.is_empty() {
        (oom.allocated_bytes, oom.reserved_bytes) = (opt_u64(c)?, opt_u64(c)?);
    }
    Ok(oom)
}

// BATCH_TRIAL: batch size, outcome, peak bytes?.

fn encode_trial(w: &mut impl RecordSink, t: &BatchTrial) -> Result<(), EncodeError> {
    let b = w.begin(t.t_us);
    put_u64(b, t.batch_size);
    b.push(t.outcome.code());
    put_opt_u64(b, t.peak_bytes);
    w.end(tag::BATCH_TRIAL)
}

fn decode_trial(c: &mut Cursor<'_>) -> Result<BatchTrial, ReadError> {
    Ok(BatchTrial {
        t_us: c.u64()?,
        batch_size: c.u64()?,
        outcome: TrialOutcome::from_code(c.u8()?),
        peak_bytes: opt_u64(c)?,
    })
}

// EXIT: kind (0 code, 1 signal), value (zigzag varint), probable host OOM (0/1).

fn encode_exit(w: &mut impl RecordSink, e: &ProcessExit) -> Result<(), EncodeError> {
    let b = w.begin(e.t_us);
    let (kind, value) = match e.status {
        ExitStatus::Code(c) => (0u8, c),
        ExitStatus::Signal(s) => (1u8, s),
    };
    b.push(kind);
    put_u64(b, zigzag(i64::from(value)));
    b.push(u8::from(e.probable_host_oom));
    w.end(tag::EXIT)
}

fn decode_exit(c: &mut Cursor<'_>) -> Result<ProcessExit, ReadError> {
    let t_us = c.u64()?;
    let kind = c.u8()?;
    let value = i32::try_from(c.i64()?).map_err(|_| ReadError::Overlong)?;
    let status = if kind == 0 {
        ExitStatus::Code(value)
    } else {
        ExitStatus::Signal(value)
    };
    Ok(ProcessExit {
        t_us,
        status,
        probable_host_oom: c.u8()? != 0,
    })
}

// NOTE: text.

fn encode_note(w: &mut impl RecordSink, n: &Note) -> Result<(), EncodeError> {
    put_str(w.begin(n.t_us), &n.text);
    w.end(tag::NOTE)
}

fn decode_note(c: &mut Cursor<'_>) -> Result<Note, ReadError> {
    Ok(Note {
        t_us: c.u64()?,
        text: c.string()?,
    })
}

// DROPPED: record tag of what was dropped, count.

fn encode_dropped(w: &mut impl RecordSink, d: &Dropped) -> Result<(), EncodeError> {
    let b = w.begin(d.t_us);
    b.push(d.record_tag);
    put_u64(b, d.count);
    w.end(tag::DROPPED)
}

fn decode_dropped(c: &mut Cursor<'_>) -> Result<Dropped, ReadError> {
    Ok(Dropped {
        t_us: c.u64()?,
        record_tag: c.u8()?,
        count: c.u64()?,
    })
}

// ALIVE (v1.3): file id, line, function id, bytes, count.

fn encode_alive(w: &mut impl RecordSink, a: &AliveSite) -> Result<(), EncodeError> {
    let file = w.name(&a.file)?;
    let function = w.name(&a.function)?;
    let b = w.begin(a.t_us);
    put_u64(b, u64::from(file));
    put_u64(b, u64::from(a.line));
    put_u64(b, u64::from(function));
    put_u64(b, a.bytes);
    put_u64(b, a.count);
    w.end(tag::ALIVE)
}

fn decode_alive(c: &mut Cursor<'_>, names: &Names) -> Result<AliveSite, ReadError> {
    Ok(AliveSite {
        t_us: c.u64()?,
        file: names.read(c)?,
        line: c.u32()?,
        function: names.read(c)?,
        bytes: c.u64()?,
        count: c.u64()?,
    })
}

// OOM_KILL (v1.4): pid, process id, flags, rss?, limit?, cgroup id.

/// OOM_KILL flag bits.
mod kill_flags {
    pub const MAIN_PROCESS: u8 = 1;
    pub const KERNEL_LOG: u8 = 2;
    pub const CGROUP_COUNTER: u8 = 4;
    pub const GLOBAL: u8 = 8;
}

fn encode_oom_kill(w: &mut impl RecordSink, k: &OomKill) -> Result<(), EncodeError> {
    let process = w.name(&k.process)?;
    let cgroup = w.name(&k.cgroup)?;
    let b = w.begin(k.t_us);
    put_u64(b, u64::from(k.pid));
    put_u64(b, u64::from(process));
    let flags = [
        (k.main_process, kill_flags::MAIN_PROCESS),
        (k.from_kernel_log, kill_flags::KERNEL_LOG),
        (k.from_cgroup_counter, kill_flags::CGROUP_COUNTER),
        (k.global, kill_flags::GLOBAL),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .fold(0u8, |acc, (_, bit)| acc | bit);
    b.push(flags);
    put_opt_u64(b, k.rss_bytes);
    put_opt_u64(b, k.limit_bytes);
    put_u64(b, u64::from(cgroup));
    w.end(tag::OOM_KILL)
}

fn decode_oom_kill(c: &mut Cursor<'_>, names: &Names) -> Result<OomKill, ReadError> {
    let t_us = c.u64()?;
    let pid = c.u32()?;
    let process = names.read(c)?;
    let flags = c.u8()?;
    Ok(OomKill {
        t_us,
        pid,
        process,
        main_process: flags & kill_flags::MAIN_PROCESS != 0,
        from_kernel_log: flags & kill_flags::KERNEL_LOG != 0,
        from_cgroup_counter: flags & kill_flags::CGROUP_COUNTER != 0,
        global: flags & kill_flags::GLOBAL != 0,
        rss_bytes: opt_u64(c)?,
        limit_bytes: opt_u64(c)?,
        cgroup: names.read(c)?,
    })
}

// PROCESS_MEMORY (v1.4): pid, private bytes, PSS bytes.

fn encode_process_memory(w: &mut impl RecordSink, p: &ProcessMemory) -> Result<(), EncodeError> {
    let b = w.begin(p.t_us);
    put_u64(b, u64::from(p.pid));
    put_u64(b, p.private_bytes);
    put_u64(b, p.pss_bytes);
    w.end(tag::PROCESS_MEMORY)
}

fn decode_process_memory(c: &mut Cursor<'_>) -> Result<ProcessMemory, ReadError> {
    Ok(ProcessMemory {
        t_us: c.u64()?,
        pid: c.u32()?,
        private_bytes: c.u64()?,
        pss_bytes: c.u64()?,
    })
}

// PROCESS (v1.5): pid, parent?, name id, role, rank source, rank?, local rank?, world size?,
// restart?; since v1.6, when known, group id?.

fn encode_process(w: &mut impl RecordSink, p: &ProcessInfo) -> Result<(), EncodeError> {
    let name = w.name(&p.name)?;
    let group = p.group.as_ref().map(|g| w.name(g)).transpose()?;
    let b = w.begin(p.t_us);
    put_u64(b, u64::from(p.pid));
    put_opt_u32(b, p.parent_pid);
    put_u64(b, u64::from(name));
    b.push(p.role.code());
    b.push(p.rank_from.code());
    for v in [p.rank, p.local_rank, p.world_size, p.restart] {
        put_opt_u32(b, v);
    }
    // Trailing fields, each written when it or one after it is known.
    let start = p.start != StartMethod::Unknown;
    if group.is_some() || start {
        put_opt_u32(b, group);
    }
    if start {
        b.push(p.start.code());
    }
    w.end(tag::PROCESS)
}

fn decode_process(c: &mut Cursor<'_>, names: &Names) -> Result<ProcessInfo, ReadError> {
    let mut p = ProcessInfo {
        t_us: c.u64()?,
        pid: c.u32()?,
        parent_pid: opt_u32(c)?,
        name: names.read(c)?,
        role: ProcessRole::from_code(c.u8()?),
        rank_from: RankSource::from_code(c.u8()?),
        rank: opt_u32(c)?,
        local_rank: opt_u32(c)?,
        world_size: opt_u32(c)?,
        restart: opt_u32(c)?,
        group: None,
        start: StartMethod::Unknown,
    };
    if !c.is_empty() && c.u8()? != 0 {
        p.group = Some(names.read(c)?);
    }
    if !c.is_empty() {
        p.start = StartMethod::from_code(c.u8()?);
    }
    Ok(p)
}

// PROCESS_END (v1.5): pid, rank?, local rank?, status kind (0 unknown, 1 exit code, 2 signal),
// then zigzag(value) unless unknown, flags (1 first failure, 2 the launcher's account).

/// PROCESS_END flag bits.
mod end_flags {
    pub const FIRST_FAILURE: u8 = 1;
    pub const FROM_LAUNCHER: u8 = 2;
}

fn encode_process_end(w: &mut impl RecordSink, e: &ProcessEnd) -> Result<(), EncodeError> {
    let b = w.begin(e.t_us);
    put_u64(b, u64::from(e.pid));
    put_opt_u32(b, e.rank);
    put_opt_u32(b, e.local_rank);
    match e.status {
        None => b.push(0),
        Some(ExitStatus::Code(v)) => {
            b.push(1);
            put_u64(b, zigzag(i64::from(v)));
        }
        Some(ExitStatus::Signal(v)) => {
            b.push(2);
            put_u64(b, zigzag(i64::from(v)));
        }
    }
    let mut flags = 0;
    if e.first_failure {
        flags |= end_flags::FIRST_FAILURE;
    }
    if e.from_launcher {
        flags |= end_flags::FROM_LAUNCHER;
    }
    b.push(flags);
    w.end(tag::PROCESS_END)
}

fn decode_process_end(c: &mut Cursor<'_>) -> Result<ProcessEnd, ReadError> {
    let t_us = c.u64()?;
    let pid = c.u32()?;
    let rank = opt_u32(c)?;
    let local_rank = opt_u32(c)?;
    let status = match c.u8()? {
        0 => None,
        kind => {
            let value = i32::try_from(c.i64()?).map_err(|_| ReadError::Overlong)?;
            Some(if kind == 2 {
                ExitStatus::Signal(value)
            } else {
                ExitStatus::Code(value)
            })
        }
    };
    let flags = c.u8()?;
    Ok(ProcessEnd {
        t_us,
        pid,
        rank,
        local_rank,
        status,
        first_failure: flags & end_flags::FIRST_FAILURE != 0,
        from_launcher: flags & end_flags::FROM_LAUNCHER != 0,
    })
}

// HELD (v1.9): from step, to step, device id, dtype id, shape id, grad_fn id, count, bytes,
// holder id; since v1.11 the kind's code and opt items (read only when bytes remain: an older
// row's kind is read from its words, `legacy`); since v1.13 the clock's code.

fn encode_held(w: &mut impl RecordSink, h: &HeldTensors) -> Result<(), EncodeError> {
    let ids = [
        w.name(&h.device)?,
        w.name(&h.dtype)?,
        w.name(&h.shape)?,
        w.name(&h.grad_fn)?,
    ];
    let holder = w.name(&h.holder)?;
    let b = w.begin(h.t_us);
    put_u64(b, h.from_step);
    put_u64(b, h.to_step);
    for id in ids {
        put_u64(b, u64::from(id));
    }
    put_u64(b, h.count);
    put_u64(b, h.bytes);
    put_u64(b, u64::from(holder));
    b.push(h.kind.code());
    put_opt_u64(b, h.items);
    b.push(h.clock.code());
    w.end(tag::HELD)
}

fn decode_held(c: &mut Cursor<'_>, names: &Names) -> Result<HeldTensors, ReadError> {
    let mut h = HeldTensors {
        t_us: c.u64()?,
        from_step: c.u64()?,
        to_step: c.u64()?,
        device: names.read(c)?,
        dtype: names.read(c)?,
        shape: names.read(c)?,
        grad_fn: names.read(c)?,
        count: c.u64()?,
        bytes: c.u64()?,
        holder: names.read(c)?,
        ..HeldTensors::default()
    };
    if !c.is_empty() {
        // A kind a newer writer added reads as tensors: the row stays, counted as it says.
        h.kind = HeldKind::from_code(c.u8()?).unwrap_or_default();
        h.items = opt_u64(c)?;
    }
    if !c.is_empty() {
        // A clock a newer writer added reads as steps.
        h.clock = HeldClock::from_code(c.u8()?).unwrap_or_default();
    }
    Ok(h)
}

// GC (v1.9): generation, collected, freed bytes, pause us.

fn encode_gc(w: &mut impl RecordSink, g: &GcCollection) -> Result<(), EncodeError> {
    let b = w.begin(g.t_us);
    put_u64(b, u64::from(g.generation));
    put_u64(b, g.collected);
    put_u64(b, g.freed_bytes);
    put_u64(b, g.pause_us);
    w.end(tag::GC)
}

fn decode_gc(c: &mut Cursor<'_>) -> Result<GcCollection, ReadError> {
    Ok(GcCollection {
        t_us: c.u64()?,
        generation: c.u32()?,
        collected: c.u64()?,
        freed_bytes: c.u64()?,
        pause_us: c.u64()?,
    })
}

// INPUT (v1.10): step, elements, shape id, opt pid (read only when bytes remain).

fn encode_input(w: &mut impl RecordSink, i: &StepInput) -> Result<(), EncodeError> {
    let shape = w.name(&i.shape)?;
    let b = w.begin(i.t_us);
    put_u64(b, i.step);
    put_u64(b, i.elements);
    put_u64(b, u64::from(shape));
    put_opt_u64(b, i.pid.map(u64::from));
    w.end(tag::INPUT)
}

fn decode_input(c: &mut Cursor<'_>, names: &Names) -> Result<StepInput, ReadError> {
    Ok(StepInput {
        t_us: c.u64()?,
        step: c.u64()?,
        elements: c.u64()?,
        shape: names.read(c)?,
        pid: if c.is_empty() {
            None
        } else {
            opt_u64(c)?.and_then(|p| u32::try_from(p).ok())
        },
    })
}

// EVAL_AUTOGRAD (v1.11): u8 enabled (1 on, 0 off), opt pid.

fn encode_eval_autograd(w: &mut impl RecordSink, e: &EvalAutograd) -> Result<(), EncodeError> {
    let b = w.begin(e.t_us);
    b.push(u8::from(e.enabled));
    put_opt_u32(b, e.pid);
    w.end(tag::EVAL_AUTOGRAD)
}

fn decode_eval_autograd(c: &mut Cursor<'_>) -> Result<EvalAutograd, ReadError> {
    Ok(EvalAutograd {
        t_us: c.u64()?,
        enabled: c.u8()? != 0,
        pid: opt_u32(c)?,
    })
}

// SAVED_SNAPSHOT (v1.11): file name id, opt pid.

fn encode_saved_snapshot(w: &mut impl RecordSink, s: &SavedSnapshot) -> Result<(), EncodeError> {
    let file = w.name(&s.file)?;
    let b = w.begin(s.t_us);
    put_u64(b, u64::from(file));
    put_opt_u32(b, s.pid);
    w.end(tag::SAVED_SNAPSHOT)
}

fn decode_saved_snapshot(c: &mut Cursor<'_>, names: &Names) -> Result<SavedSnapshot, ReadError> {
    Ok(SavedSnapshot {
        t_us: c.u64()?,
        file: names.read(c)?,
        pid: opt_u32(c)?,
    })
}

// MARK_SAMPLING (v1.11): every, from step, iteration us, opt last step, opt pid.

fn encode_mark_sampling(w: &mut impl RecordSink, m: &MarkSampling) -> Result<(), EncodeError> {
    let b = w.begin(m.t_us);
    put_u64(b, u64::from(m.every));
    put_u64(b, m.from_step);
    put_u64(b, m.iteration_us);
    put_opt_u64(b, m.last_step);
    put_opt_u32(b, m.pid);
    w.end(tag::MARK_SAMPLING)
}

fn decode_mark_sampling(c: &mut Cursor<'_>) -> Result<MarkSampling, ReadError> {
    Ok(MarkSampling {
        t_us: c.u64()?,
        every: c.u32()?,
        from_step: c.u64()?,
        iteration_us: c.u64()?,
        last_step: opt_u64(c)?,
        pid: opt_u32(c)?,
    })
}

// PROGRAM_END (v1.12): opt pid.

fn encode_program_end(w: &mut impl RecordSink, e: &ProgramEnd) -> Result<(), EncodeError> {
    let b = w.begin(e.t_us);
    put_opt_u32(b, e.pid);
    w.end(tag::PROGRAM_END)
}

fn decode_program_end(c: &mut Cursor<'_>) -> Result<ProgramEnd, ReadError> {
    Ok(ProgramEnd {
        t_us: c.u64()?,
        pid: opt_u32(c)?,
    })
}

// ATTACH (v1.14): u8 event, opt process_age_us.

fn encode_attach(w: &mut impl RecordSink, a: &Attach) -> Result<(), EncodeError> {
    let b = w.begin(a.t_us);
    b.push(a.event.code());
    put_opt_u64(b, a.process_age_us);
    w.end(tag::ATTACH)
}

fn decode_attach(c: &mut Cursor<'_>) -> Result<Attach, ReadError> {
    Ok(Attach {
        t_us: c.u64()?,
        event: AttachEvent::from_code(c.u8()?),
        process_age_us: opt_u64(c)?,
    })
}

/// A string: byte length, then UTF-8 bytes.
pub(super) fn put_str(out: &mut Vec<u8>, text: &str) {
    put_u64(out, text.len() as u64);
    out.extend_from_slice(text.as_bytes());
}

/// An optional value: 0 for none, else 1 followed by the value.
pub(super) fn put_opt_u64(out: &mut Vec<u8>, value: Option<u64>) {
    match value {
        None => out.push(0),
        Some(v) => {
            out.push(1);
            put_u64(out, v);
        }
    }
}

/// An optional 32-bit value, laid out as [`put_opt_u64`].
pub(super) fn put_opt_u32(out: &mut Vec<u8>, value: Option<u32>) {
    put_opt_u64(out, value.map(u64::from));
}

/// Reads a value written by [`put_opt_u64`].
pub(super) fn opt_u64(c: &mut Cursor<'_>) -> Result<Option<u64>, ReadError> {
    match c.u8()? {
        0 => Ok(None),
        _ => c.u64().map(Some),
    }
}

/// Reads a value written by [`put_opt_u32`].
pub(super) fn opt_u32(c: &mut Cursor<'_>) -> Result<Option<u32>, ReadError> {
    match c.u8()? {
        0 => Ok(None),
        _ => c.u32().map(Some),
    }
}
