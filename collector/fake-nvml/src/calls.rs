//! Per-symbol call counters, read by tests through `oomscope_fake_nvml_calls`.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! symbols {
    ($($sym:ident),* $(,)?) => {
        /// Every NVML symbol the fake exports, one counter each.
        #[allow(non_camel_case_types)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum Sym {
            $($sym,)*
        }

        impl Sym {
            pub(crate) const ALL: &[Sym] = &[$(Sym::$sym,)*];

            /// The exported C symbol's name.
            pub(crate) fn name(self) -> &'static str {
                match self {
                    $(Sym::$sym => stringify!($sym),)*
                }
            }
        }
    };
}

symbols!(
    nvmlInit_v2,
    nvmlInitWithFlags,
    nvmlShutdown,
    nvmlErrorString,
    nvmlSystemGetDriverVersion,
    nvmlSystemGetCudaDriverVersion,
    nvmlSystemGetCudaDriverVersion_v2,
    nvmlDeviceGetCount_v2,
    nvmlDeviceGetHandleByIndex_v2,
    nvmlDeviceGetName,
    nvmlDeviceGetUUID,
    nvmlDeviceGetIndex,
    nvmlDeviceGetMemoryInfo,
    nvmlDeviceGetMemoryInfo_v2,
    nvmlDeviceGetComputeRunningProcesses_v3,
    nvmlDeviceGetGraphicsRunningProcesses_v3,
);

static CALLS: [AtomicU64; Sym::ALL.len()] = [const { AtomicU64::new(0) }; Sym::ALL.len()];

/// Counts one call of `sym` (every call, whatever it returns).
pub(crate) fn hit(sym: Sym) {
    CALLS[sym as usize].fetch_add(1, Ordering::Relaxed);
}

/// The calls counted so far for the symbol named `name`, or `None` for a name the fake does not
/// export.
pub(crate) fn count(name: &[u8]) -> Option<u64> {
    Sym::ALL
        .iter()
        .find(|sym| sym.name().as_bytes() == name)
        .map(|&sym| CALLS[sym as usize].load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_indexed_by_symbol() {
        for (i, &sym) in Sym::ALL.iter().enumerate() {
            assert_eq!(sym as usize, i);
        }
        let before = count(b"nvmlDeviceGetIndex").unwrap();
        hit(Sym::nvmlDeviceGetIndex);
        assert!(count(b"nvmlDeviceGetIndex").unwrap() > before);
        assert_eq!(count(b"nvmlDeviceGetIndexx"), None);
        assert_eq!(count(b""), None);
    }
}
