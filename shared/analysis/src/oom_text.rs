//! Recognises out-of-memory errors in a program's stderr, so that a run with no instrumentation
//! at all still gets an OOM event with the requested bytes and the free memory the error states.
//!
//! PyTorch has printed its CUDA OOM in several shapes over the years; all are handled:
//!
//! ```text
//! torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.34 GiB. GPU 0 has a total
//!     capacity of 79.19 GiB of which 1.23 GiB is free. ...                      (2.1 and later)
//! RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total
//!     capacity; 14.56 GiB already allocated; 3.19 MiB free; 14.64 GiB reserved ...) (1.x)
//! RuntimeError: CUDA error: out of memory                                      (CUDA runtime)
//! OSError: [Errno 12] Cannot allocate memory / MemoryError / std::bad_alloc     (host)
//! ```
//!
//! and so are the other stacks' words for it (`shared/analysis/tests/data/oom_texts.md` keeps a real
//! instance of each, and the near misses that must not count):
//!
//! - device memory ([`OomKind::Gpu`]): PyTorch's `HIP out of memory` (ROCm) and `MPS backend out
//!   of memory` (its request from `Tried to allocate X on private pool`; MPS's `MB` is MiB),
//!   `torch.OutOfMemoryError` / `torch.cuda.OutOfMemoryError`, `CUDA error: out of memory`
//!   (also as `torch.AcceleratorError`), `cudaErrorMemoryAllocation`,
//!   `CUDA_ERROR_OUT_OF_MEMORY`, `hipErrorOutOfMemory` / `HIP_ERROR_OutOfMemory`,
//!   `CUBLAS_STATUS_ALLOC_FAILED`, NCCL's `Cuda failure 'out of memory'` and `Cuda failure 2 'out
//!   of memory'` (the device from NCCL's `host:pid:tid [dev]` prefix), XLA/JAX's
//!   `RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes` and its variants
//!   (`Out of memory allocating`, `Failed to allocate request for X (NB) on device ordinal K`,
//!   TPU's `Ran out of memory in memory space hbm`), and TensorFlow's `OOM when allocating tensor
//!   with shape[..] and type T on /job:../device:GPU:N` (the request is the shape's elements
//!   times the dtype's size; on `device:CPU:N` it is host memory);
//! - host memory ([`OomKind::Host`]): libtorch's `DefaultCPUAllocator: can't allocate memory: you
//!   tried to allocate N bytes` (Windows: `not enough memory`; before 2019 only `posix_memalign`
//!   failing with `12 vs 0`), numpy's `_ArrayMemoryError: Unable to allocate 7.45 GiB for an array
//!   with shape (..) and data type T` (the request is the shape times the dtype's size), Python's
//!   `MemoryError`, C++'s `std::bad_alloc` and errno 12's `Cannot allocate memory`.
//!
//! A bare `OutOfMemoryError` counts only with PyTorch's or CUDA's words (Java's
//! `java.lang.OutOfMemoryError` is not a training run's OOM), and an error that merely mentions
//! memory (`an illegal memory access was encountered`, NCCL's `Cuda failure 1 'invalid
//! argument'`) is not one. The kernel's OOM killer is read by [`kernel_kill`], never by
//! [`recognise`]; a shell's `Killed` alone says nothing about memory.
//!
//! It lives in the format crate beside the marker protocol because it is the other way a program
//! tells the recorder about an OOM: the recorder (and the tch `Session`, for an error it caught)
//! turns the error into an OOM record, with the allocator's state as numbers when PyTorch states
//! it ("Of the allocated memory 64.73 GiB is allocated by PyTorch, and 1.20 GiB is reserved by
//! PyTorch but unallocated": far more than the last stage mark's snapshot may show, a forward pass
//! allocates between marks). The analysis reads a message again only in traces written before
//! format 1.7, whose records lack those numbers.

use oomscope_format::units::parse_bytes;
use oomscope_format::{OomEvent, OomKind, OomSource};

/// What an OOM line said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomText {
    /// Device or host.
    pub kind: OomKind,
    /// Bytes the failing allocation asked for.
    pub requested_bytes: Option<u64>,
    /// GPU index.
    pub device: Option<u32>,
    /// Total device memory as stated.
    pub total_bytes: Option<u64>,
    /// Free device memory as stated.
    pub free_bytes: Option<u64>,
    /// Bytes the caching allocator had handed to tensors when the request failed, as stated.
    pub allocated_bytes: Option<u64>,
    /// Bytes the caching allocator held from the device then (allocated + cached), as stated.
    pub reserved_bytes: Option<u64>,
    /// The line, trimmed (at most 512 bytes).
    pub message: String,
}

impl OomText {
    /// The OOM record of an error seen on stderr at `t_us`; its stage and step are the
    /// recorder's to fill in from what the program said last.
    pub fn into_event(self, t_us: u64) -> OomEvent {
        let source = match self.kind {
            OomKind::Gpu => OomSource::Stderr,
            OomKind::Host => OomSource::HostError,
        };
        OomEvent {
            requested_bytes: self.requested_bytes,
            device: self.device,
            device_free_bytes: self.free_bytes,
            device_total_bytes: self.total_bytes,
            allocated_bytes: self.allocated_bytes,
            reserved_bytes: self.reserved_bytes,
            ..OomEvent::new(t_us, source, self.message)
        }
    }
}

/// Recognises an OOM error in one line of stderr.
pub fn recognise(line: &str) -> Option<OomText> {
    let kind = classify(line)?;
    let mut message = line.trim().to_owned();
    if message.len() > 512 {
        let mut cut = 512;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    let mut oom = OomText {
        kind,
        requested_bytes: None,
        device: None,
        total_bytes: None,
        free_bytes: None,
        allocated_bytes: None,
        reserved_bytes: None,
        message,
    };
    fill(&mut oom, line);
    Some(oom)
}

/// How many non-blank lines after the recognised one [`recognise_text`] reads for facts.
const CONTINUATION_LINES: usize = 4;

/// Recognises an OOM error in a multi-line text (a traceback, a log excerpt): the first line
/// [`recognise`] accepts, completed with facts that line leaves out and the next few lines of the
/// same error state. Those are at most 4 non-blank lines, read with their leading `#` and `>`
/// quote markers dropped, up to the next recognised error (a logger's copy of the same message)
/// or a new traceback (`Traceback`, `The above exception`, `During handling`). They only fill fields
/// still empty: a PyTorch 1.x message wrapped over lines (`0 bytes free; 9.23 GiB reserved in
/// total by PyTorch)`), or NCCL's `Failed to CUDA calloc 6291456 bytes` after its `Cuda failure
/// 'out of memory'`. `None` when no line is an OOM error; the message is the recognised line's.
pub fn recognise_text(text: &str) -> Option<OomText> {
    let mut lines = text.lines();
    let mut oom = lines.by_ref().find_map(recognise)?;
    let mut read = 0;
    for line in lines {
        let line = line.trim_start_matches(|c: char| c.is_whitespace() || c == '#' || c == '>');
        if line.trim().is_empty() {
            continue;
        }
        if read == CONTINUATION_LINES
            || classify(line).is_some()
            || ["Traceback", "The above exception", "During handling"]
                .iter()
                .any(|start| line.starts_with(start))
        {
            break;
        }
        fill(&mut oom, line);
        read += 1;
    }
    Some(oom)
}

/// Whether a line is an out-of-memory error, and of which memory.
fn classify(line: &str) -> Option<OomKind> {
    const GPU: [&str; 13] = [
        "CUDA out of memory",
        "HIP out of memory",
        "XPU out of memory",
        "MPS backend out of memory",
        "CUDA error: out of memory",
        "torch.OutOfMemoryError",
        "torch.cuda.OutOfMemoryError",
        "cudaErrorMemoryAllocation",
        "CUDA_ERROR_OUT_OF_MEMORY",
        "hipErrorOutOfMemory",
        "HIP_ERROR_OutOfMemory",
        "CUBLAS_STATUS_ALLOC_FAILED",
        "HIPBLAS_STATUS_ALLOC_FAILED",
    ];
    const HOST: [&str; 5] = [
        "Cannot allocate memory",
        "std::bad_alloc",
        "Error: MemoryError",
        "_ArrayMemoryError",
        "_exceptions.MemoryError",
    ];
    if line.contains("OOM when allocating tensor") {
        // TensorFlow names the device; its CPU allocator's OOM is host memory.
        return Some(if line.contains("/device:CPU:") {
            OomKind::Host
        } else {
            OomKind::Gpu
        });
    }
    let lower = line.to_ascii_lowercase();
    let out_of_memory = lower.contains("out of memory");
    // CUDA's own words in other tools: NCCL's `Cuda failure 'out of memory'` (runtime API) and
    // `Cuda failure 2 'out of memory'` (driver API), `Cuda error in func ...: out of memory`.
    let cuda_says_so = out_of_memory
        && ["cuda error", "cuda failure", "hip error", "hip failure"]
            .iter()
            .any(|w| lower.contains(w));
    // XLA's status (`RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes`, TPU's
    // `Ran out of memory in memory space hbm`, the BFC allocator's `Failed to allocate request`).
    let xla = (line.contains("RESOURCE_EXHAUSTED") || line.contains("Resource exhausted"))
        && (out_of_memory || line.contains("Failed to allocate request"));
    if GPU.iter().any(|w| line.contains(w)) || cuda_says_so || xla {
        return Some(OomKind::Gpu);
    }
    let libtorch_cpu = line.contains("DefaultCPUAllocator: can't allocate memory")
        || line.contains("DefaultCPUAllocator: not enough memory")
        || (line.contains("posix_memalign") && line.contains("12 vs 0"));
    let python = line
        .strip_prefix("MemoryError")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([':', ' ', '(']));
    (libtorch_cpu || python || HOST.iter().any(|w| line.contains(w))).then_some(OomKind::Host)
}

/// Fills the fields of `oom` still empty with what `line` states.
fn fill(oom: &mut OomText, line: &str) {
    if oom.requested_bytes.is_none() {
        oom.requested_bytes = requested(line);
    }
    if oom.device.is_none() && oom.kind == OomKind::Gpu {
        oom.device = device(line);
    }
    if oom.total_bytes.is_none() {
        oom.total_bytes = size_after(line, "total capacity of ")
            .or_else(|| size_after(line, "total capacty of ")) // PyTorch 2.1's spelling
            .or_else(|| size_before(line, " total capacity"));
    }
    if oom.free_bytes.is_none() {
        oom.free_bytes = size_after(line, "of which ").or_else(|| size_before(line, " free;"));
    }
    // 2.x: "Of the allocated memory A is allocated by PyTorch, [with P allocated in private
    // pools (e.g., CUDA Graphs), ]and C is reserved by PyTorch but unallocated" (A includes P);
    // 1.x: "A already allocated; ... R reserved in total by PyTorch"; 1.0: "A already
    // allocated; ... C cached)", C being what the cache held beyond A; MPS: "MPS allocated: A".
    let allocated = size_after(line, "Of the allocated memory ")
        .or_else(|| size_before(line, " already allocated"))
        .or_else(|| size_after(line, "MPS allocated: "));
    if oom.allocated_bytes.is_none() {
        oom.allocated_bytes = allocated;
    }
    if oom.reserved_bytes.is_none() {
        let unallocated = line
            .find(" is reserved by PyTorch but unallocated")
            .and_then(|end| {
                let head = &line[..end];
                parse_size(&head[head.rfind("and ")? + 4..])
            })
            .or_else(|| size_before(line, " cached)"));
        oom.reserved_bytes = match (oom.allocated_bytes, unallocated) {
            (Some(a), Some(c)) => Some(a + c),
            _ => size_before(line, " reserved in total"),
        };
    }
}

/// The bytes the failing allocation asked for, as the line states them.
fn requested(line: &str) -> Option<u64> {
    if let Some(at) = line.find("Unable to allocate ") {
        // numpy: the shape and dtype say it exactly; the size it prints has 3 digits.
        let shape = after(line, "with shape (").or_else(|| after(line, "shape ("));
        let exact = shape
            .and_then(|s| dims(s.split_once(')')?.0))
            .zip(after(line, "data type ").and_then(dtype_size))
            .and_then(|(n, size)| n.checked_mul(size));
        return exact.or_else(|| parse_size(&line[at + "Unable to allocate ".len()..]));
    }
    if let Some(shape) = after(line, "tensor with shape[") {
        // TensorFlow: the tensor's elements times its dtype's size.
        let (dims_text, rest) = shape.split_once(']')?;
        let dtype = rest.trim_start().strip_prefix("and type ")?;
        return dims(dims_text)?.checked_mul(dtype_size(dtype)?);
    }
    size_after(line, "Tried to allocate ") // PyTorch CUDA, HIP, MPS
        .or_else(|| size_after(line, "you tried to allocate ")) // DefaultCPUAllocator
        .or_else(|| size_after(line, "while trying to allocate ")) // XLA
        .or_else(|| size_after(line, "Out of memory allocating ")) // XLA
        .or_else(|| bytes_in_parentheses(line)) // XLA's BFC allocator, TensorFlow's ROCm
        .or_else(|| {
            // NCCL: "Failed to CUDA calloc N bytes" (also malloc, host alloc).
            let rest = after(line, "Failed to CUDA ")?;
            let digits = rest.find(|c: char| c.is_ascii_digit())?;
            let n = leading_number(&rest[digits..])?;
            rest[digits..]
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .starts_with(" bytes")
                .then_some(n)
        })
}

/// The exact bytes an allocator states in parentheses after a rounded figure, after the word
/// `allocate`: `2.99GiB (3206250496B)`, `890.06M (933298432 bytes)`.
fn bytes_in_parentheses(line: &str) -> Option<u64> {
    let rest = &line[line.find("allocate")?..];
    rest.match_indices('(').find_map(|(at, _)| {
        let inner = &rest[at + 1..];
        let n = leading_number(inner)?;
        let unit = inner.trim_start_matches(|c: char| c.is_ascii_digit());
        (unit.starts_with("B)") || unit.starts_with(" bytes)")).then_some(n)
    })
}

/// The device index a device-memory error states: `GPU 0` (PyTorch), `device:GPU:1`
/// (TensorFlow), `device ordinal 0` (XLA), `GPU=0` (CNTK), `cuda:0`, or NCCL's log prefix.
fn device(line: &str) -> Option<u32> {
    ["GPU ", "device:GPU:", "device ordinal ", "GPU=", "cuda:"]
        .iter()
        .find_map(|prefix| number_after(line, prefix))
        .or_else(|| nccl_device(line))
        .and_then(|n| u32::try_from(n).ok())
}

/// The CUDA device in NCCL's log prefix `host:pid:tid [dev] ` (not a `[rank7]:` tag).
fn nccl_device(line: &str) -> Option<u64> {
    let open = line.find(" [")?;
    let token = line[..open].rsplit(' ').next()?;
    let mut parts = token.rsplitn(3, ':');
    let (tid, pid, host) = (parts.next()?, parts.next()?, parts.next()?);
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if host.is_empty() || !all_digits(tid) || !all_digits(pid) {
        return None;
    }
    let (dev, _) = line[open + 2..].split_once(']')?;
    all_digits(dev).then(|| dev.parse().ok())?
}

/// The product of a shape's dimensions: `16,112,112,147`, `1000000000,`, `` (a scalar).
fn dims(text: &str) -> Option<u64> {
    text.split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .try_fold(1u64, |n, d| n.checked_mul(d.parse().ok()?))
}

/// The size of one element of a numpy or TensorFlow dtype, by the name they print.
fn dtype_size(text: &str) -> Option<u64> {
    let name: String = text
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    Some(match name.as_str() {
        "bool" | "int8" | "uint8" | "qint8" | "quint8" | "float8_e4m3fn" | "float8_e5m2" => 1,
        "int16" | "uint16" | "qint16" | "quint16" | "float16" | "half" | "bfloat16" => 2,
        "int32" | "uint32" | "qint32" | "float32" | "float" => 4,
        "int64" | "uint64" | "float64" | "double" | "complex64" => 8,
        "complex128" | "float128" | "longdouble" => 16,
        _ => return None,
    })
}

/// A size as allocators print it ([`parse_bytes`], plus numpy's `PiB` and `EiB`).
fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim_start();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let shift = match unit.trim_start() {
        u if u.starts_with("PiB") => 50,
        u if u.starts_with("EiB") => 60,
        _ => return parse_bytes(text),
    };
    let bytes = number.parse::<f64>().ok()? * (1u64 << shift) as f64;
    // `as` saturates; a size past u64 is no size.
    (bytes.is_finite() && bytes < u64::MAX as f64).then(|| bytes.round() as u64)
}

/// What the kernel's OOM killer logged about one kill (`mm/oom_kill.c`):
///
/// ```text
/// oom-kill:constraint=CONSTRAINT_MEMCG,...,oom_memcg=/job,task_memcg=/job,task=python3,pid=12390,uid=0
/// Memory cgroup out of memory: Killed process 12390 (python3) total-vm:1065144kB, anon-rss:408448kB, file-rss:6676kB, shmem-rss:0kB, UID:0 ...
/// Out of memory: Killed process 14188 (python) total-vm:...kB, anon-rss:24383160kB, ...
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelKill {
    /// The killed process.
    pub pid: u32,
    /// Its name (the kernel's `comm`, at most 15 bytes).
    pub process: String,
    /// Resident memory when killed: anon + file + shmem RSS.
    pub rss_bytes: Option<u64>,
    /// The whole host ran out (`Out of memory:`), rather than a memory cgroup's limit.
    pub global: bool,
}

/// Reads a kernel log line that reports a kill by the OOM killer (`Killed process PID (name)`);
/// `None` for every other line, including the OOM report's other lines.
pub fn kernel_kill(line: &str) -> Option<KernelKill> {
    const KILLED: &str = "Killed process ";
    let at = line.find(KILLED)?;
    let head = &line[..at];
    if !head.contains("out of memory") && !head.contains("Out of memory") {
        return None;
    }
    let rest = &line[at + KILLED.len()..];
    let (pid, rest) = rest.split_once(" (")?;
    let pid: u32 = pid.trim().parse().ok()?;
    let (process, rest) = rest.split_once(") ")?;
    let kib = |key: &str| -> Option<u64> {
        let start = rest.find(key)? + key.len();
        let digits: String = rest[start..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse::<u64>().ok().map(|k| k * 1024)
    };
    let parts = [kib("anon-rss:"), kib("file-rss:"), kib("shmem-rss:")];
    let rss_bytes = parts
        .iter()
        .any(Option::is_some)
        .then(|| parts.iter().flatten().sum());
    Some(KernelKill {
        pid,
        process: process.to_owned(),
        rss_bytes,
        global: !head.contains("cgroup"),
    })
}

/// The text right after the first `prefix`.
fn after<'a>(line: &'a str, prefix: &str) -> Option<&'a str> {
    Some(&line[line.find(prefix)? + prefix.len()..])
}

fn size_after(line: &str, prefix: &str) -> Option<u64> {
    parse_size(after(line, prefix)?)
}

/// The size that ends right before `suffix`, e.g. `3.19 MiB` in `3.19 MiB free;`: from the last
/// `;`, `(` or `,` before it, or from the start of the line (a wrapped message's next line).
fn size_before(line: &str, suffix: &str) -> Option<u64> {
    let head = &line[..line.find(suffix)?];
    let start = head.rfind([';', '(', ',']).map_or(0, |at| at + 1);
    parse_size(&head[start..])
}

/// The whole number right after a `prefix` that starts a word (`GPU 1` but not `XGPU 1`, `cuda:0`
/// but not `at::cuda::`), at its first such place that has one.
fn number_after(line: &str, prefix: &str) -> Option<u64> {
    line.match_indices(prefix).find_map(|(at, _)| {
        let starts_word = line[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == ':'));
        starts_word
            .then(|| leading_number(&line[at + prefix.len()..]))
            .flatten()
    })
}

/// The digits a text starts with, as a number.
fn leading_number(text: &str) -> Option<u64> {
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    text[..end].parse().ok()
}

/// What PyTorch prints when the shared-memory tmpfs (`/dev/shm`) has no room for a tensor a
/// DataLoader worker hands over (strings as torch 2.11 ships them, in `libshm`, the storage
/// sharing code and the DataLoader's signal handling):
///
/// ```text
/// RuntimeError: unable to allocate shared memory(shm) for file </torch_5617_3366040453_0>: …
/// RuntimeError: unable to write to file </torch_18693_1954941411>: No space left on device (28)
/// ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).
/// RuntimeError: DataLoader worker (pid 4181) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory. Please try to raise your shared memory limit.
/// ```
///
/// Not "unable to open shared memory object <…>: Too many open files": the descriptors ran out,
/// not the memory.
pub fn shm_failure(line: &str) -> bool {
    line.contains("unable to allocate shared memory(shm)")
        || line.contains("insufficient shared memory (shm)")
        || line.contains("workers are out of shared memory")
        || (line.contains("unable to write to file </torch_")
            && line.contains("No space left on device"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: f64 = oomscope_format::units::GIB as f64;
    const MIB: f64 = oomscope_format::units::MIB as f64;

    #[test]
    fn pytorch_2_message() {
        let line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.34 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.23 GiB is free. Process 1234 has 77.9 GiB memory in use.";
        let oom = recognise(line).unwrap();
        assert_eq!(oom.kind, OomKind::Gpu);
        assert_eq!(oom.requested_bytes, Some((2.34 * GIB).round() as u64));
        assert_eq!(oom.device, Some(0));
        assert_eq!(oom.total_bytes, Some((79.19 * GIB).round() as u64));
        assert_eq!(oom.free_bytes, Some((1.23 * GIB).round() as u64));
        assert_eq!((oom.allocated_bytes, oom.reserved_bytes), (None, None));
    }

    #[test]
    fn pytorch_2_11_message_states_the_allocator() {
        // Recorded verbatim on an H100 (torch 2.11.0+cu130, scripts/gpu-proof/torch_loop.py
        // --oom-step 5, 2026-11-22), as the collector stores it (cut at 512 bytes).
        let line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 117.32 GiB. GPU 0 has a total capacity of 79.18 GiB of which 78.26 GiB is free. Including non-PyTorch memory, this process has 928.00 MiB memory in use. Of the allocated memory 171.06 MiB is allocated by PyTorch, and 14.94 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://doc";
        let oom = recognise(line).unwrap();
        assert_eq!(oom.requested_bytes, Some((117.32 * GIB).round() as u64));
        assert_eq!(oom.free_bytes, Some((78.26 * GIB).round() as u64));
        let allocated = (171.06 * MIB).round() as u64;
        assert_eq!(oom.allocated_bytes, Some(allocated));
        assert_eq!(
            oom.reserved_bytes,
            Some(allocated + (14.94 * MIB).round() as u64)
        );
    }

    #[test]
    fn the_observer_s_message_reads_the_same_way() {
        // What `Session` writes for an OOM the allocator observed (exact bytes).
        let line = "CUDA out of memory (allocator observer). Tried to allocate 34359738368 bytes. GPU 0 has a total capacity of 85017493504 bytes of which 14745272320 bytes is free. Of the allocated memory 69503234048 bytes is allocated by PyTorch, and 2097152 bytes is reserved by PyTorch but unallocated.";
        let oom = recognise(line).unwrap();
        assert_eq!(oom.requested_bytes, Some(34_359_738_368));
        assert_eq!(oom.device, Some(0));
        assert_eq!(oom.total_bytes, Some(85_017_493_504));
        assert_eq!(oom.free_bytes, Some(14_745_272_320));
        assert_eq!(oom.allocated_bytes, Some(69_503_234_048));
        assert_eq!(oom.reserved_bytes, Some(69_503_234_048 + 2_097_152));
    }

    #[test]
    fn pytorch_1_message() {
        let line = "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 1; 15.78 GiB total capacity; 14.56 GiB already allocated; 3.19 MiB free; 14.64 GiB reserved in total by PyTorch)";
        let oom = recognise(line).unwrap();
        assert_eq!(oom.requested_bytes, Some((20.0 * MIB) as u64));
        assert_eq!(oom.device, Some(1));
        assert_eq!(oom.total_bytes, Some((15.78 * GIB).round() as u64));
        assert_eq!(oom.free_bytes, Some((3.19 * MIB).round() as u64));
        assert_eq!(oom.allocated_bytes, Some((14.56 * GIB).round() as u64));
        assert_eq!(oom.reserved_bytes, Some((14.64 * GIB).round() as u64));
    }

    #[test]
    fn the_kernel_s_kill_lines() {
        // Read off /dev/kmsg on this machine (kernel 6.18.44) after a real memory-cgroup kill.
        let memcg = "Memory cgroup out of memory: Killed process 12390 (python3) total-vm:1065144kB, anon-rss:408448kB, file-rss:6676kB, shmem-rss:0kB, UID:0 pgtables:876kB oom_score_adj:0";
        assert_eq!(
            kernel_kill(memcg),
            Some(KernelKill {
                pid: 12390,
                process: "python3".to_owned(),
                rss_bytes: Some((408_448 + 6676) * 1024),
                global: false,
            })
        );
        let global = "Out of memory: Killed process 14188 (python) total-vm:36593972kB, anon-rss:24383160kB, file-rss:76kB, shmem-rss:0kB, UID:0 pgtables:48992kB oom_score_adj:0";
        let k = kernel_kill(global).unwrap();
        assert!(k.global && k.pid == 14188 && k.process == "python");
        // The report's other lines are not kills.
        assert!(
            kernel_kill(
                "python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0"
            )
            .is_none()
        );
        assert!(kernel_kill("[  pid  ]   uid  tgid total_vm      rss rss_anon name").is_none());
        assert!(kernel_kill("Killed process 5 (x) by the user").is_none());
    }

    #[test]
    fn bare_cuda_and_host_errors() {
        let cuda = recognise("RuntimeError: CUDA error: out of memory").unwrap();
        assert_eq!((cuda.kind, cuda.requested_bytes), (OomKind::Gpu, None));
        let host = recognise("OSError: [Errno 12] Cannot allocate memory").unwrap();
        assert_eq!(host.kind, OomKind::Host);
        assert_eq!(recognise("MemoryError").unwrap().kind, OomKind::Host);
        assert!(recognise("loss 0.12 step 5 (memory 12 GiB)").is_none());
    }

    #[test]
    fn private_pools_and_the_1_0_cache_count_as_reserved() {
        // torch 2.x with CUDA Graphs: the first figure already includes the private pools.
        let line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.74 GiB. GPU 0 has a total capacity of 15.48 GiB of which 953.94 MiB is free. Including non-PyTorch memory, this process has 14.53 GiB memory in use. Of the allocated memory 12.19 GiB is allocated by PyTorch, with 81.88 MiB allocated in private pools (e.g., CUDA Graphs), and 368.65 MiB is reserved by PyTorch but unallocated.";
        let oom = recognise(line).unwrap();
        let allocated = (12.19 * GIB).round() as u64;
        assert_eq!(oom.allocated_bytes, Some(allocated));
        assert_eq!(
            oom.reserved_bytes,
            Some(allocated + (368.65 * MIB).round() as u64)
        );
        // torch 1.0: "cached" is what the cache held beyond the allocated memory.
        let line = "RuntimeError: CUDA out of memory. Tried to allocate 12.50 MiB (GPU 0; 10.92 GiB total capacity; 8.57 MiB already allocated; 9.28 GiB free; 4.68 MiB cached)";
        let oom = recognise(line).unwrap();
        assert_eq!(
            oom.reserved_bytes,
            Some((8.57 * MIB).round() as u64 + (4.68 * MIB).round() as u64)
        );
    }

    #[test]
    fn other_stacks_state_device_and_request_their_own_way() {
        let tf = "ResourceExhaustedError: OOM when allocating tensor with shape[128,128,109,109] and type float on /job:localhost/replica:0/task:0/device:GPU:1 by allocator GPU_1_bfc";
        let oom = recognise(tf).unwrap();
        assert_eq!(
            (oom.kind, oom.device, oom.requested_bytes),
            (OomKind::Gpu, Some(1), Some(128 * 128 * 109 * 109 * 4))
        );
        // TensorFlow's CPU allocator: host memory.
        let tf_cpu = "OOM when allocating tensor with shape[1000,1000] and type double on /job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu";
        let oom = recognise(tf_cpu).unwrap();
        assert_eq!(
            (oom.kind, oom.device, oom.requested_bytes),
            (OomKind::Host, None, Some(8_000_000))
        );
        let tf_driver = "E tensorflow/stream_executor/cuda/cuda_driver.cc:806] failed to allocate 3.83G (4114612224 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory";
        let oom = recognise(tf_driver).unwrap();
        assert_eq!(
            (oom.kind, oom.requested_bytes),
            (OomKind::Gpu, Some(4_114_612_224))
        );
        let xla = "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Failed to allocate request for 2.99GiB (3206250496B) on device ordinal 0";
        let oom = recognise(xla).unwrap();
        assert_eq!(
            (oom.device, oom.requested_bytes),
            (Some(0), Some(3_206_250_496))
        );
        let cpu = "RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate 4000000000 bytes. Error code 12 (Cannot allocate memory)";
        let oom = recognise(cpu).unwrap();
        assert_eq!(
            (oom.kind, oom.requested_bytes),
            (OomKind::Host, Some(4_000_000_000))
        );
        // numpy: the shape times the dtype's size, not the 3-digit "447. GiB".
        let numpy = "numpy._core._exceptions._ArrayMemoryError: Unable to allocate 447. GiB for an array with shape (300000, 400000) and data type float32";
        let oom = recognise(numpy).unwrap();
        assert_eq!(
            (oom.kind, oom.requested_bytes),
            (OomKind::Host, Some(480_000_000_000))
        );
        let mps = "MPS backend out of memory (MPS allocated: 7.43 GB, other allocations: 24.46 GB, max allowed: 32.00 GB). Tried to allocate 129.21 MB on private pool.";
        let oom = recognise(mps).unwrap();
        assert_eq!(oom.requested_bytes, Some((129.21 * MIB).round() as u64));
        let nccl = "ins-7df6eojsifuykig9:3018451:3018451 [5] enqueue.cc:1085 NCCL WARN Cuda failure 'out of memory'";
        assert_eq!(recognise(nccl).unwrap().device, Some(5));
        let rank = "[rank7]: Cuda failure 2 'out of memory'";
        assert_eq!(recognise(rank).unwrap().device, None);
    }

    #[test]
    fn near_misses_are_not_oom_errors() {
        for line in [
            "java.lang.OutOfMemoryError: Failed to allocate a 176 byte allocation with 504760 free bytes and 476KB until OOM",
            "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
            "[rank7]: Cuda failure 1 'invalid argument'",
            "RESOURCE_EXHAUSTED: Received message larger than max (4194305 vs. 4194304)",
            "Reducing maxBytes to 27951912277 due to memory limitation",
            "--gpu-memory-utilization 0.9",
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
            "MemoryErrorHandler installed",
            "Killed",
            "Out of memory: Killed process 14188 (python) total-vm:36593972kB, anon-rss:24383160kB, file-rss:76kB, shmem-rss:0kB, UID:0 pgtables:48992kB oom_score_adj:0",
        ] {
            assert_eq!(recognise(line), None, "{line}");
        }
    }

    #[test]
    fn a_text_completes_its_first_error_from_the_lines_after_it() {
        // A 1.x message wrapped over lines by a person, behind comment markers.
        let text = "# RuntimeError: CUDA out of memory. Tried to allocate 1.78 GiB (GPU 0; 4.00 GiB total capacity; 7.42 GiB already allocated;\n # 0 bytes free; 9.23 GiB reserved in total by PyTorch)\n # If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.";
        let oom = recognise_text(text).unwrap();
        assert_eq!(oom.requested_bytes, Some((1.78 * GIB).round() as u64));
        assert_eq!(oom.free_bytes, Some(0));
        assert_eq!(oom.reserved_bytes, Some((9.23 * GIB).round() as u64));
        assert!(oom.message.ends_with("already allocated;"));
        // NCCL states the size two lines later.
        let text = "h:1:2 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'\n\nh:1:2 [3] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 6291456 bytes";
        let oom = recognise_text(text).unwrap();
        assert_eq!(
            (oom.device, oom.requested_bytes),
            (Some(3), Some(6_291_456))
        );
        // A second error is not read into the first; a traceback before it is skipped.
        let text = "Traceback (most recent call last):\nRuntimeError: CUDA error: out of memory\nRuntimeError: CUDA out of memory. Tried to allocate 2.00 MiB (GPU 1; 1.00 GiB total capacity; 1 GiB already allocated; 0 bytes free; 1 GiB reserved in total by PyTorch)";
        let oom = recognise_text(text).unwrap();
        assert_eq!((oom.device, oom.requested_bytes), (None, None));
        assert_eq!(recognise_text("all good\nloss 0.1"), None);
    }

    #[test]
    fn a_full_dev_shm_is_told_by_pytorch_s_own_words() {
        for line in [
            "RuntimeError: unable to allocate shared memory(shm) for file </torch_5617_3366040453_0>: Resource temporarily unavailable (11)",
            "RuntimeError: unable to write to file </torch_18693_1954941411>: No space left on device (28)",
            "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
            "RuntimeError: DataLoader worker (pid 4181) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory. Please try to raise your shared memory limit.",
        ] {
            assert!(shm_failure(line), "{line}");
        }
        for line in [
            "RuntimeError: unable to open shared memory object </torch_2311_1937384387_107> in read-write mode: Too many open files (24)",
            "RuntimeError: unable to write to file </home/me/out.bin>: No space left on device (28)",
            "RuntimeError: DataLoader worker (pid 4181) is killed by signal: Killed.",
        ] {
            assert!(!shm_failure(line), "{line}");
        }
    }
}
