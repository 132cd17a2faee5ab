//! GPU memory through NVML (`nvml-wrapper`, which loads `libnvidia-ml` at run time).
//!
//! Why two speeds: `nvmlDeviceGetMemoryInfo_v2` costs ~12 µs and can run at 1 kHz, while the
//! per-process query (`nvmlDeviceGetComputeRunningProcesses_v3`) takes milliseconds and holds the
//! driver's global lock, stalling CUDA launches of the very program being watched. The sampler
//! calls only the former; the slow poller calls the latter about once a second.
//!
//! `OOMSCOPE_NVML_LIB` names another library to load instead of the system's `libnvidia-ml.so.1`
//! (the test double in `collector/fake-nvml`, or a driver in a non-standard place).
//!
//! Per-process memory is matched on host PIDs: NVML is not PID-namespace aware, so inside a
//! container without `--pid=host` the process memory is unavailable (device memory still is).

use std::ffi::OsString;
use std::sync::OnceLock;

use anyhow::{Context, Result, bail};
use nvml_wrapper::Nvml;
use nvml_wrapper::enums::device::UsedGpuMemory;
use oomscope_format::GpuInfo;

/// Environment variable naming the NVML library to load.
pub const NVML_LIB_ENV: &str = "OOMSCOPE_NVML_LIB";

static NVML: OnceLock<Nvml> = OnceLock::new();

/// Which GPUs to watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuSelection {
    /// Every GPU NVML reports.
    All,
    /// These indices.
    Indices(Vec<u32>),
}

impl std::str::FromStr for GpuSelection {
    type Err = String;

    fn from_str(text: &str) -> Result<GpuSelection, String> {
        if text == "all" {
            return Ok(GpuSelection::All);
        }
        text.split(',')
            .map(|part| {
                part.trim()
                    .parse::<u32>()
                    .map_err(|_| format!("`{part}` is not a GPU index (use `all` or e.g. `0,2`)"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(GpuSelection::Indices)
    }
}

/// One memory reading of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceMemory {
    /// Used bytes (v2: allocated by processes).
    pub used_bytes: u64,
    /// Free bytes.
    pub free_bytes: u64,
    /// Driver-reserved bytes.
    pub reserved_bytes: u64,
    /// Total bytes.
    pub total_bytes: u64,
}

/// The watched GPUs.
#[derive(Debug)]
pub struct Gpus {
    devices: Vec<nvml_wrapper::Device<'static>>,
    infos: Vec<GpuInfo>,
}

impl Gpus {
    /// Loads NVML and opens the selected devices. Errors when there is no driver or library, or
    /// a selected index does not exist.
    pub fn open(selection: &GpuSelection) -> Result<Gpus> {
        let nvml = match NVML.get() {
            Some(nvml) => nvml,
            None => {
                let loaded = match std::env::var_os(NVML_LIB_ENV) {
                    Some(path) => load_from(&path),
                    None => Nvml::init().context("NVML is not available (no NVIDIA driver?)"),
                }?;
                NVML.get_or_init(|| loaded)
            }
        };
        let count = nvml.device_count().context("NVML could not count GPUs")?;
        let indices: Vec<u32> = match selection {
            GpuSelection::All => (0..count).collect(),
            GpuSelection::Indices(indices) => {
                if let Some(bad) = indices.iter().find(|i| **i >= count) {
                    bail!("GPU {bad} does not exist: NVML reports {count} GPU(s)");
                }
                indices.clone()
            }
        };
        let driver_version = nvml.sys_driver_version().unwrap_or_default();
        let cuda_version = nvml
            .sys_cuda_driver_version()
            .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10))
            .unwrap_or_default();
        let mut devices = Vec::with_capacity(indices.len());
        let mut infos = Vec::with_capacity(indices.len());
        for index in indices {
            let device = nvml
                .device_by_index(index)
                .with_context(|| format!("NVML could not open GPU {index}"))?;
            infos.push(GpuInfo {
                index,
                name: device.name().unwrap_or_default(),
                uuid: device.uuid().unwrap_or_default(),
                total_memory_bytes: device.memory_info().map(|m| m.total).unwrap_or(0),
                driver_version: driver_version.clone(),
                cuda_version: cuda_version.clone(),
            });
            devices.push(device);
        }
        Ok(Gpus { devices, infos })
    }

    /// Descriptions of the watched devices, in order.
    pub fn infos(&self) -> &[GpuInfo] {
        &self.infos
    }

    /// Number of watched devices.
    pub fn len(&self) -> usize {
        self.devices.len()
    }

    /// True when no device is watched.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// Memory of the `i`-th watched device (fast: safe at 1 kHz).
    pub fn memory(&self, i: usize) -> Option<DeviceMemory> {
        let m = self.devices.get(i)?.memory_info().ok()?;
        Some(DeviceMemory {
            used_bytes: m.used,
            free_bytes: m.free,
            reserved_bytes: m.reserved,
            total_bytes: m.total,
        })
    }

    /// Every compute process on the `i`-th device with its memory (slow: ~1 Hz; the pids are
    /// the host's, whatever pid namespace this collector runs in). `None` when the query fails or
    /// the driver does not report per-process memory.
    pub fn processes(&self, i: usize) -> Option<Vec<(u32, u64)>> {
        let processes = self.devices.get(i)?.running_compute_processes().ok()?;
        processes
            .iter()
            .map(|p| match p.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => Some((p.pid, bytes)),
                UsedGpuMemory::Unavailable => None,
            })
            .collect()
    }
}

fn load_from(path: &OsString) -> Result<Nvml> {
    Nvml::builder().lib_path(path).init().with_context(|| {
        format!(
            "could not load NVML from {} ({NVML_LIB_ENV})",
            path.to_string_lossy()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections_parse() {
        assert_eq!("all".parse(), Ok(GpuSelection::All));
        assert_eq!("0,2".parse(), Ok(GpuSelection::Indices(vec![0, 2])));
        assert!("0,x".parse::<GpuSelection>().unwrap_err().contains("`x`"));
    }
}
