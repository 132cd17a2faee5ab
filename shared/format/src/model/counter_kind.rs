//! What a counter measures ([`CounterKind`]), and every known kind's code, label and counter
//! name in one table ([`COUNTERS`]): a kind added is one row, and the code written to the trace,
//! the label of tables and JSON, and the name every writer declares cannot drift apart.

use serde::Serialize;

use super::marks::AllocatorQuantity;

/// What a counter measures. The numeric codes are part of the format and never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum CounterKind {
    /// Device memory in use (NVML `used`; v2 where available, which excludes reserved).
    GpuUsed,
    /// Device memory free (NVML `free`).
    GpuFree,
    /// Device memory reserved by the driver (NVML v2 `reserved`).
    GpuReserved,
    /// Total device memory.
    GpuTotal,
    /// Device memory used by the watched process tree (NVML per-process query).
    ProcessGpu,
    /// One of the caching allocator's quantities, sampled (a tch program recording itself reads
    /// them at every tick; marks carry them as [`AllocatorStats`]).
    Allocator(AllocatorQuantity),
    /// Resident set size of the watched process tree.
    HostRss,
    /// Host memory available (`MemAvailable`).
    HostAvailable,
    /// Proportional set size of the watched process tree: each shared page counted once, split
    /// among the processes that map it (forked DataLoader workers share their parent's pages;
    /// summed RSS counts them once per worker). Format v1.4.
    HostPss,
    /// Resident set size of one process of the tree (a rank): the counter names its pid
    /// ([`Counter::pid`]). Format v1.5.
    PidRss,
    /// Device memory of one process of the tree on one device (NVML per-process query): the
    /// counter names its pid and device. Format v1.5.
    PidGpu,
    /// Resident pages of the watched process tree that are file-backed or shared memory
    /// (`/proc/PID/statm`'s `shared`: memory-mapped files such as an `np.memmap` dataset, shared
    /// libraries, shmem). Clean file pages are the kernel's to drop under pressure: growth here is
    /// not a leak; the rest of `HostRss` is anonymous memory. Format v1.8.
    HostRssFile,
    /// Bytes in use on the shared-memory tmpfs (`/dev/shm`: its blocks less its free blocks):
    /// POSIX shared memory, where DataLoader workers hand their batches to the main process, and
    /// any file written there. The whole mount's, every process's that uses it (a container's
    /// `/dev/shm` is its own): host memory the run uses outside any process's RSS until a
    /// process maps it. Format v1.13.
    ShmUsed,
    /// The size of that tmpfs (Docker's default is 64 MB): what `ShmUsed` can reach before a
    /// worker's batch no longer fits. Format v1.13.
    ShmSize,
    /// A kind this reader does not know (written by a newer recorder); the code is kept.
    Other(u16),
}

/// How a kind's counter is named ([`CounterKind::counter_name`]).
#[derive(Debug, Clone, Copy)]
enum Naming {
    /// `gpu{device}.{field}` (`gpu.{field}` without a device).
    Device(&'static str),
    /// `gpu{device}.allocator.{quantity's label}`.
    Allocator,
    /// One name, whatever the device.
    Host(&'static str),
}

/// Every kind this version knows, in code order: its stable code (part of the format, never
/// changed), its label (tables, CSV headers, JSON) and how its counter is named.
const COUNTERS: [(CounterKind, u16, &str, Naming); 21] = {
    use AllocatorQuantity as Q;
    use CounterKind as K;
    use Naming::{Allocator, Device, Host};
    [
        (K::GpuUsed, 1, "gpu_used", Device("used")),
        (K::GpuFree, 2, "gpu_free", Device("free")),
        (K::GpuReserved, 3, "gpu_reserved", Device("driver_reserved")),
        (K::GpuTotal, 4, "gpu_total", Device("total")),
        (K::ProcessGpu, 5, "process_gpu", Device("process")),
        (
            K::Allocator(Q::Allocated),
            Q::Allocated.counter_code(),
            Q::Allocated.label(),
            Allocator,
        ),
        (
            K::Allocator(Q::Reserved),
            Q::Reserved.counter_code(),
            Q::Reserved.label(),
            Allocator,
        ),
        (
            K::Allocator(Q::Active),
            Q::Active.counter_code(),
            Q::Active.label(),
            Allocator,
        ),
        (
            K::Allocator(Q::PeakAllocated),
            Q::PeakAllocated.counter_code(),
            Q::PeakAllocated.label(),
            Allocator,
        ),
        (
            K::Allocator(Q::PeakReserved),
            Q::PeakReserved.counter_code(),
            Q::PeakReserved.label(),
            Allocator,
        ),
        (K::HostRss, 11, "host_rss", Host("host.rss")),
        (
            K::HostAvailable,
            12,
            "host_available",
            Host("host.available"),
        ),
        (K::HostPss, 13, "host_pss", Host("host.pss")),
        (K::PidRss, 14, "pid_rss", Host("pid.rss")),
        (K::PidGpu, 15, "pid_gpu", Device("pid")),
        (K::HostRssFile, 16, "host_rss_file", Host("host.rss_file")),
        (
            K::Allocator(Q::InactiveSplit),
            Q::InactiveSplit.counter_code(),
            Q::InactiveSplit.label(),
            Allocator,
        ),
        (
            K::Allocator(Q::AllocRetries),
            Q::AllocRetries.counter_code(),
            Q::AllocRetries.label(),
            Allocator,
        ),
        (
            K::Allocator(Q::Ooms),
            Q::Ooms.counter_code(),
            Q::Ooms.label(),
            Allocator,
        ),
        (K::ShmUsed, 20, "shm_used", Host("host.shm_used")),
        (K::ShmSize, 21, "shm_size", Host("host.shm_size")),
    ]
};

impl CounterKind {
    /// Every kind this version knows, in code order.
    pub const KNOWN: [CounterKind; COUNTERS.len()] = {
        let mut known = [CounterKind::Other(0); COUNTERS.len()];
        let mut i = 0;
        while i < COUNTERS.len() {
            known[i] = COUNTERS[i].0;
            i += 1;
        }
        known
    };

    /// Its row of [`COUNTERS`]; none for [`CounterKind::Other`].
    fn row(self) -> Option<&'static (CounterKind, u16, &'static str, Naming)> {
        COUNTERS.iter().find(|r| r.0 == self)
    }

    /// The stable numeric code written to the trace.
    pub fn code(self) -> u16 {
        match (self, self.row()) {
            (CounterKind::Other(code), _) => code,
            (_, Some(row)) => row.1,
            (_, None) => unreachable!("every kind but Other has a row"),
        }
    }

    /// The kind for a code; unknown codes become [`CounterKind::Other`].
    pub fn from_code(code: u16) -> CounterKind {
        COUNTERS
            .iter()
            .find(|r| r.1 == code)
            .map_or(CounterKind::Other(code), |r| r.0)
    }

    /// The standard name of this kind's counter on `device` (`gpu0.used`, `host.rss`,
    /// `gpu0.allocator.reserved`): the one name every writer declares (the collector, the tch
    /// `Session`, the simulator, tests), so the CSV header, the viewer's legend and the findings
    /// say the same thing. Allocator counters are `allocator.*`, apart from the metrics read from
    /// the marks' allocator statistics (`allocated`, `reserved`).
    pub fn counter_name(self, device: Option<u32>) -> String {
        let on_device = |field: &str| match device {
            Some(d) => format!("gpu{d}.{field}"),
            None => format!("gpu.{field}"),
        };
        match self.row() {
            None => format!("other{}", self.code()),
            Some((_, _, _, Naming::Host(name))) => (*name).to_owned(),
            Some((_, _, label, Naming::Allocator)) => on_device(&format!("allocator.{label}")),
            Some((_, _, _, Naming::Device(field))) => on_device(field),
        }
    }

    /// The standard name of one process's counter of this kind: `pid4101.rss`,
    /// `gpu0.pid4101` (the per-process kinds), else [`Self::counter_name`].
    pub fn process_counter_name(self, device: Option<u32>, pid: Option<u32>) -> String {
        match (self, pid) {
            (CounterKind::PidRss, Some(pid)) => format!("pid{pid}.rss"),
            (CounterKind::PidGpu, Some(pid)) => match device {
                Some(d) => format!("gpu{d}.pid{pid}"),
                None => format!("gpu.pid{pid}"),
            },
            _ => self.counter_name(device),
        }
    }

    /// Whether a counter of this kind measures one process (`Counter::pid`).
    pub fn is_per_process(self) -> bool {
        matches!(self, CounterKind::PidRss | CounterKind::PidGpu)
    }

    /// A short, stable label used in tables, CSV headers and JSON (`gpu_used`, `host_rss`, ...).
    pub fn label(self) -> &'static str {
        self.row().map_or("other", |r| r.2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_s_codes_and_labels_are_each_one_kind_s() {
        for (i, a) in COUNTERS.iter().enumerate() {
            assert_eq!(CounterKind::from_code(a.1), a.0);
            assert_eq!(a.0.code(), a.1);
            for b in &COUNTERS[i + 1..] {
                assert!(a.1 < b.1, "codes rise: {a:?} {b:?}");
                assert_ne!(a.2, b.2, "labels differ");
            }
        }
        // Every allocator quantity has its kind.
        for q in AllocatorQuantity::ALL {
            assert!(CounterKind::KNOWN.contains(&CounterKind::Allocator(q)));
        }
        assert_eq!(CounterKind::from_code(999), CounterKind::Other(999));
        assert_eq!(CounterKind::Other(999).code(), 999);
    }

    #[test]
    fn names_are_the_ones_writers_declare() {
        assert_eq!(CounterKind::GpuUsed.counter_name(Some(0)), "gpu0.used");
        assert_eq!(
            CounterKind::GpuReserved.counter_name(None),
            "gpu.driver_reserved"
        );
        assert_eq!(
            CounterKind::Allocator(AllocatorQuantity::Reserved).counter_name(Some(1)),
            "gpu1.allocator.reserved"
        );
        assert_eq!(CounterKind::HostRss.counter_name(Some(3)), "host.rss");
        assert_eq!(CounterKind::PidGpu.counter_name(Some(2)), "gpu2.pid");
        assert_eq!(CounterKind::Other(77).counter_name(None), "other77");
        assert_eq!(CounterKind::ShmSize.label(), "shm_size");
        assert_eq!(CounterKind::Other(77).label(), "other");
    }
}
