//! A recording: one trace file being written, with its recorder and fast sampler.
//!
//! Why a type of its own: `collector run` (watching a child) and the tch `Session` (watching its
//! own process) record the same way: the same metadata, the same counters under their standard
//! names, the same threads and the same ending. Both start a [`Recording`] and finish it with the
//! watched process's exit; what differs (a marker socket and a child to wait for, or allocator
//! readings from inside the process) is an argument.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use oomscope_format::{CounterId, CounterKind, GpuInfo, Metadata, OomEvent, TraceWriter};

use super::event::{Ending, Event};
use super::inbox::MarkerSocket;
use super::sampler::{self, Counters, GpuCounters, Sources};
use super::shared_state::RunState;
use crate::gpu::Gpus;
use crate::probe::{env_u32, rank_from_env};

/// Room in the recorder's channel: messages wait here while the recorder writes.
const CHANNEL_EVENTS: usize = 8192;

/// Appends the values of extra counters to a sample row, given their declared ids.
pub type ReadExtra = Box<dyn Fn(&[CounterId], &mut Vec<(CounterId, u64)>) + Send + Sync>;

/// Readings taken on every tick besides NVML and `/proc`: the counters they fill (declared by
/// the recording, in this order) and a function appending their values to a row.
pub struct ExtraCounters {
    /// Kind and device of each counter.
    pub counters: Vec<(CounterKind, Option<u32>)>,
    /// Appends (counter, value) pairs to a row; receives the declared ids in the same order.
    pub read: ReadExtra,
}

impl std::fmt::Debug for ExtraCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtraCounters")
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

/// What to record.
#[derive(Debug)]
pub struct Source {
    /// The trace file, already created (so that a bad path fails before anything starts).
    pub file: File,
    /// Where it is.
    pub path: PathBuf,
    /// The watched GPUs, when NVML is available.
    pub gpus: Option<Arc<Gpus>>,
    /// The watched process (the root of the tree whose memory is summed).
    pub pid: u32,
    /// Its command line.
    pub command: Vec<String>,
    /// Sampling interval.
    pub interval: Duration,
    /// Who writes: `collector run`, or a program recording itself.
    pub writer: &'static str,
    /// The marker socket the sampler drains between ticks.
    pub socket: Option<MarkerSocket>,
    /// Readings from inside the process.
    pub extra: Option<ExtraCounters>,
}

/// A trace being recorded.
#[derive(Debug)]
pub struct Recording {
    path: PathBuf,
    state: Arc<RunState>,
    events: SyncSender<Event>,
    gpus: Option<Arc<Gpus>>,
    sampler: JoinHandle<()>,
    recorder: JoinHandle<Result<()>>,
}

impl Recording {
    /// Writes the metadata and counter declarations, then starts the recorder and the sampler.
    pub fn start(source: Source) -> Result<Recording> {
        let Source {
            file,
            path,
            gpus,
            pid,
            command,
            interval,
            writer: collector,
            socket,
            extra,
        } = source;
        let gpu_infos: Vec<GpuInfo> = gpus
            .as_ref()
            .map(|g| g.infos().to_vec())
            .unwrap_or_default();
        let metadata = Metadata {
            host: host_name(),
            pid,
            command,
            start_unix_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(0)),
            collector_version: format!(
                "oomscope-collector {}{collector}",
                env!("CARGO_PKG_VERSION")
            ),
            sample_interval_us: u64::try_from(interval.as_micros()).unwrap_or(u64::MAX),
            rank: rank_from_env(),
            world_size: env_u32("WORLD_SIZE"),
            gpus: gpu_infos.clone(),
        };
        let mut writer = TraceWriter::new(BufWriter::with_capacity(64 << 10, file), &metadata)?;
        let counters = declare_counters(&mut writer, &gpu_infos)?;
        let extra = extra
            .map(|e| -> Result<_> {
                let ids = e
                    .counters
                    .iter()
                    .map(|(kind, device)| writer.declare_counter(*kind, *device))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok((ids, e.read))
            })
            .transpose()?;
        let state = Arc::new(RunState::new(&gpu_infos, pid));
        let (events, receiver): (_, Receiver<Event>) = sync_channel(CHANNEL_EVENTS);
        let recorder = spawn("oomscope-recorder", {
            let state = Arc::clone(&state);
            move || super::recorder::record_loop(writer, &receiver, &state)
        })?;
        let sampler = spawn("oomscope-sampler", {
            let (state, gpus, events) = (Arc::clone(&state), gpus.clone(), events.clone());
            move || {
                let read_extra = extra
                    .as_ref()
                    .map(|(ids, read)| move |row: &mut Vec<(CounterId, u64)>| read(ids, row));
                let sources = Sources {
                    gpus: gpus.as_deref(),
                    counters: &counters,
                    extra: read_extra.as_ref().map(|f| f as sampler::ExtraReadings<'_>),
                };
                sampler::sample_loop(&state, sources, interval, socket.as_ref(), &events);
            }
        })?;
        Ok(Recording {
            path,
            state,
            events,
            gpus,
            sampler,
            recorder,
        })
    }

    /// What the threads share (live values, the stop signal, drop counts).
    pub fn state(&self) -> &Arc<RunState> {
        &self.state
    }

    /// Where messages for the recorder go (never wait on it: `try_send`).
    pub fn events(&self) -> &SyncSender<Event> {
        &self.events
    }

    /// The watched GPUs.
    pub fn gpus(&self) -> Option<&Arc<Gpus>> {
        self.gpus.as_ref()
    }

    /// Stops the sampler, writes the ending (and a host OOM kill, when judged one), closes the
    /// trace and returns its path. Threads the caller started on [`Recording::state`] should be
    /// joined first; their messages are written before the exit.
    pub fn finish(
        self,
        ending: Ending,
        host_kill: Option<OomEvent>,
        kills: Vec<oomscope_format::OomKill>,
    ) -> Result<PathBuf> {
        self.state.request_stop();
        let _ = self.sampler.join();
        self.events
            .send(Event::Finish {
                ending,
                host_kill,
                kills,
            })
            .map_err(|_| anyhow!("the recorder stopped early"))?;
        drop(self.events);
        self.recorder
            .join()
            .map_err(|_| anyhow!("the recorder thread panicked"))?
            .with_context(|| format!("writing the trace {} failed", self.path.display()))?;
        Ok(self.path)
    }
}

/// Starts a named thread.
pub(crate) fn spawn<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<JoinHandle<T>> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(f)
        .with_context(|| format!("cannot start thread {name}"))
}

/// Declares the counters every recording samples, under their standard names.
fn declare_counters<W: std::io::Write>(
    writer: &mut TraceWriter<W>,
    gpus: &[GpuInfo],
) -> Result<Counters> {
    let mut per_gpu = Vec::with_capacity(gpus.len());
    for g in gpus {
        let i = g.index;
        per_gpu.push(GpuCounters {
            used: writer.declare_counter(CounterKind::GpuUsed, Some(i))?,
            free: writer.declare_counter(CounterKind::GpuFree, Some(i))?,
            reserved: writer.declare_counter(CounterKind::GpuReserved, Some(i))?,
            process: writer.declare_counter(CounterKind::ProcessGpu, Some(i))?,
        });
    }
    Ok(Counters {
        gpus: per_gpu,
        host_rss: writer.declare_counter(CounterKind::HostRss, None)?,
        host_available: writer.declare_counter(CounterKind::HostAvailable, None)?,
        host_pss: writer.declare_counter(CounterKind::HostPss, None)?,
        host_rss_file: writer.declare_counter(CounterKind::HostRssFile, None)?,
        shm_used: writer.declare_counter(CounterKind::ShmUsed, None)?,
        shm_size: writer.declare_counter(CounterKind::ShmSize, None)?,
    })
}

/// This machine's name.
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    if !ok {
        return String::new();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
