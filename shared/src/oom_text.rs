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
//! It lives in `shared` because the analysis reads the recorded error text too: PyTorch states
//! what its allocator held when the request failed ("Of the allocated memory 64.73 GiB is
//! allocated by PyTorch, and 1.20 GiB is reserved by PyTorch but unallocated"), which can be far
//! more than the last stage mark's snapshot shows (a forward pass allocates between marks).

use crate::model::{OomEvent, OomSource};
use crate::units::parse_bytes;

/// Whether an error is about device or host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OomKind {
    /// CUDA device memory.
    Gpu,
    /// Host memory.
    Host,
}

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
            ..OomEvent::new(t_us, source, self.message)
        }
    }
}

/// Recognises an OOM error in one line of stderr.
pub fn recognise(line: &str) -> Option<OomText> {
    let kind = if line.contains("CUDA out of memory")
        || line.contains("CUDA error: out of memory")
        || line.contains("OutOfMemoryError")
        || line.contains("cudaErrorMemoryAllocation")
    {
        OomKind::Gpu
    } else if line.contains("Cannot allocate memory")
        || line.contains("std::bad_alloc")
        || line.starts_with("MemoryError")
        || line.contains("Error: MemoryError")
    {
        OomKind::Host
    } else {
        return None;
    };
    let mut message = line.trim().to_owned();
    if message.len() > 512 {
        let mut cut = 512;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    if kind == OomKind::Host {
        return Some(OomText {
            kind,
            requested_bytes: None,
            device: None,
            total_bytes: None,
            free_bytes: None,
            allocated_bytes: None,
            reserved_bytes: None,
            message,
        });
    }
    // 2.x: "Of the allocated memory A is allocated by PyTorch, and C is reserved by PyTorch but
    // unallocated"; 1.x: "A already allocated; ... R reserved in total by PyTorch".
    let allocated_bytes = size_after(line, "Of the allocated memory ")
        .or_else(|| size_before(line, " already allocated"));
    let reserved_bytes = match (
        allocated_bytes,
        size_after(line, "allocated by PyTorch, and "),
    ) {
        (Some(a), Some(cached)) if line.contains("reserved by PyTorch but unallocated") => {
            Some(a + cached)
        }
        _ => size_before(line, " reserved in total"),
    };
    Some(OomText {
        kind,
        requested_bytes: size_after(line, "Tried to allocate "),
        device: number_after(line, "GPU ").and_then(|n| u32::try_from(n).ok()),
        total_bytes: size_after(line, "total capacity of ")
            .or_else(|| size_before(line, " total capacity")),
        free_bytes: size_after(line, "of which ").or_else(|| size_before(line, " free;")),
        allocated_bytes,
        reserved_bytes,
        message,
    })
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

fn size_after(line: &str, prefix: &str) -> Option<u64> {
    let start = line.find(prefix)? + prefix.len();
    parse_bytes(&line[start..])
}

/// The size that ends right before `suffix`, e.g. `3.19 MiB` in `3.19 MiB free;`.
fn size_before(line: &str, suffix: &str) -> Option<u64> {
    let end = line.find(suffix)?;
    let head = &line[..end];
    let start = head.rfind([';', '(', ','])? + 1;
    parse_bytes(&head[start..])
}

fn number_after(line: &str, prefix: &str) -> Option<u64> {
    let start = line.find(prefix)? + prefix.len();
    let digits: String = line[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: f64 = (1u64 << 30) as f64;
    const MIB: f64 = (1u64 << 20) as f64;

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
}
