//! A scripted test double of NVIDIA's `libnvidia-ml.so` (NVML).
//!
//! oomscope's collector reads GPU memory through `nvml-wrapper` 0.13.0, which `dlopen`s NVML at
//! run time. CI has no GPU, so tests build this crate as `libfake_nvml.so` and hand its path to
//! `Nvml::builder().lib_path(..).init()`. The fake is a hardware boundary double: it exports the
//! real C symbols with the real signatures and struct layouts (taken from `nvml-wrapper-sys`
//! 0.10.0, the bindings the wrapper itself uses) and follows NVML's documented contracts for
//! them; only the *values* come from a script.
//!
//! # Exported symbols
//!
//! `nvmlInit_v2`, `nvmlInitWithFlags`, `nvmlShutdown`, `nvmlErrorString`,
//! `nvmlSystemGetDriverVersion`, `nvmlSystemGetCudaDriverVersion`,
//! `nvmlSystemGetCudaDriverVersion_v2`, `nvmlDeviceGetCount_v2`,
//! `nvmlDeviceGetHandleByIndex_v2`, `nvmlDeviceGetName`, `nvmlDeviceGetUUID`,
//! `nvmlDeviceGetIndex`, `nvmlDeviceGetMemoryInfo`, `nvmlDeviceGetMemoryInfo_v2`,
//! `nvmlDeviceGetComputeRunningProcesses_v3`, `nvmlDeviceGetGraphicsRunningProcesses_v3`, and
//! two test helpers, `oomscope_fake_nvml_calls` and `oomscope_fake_nvml_last_init_error`.
//! Everything else is absent, so `nvml-wrapper` reports `FailedToLoadSymbol` for it when (and
//! only when) it is called.
//!
//! # Lifecycle
//!
//! Like the real library, initialization is reference counted: every successful `nvmlInit_v2`
//! (or `nvmlInitWithFlags`, whose flags are accepted and ignored) needs its own `nvmlShutdown`,
//! and every other query returns `NVML_ERROR_UNINITIALIZED` while the count is zero (`nvmlShutdown`
//! too). The init that takes the count from 0 to 1 reads the script and starts the script's
//! clock; nested inits reuse both. A failed init leaves the count unchanged.
//!
//! # The script
//!
//! The environment variable `OOMSCOPE_FAKE_NVML_SCRIPT` names a JSON file. Unset or empty: one
//! idle default device (an "NVIDIA H100 80GB HBM3", uuid `GPU-fake-0`, 80 GiB total, 512 MiB
//! reserved, nothing used, no processes). Unreadable or invalid (bad JSON, unknown field, a
//! string longer than NVML's buffer for it, a used schedule exceeding `total - reserved`, ...):
//! `nvmlInit_v2` returns `NVML_ERROR_UNKNOWN`, and `oomscope_fake_nvml_last_init_error` says why.
//!
//! ```json
//! {
//!   "driver_version": "580.65.06",
//!   "cuda_driver_version": 13000,
//!   "init_error": null,
//!   "devices": [
//!     {
//!       "name": "NVIDIA H100 80GB HBM3",
//!       "uuid": "GPU-fake-0",
//!       "total_bytes": 85899345920,
//!       "reserved_bytes": 536870912,
//!       "used_bytes": [[0, 1073741824], [2000, 10737418240]],
//!       "processes": [
//!         { "match": "children_of_caller", "used_bytes": [[0, 536870912], [2000, 9663676416]] },
//!         { "match": { "pid": 1234 }, "used_bytes": 1048576 },
//!         { "match": { "rank": 1 }, "used_bytes": 3221225472 }
//!       ]
//!     }
//!   ]
//! }
//! ```
//!
//! - `driver_version` (default `"580.65.06"`, under 80 bytes) and `cuda_driver_version`
//!   (default `13000`, i.e. 13.0, the `1000 * major + 10 * minor` encoding).
//! - `init_error` (default `null`): a non-zero `nvmlReturn_t` that `nvmlInit_v2` returns instead
//!   of succeeding, e.g. `9` (`NVML_ERROR_DRIVER_NOT_LOADED`) for the no-driver path.
//! - `devices` (default `[]`, at most 64): `name` (under 96 bytes), `uuid` (under 96 bytes,
//!   unique) and `total_bytes` are required; `reserved_bytes` defaults to 0, `used_bytes` to 0,
//!   `processes` to `[]`. Device `i` has index `i`.
//! - A *schedule* (`used_bytes`) is either a number (constant) or `[ms, bytes]` points with
//!   non-decreasing times up to 10^12 ms: `ms` counts from the script's clock start (the init
//!   that read it, on a monotonic clock), values are linearly interpolated between points (exact
//!   integer arithmetic, nanosecond resolution), the first value is held before the first point
//!   and the last after the last point, and two points at the same time make a step.
//! - `processes`: rules for `nvmlDeviceGetComputeRunningProcesses_v3`. `"children_of_caller"`
//!   lists every live process whose parent is the process that loaded the fake (found by
//!   scanning `/proc/*/stat`; zombies excluded); `{"pid": N}` lists `N` while it is alive;
//!   `{"rank": N}` lists the live processes started with `RANK=N` whose parent was not (a rank,
//!   not its forked workers: a launcher's ranks have pids no script can know). Each
//!   listed process reports the rule's scheduled bytes, with `gpuInstanceId` and
//!   `computeInstanceId` `0xFFFFFFFF` (no MIG), in ascending pid order per rule, a pid matched by
//!   several rules listed once (first rule wins). The fake does not tie these bytes to the
//!   device's `used_bytes`; keeping them consistent is the script's job.
//!
//! # Memory semantics
//!
//! `used_bytes` is memory *allocated* on the device, which is what `nvmlMemory_v2_t.used`
//! reports. Although `nvml.h` carries a note that v2 `used` "also includes" `reserved`, its field
//! documentation says `used` is "Allocated device memory" and `reserved` is memory "reserved for
//! system use (driver or firmware)", and real drivers behave that way: v2 `used` excludes the
//! reserve (what `nvidia-smi` shows as Used), while v1 `nvmlMemory_t.used` is documented as the
//! "Sum of Reserved and Allocated device memory". So:
//!
//! - v2 (`nvmlDeviceGetMemoryInfo_v2`): `total`, `reserved`, `used = used_bytes(t)`,
//!   `free = total - reserved - used`; `version` must be `NVML_STRUCT_VERSION(Memory, 2)`
//!   (`sizeof(nvmlMemory_v2_t) | 2 << 24`, what the wrapper sets), otherwise
//!   `NVML_ERROR_ARGUMENT_VERSION_MISMATCH`.
//! - v1 (`nvmlDeviceGetMemoryInfo`): `total`, the same `free`, `used = used_bytes(t) + reserved`,
//!   so `used + free = total` as the v1 documentation states.
//!
//! # Handles
//!
//! `nvmlDevice_t` values are addresses inside a private static table, one slot per possible
//! device; a handle is valid while the library is initialized and its slot is below the
//! scripted device count. Null, foreign or stale handles give `NVML_ERROR_INVALID_ARGUMENT`.
//!
//! # Test helpers
//!
//! - `uint64_t oomscope_fake_nvml_calls(const char *symbol)`: how many times the named NVML
//!   symbol has been called since the library was loaded (every call counts, whatever it
//!   returned); `UINT64_MAX` for a null pointer or a name the fake does not export.
//! - `uint64_t oomscope_fake_nvml_last_init_error(char *buf, unsigned int len)`: copies the
//!   reason the last failed `nvmlInit` failed (empty after a successful one) into `buf`,
//!   truncated to fit and NUL-terminated, and returns its full length in bytes.
//!
//! `dlclose` of the last handle really unloads the fake, so counters, the init count and the
//! script's clock all start over on the next load: hold a handle while reading counters.

mod calls;
mod procs;
mod script;

use std::collections::HashSet;
use std::ffi::{CStr, c_char, c_int, c_uint};
use std::ptr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlMemory_t, nvmlMemory_v2_t, nvmlProcessInfo_t,
    nvmlReturn_enum_NVML_ERROR_ALREADY_INITIALIZED as ALREADY_INITIALIZED,
    nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH as ARGUMENT_VERSION_MISMATCH,
    nvmlReturn_enum_NVML_ERROR_CORRUPTED_INFOROM as CORRUPTED_INFOROM,
    nvmlReturn_enum_NVML_ERROR_DEPRECATED as DEPRECATED,
    nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED as DRIVER_NOT_LOADED,
    nvmlReturn_enum_NVML_ERROR_FREQ_NOT_SUPPORTED as FREQ_NOT_SUPPORTED,
    nvmlReturn_enum_NVML_ERROR_FUNCTION_NOT_FOUND as FUNCTION_NOT_FOUND,
    nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST as GPU_IS_LOST,
    nvmlReturn_enum_NVML_ERROR_GPU_NOT_FOUND as GPU_NOT_FOUND,
    nvmlReturn_enum_NVML_ERROR_IN_USE as IN_USE,
    nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_POWER as INSUFFICIENT_POWER,
    nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES as INSUFFICIENT_RESOURCES,
    nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE as INSUFFICIENT_SIZE,
    nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT as INVALID_ARGUMENT,
    nvmlReturn_enum_NVML_ERROR_INVALID_STATE as INVALID_STATE,
    nvmlReturn_enum_NVML_ERROR_IRQ_ISSUE as IRQ_ISSUE,
    nvmlReturn_enum_NVML_ERROR_LIB_RM_VERSION_MISMATCH as LIB_RM_VERSION_MISMATCH,
    nvmlReturn_enum_NVML_ERROR_LIBRARY_NOT_FOUND as LIBRARY_NOT_FOUND,
    nvmlReturn_enum_NVML_ERROR_MEMORY as MEMORY, nvmlReturn_enum_NVML_ERROR_NO_DATA as NO_DATA,
    nvmlReturn_enum_NVML_ERROR_NO_PERMISSION as NO_PERMISSION,
    nvmlReturn_enum_NVML_ERROR_NOT_FOUND as NOT_FOUND,
    nvmlReturn_enum_NVML_ERROR_NOT_READY as NOT_READY,
    nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED as NOT_SUPPORTED,
    nvmlReturn_enum_NVML_ERROR_OPERATING_SYSTEM as OPERATING_SYSTEM,
    nvmlReturn_enum_NVML_ERROR_RESET_REQUIRED as RESET_REQUIRED,
    nvmlReturn_enum_NVML_ERROR_RESET_TYPE_NOT_SUPPORTED as RESET_TYPE_NOT_SUPPORTED,
    nvmlReturn_enum_NVML_ERROR_TIMEOUT as TIMEOUT,
    nvmlReturn_enum_NVML_ERROR_UNINITIALIZED as UNINITIALIZED,
    nvmlReturn_enum_NVML_ERROR_UNKNOWN as UNKNOWN,
    nvmlReturn_enum_NVML_ERROR_VGPU_ECC_NOT_SUPPORTED as VGPU_ECC_NOT_SUPPORTED,
    nvmlReturn_enum_NVML_SUCCESS as SUCCESS, nvmlReturn_t,
};

use calls::Sym;
use script::{DeviceScript, MAX_DEVICES, Match, Script};

/// `NVML_STRUCT_VERSION(Memory, 2)` from `nvml.h`: the struct's size with the version number in
/// the top byte. nvml-wrapper 0.13.0 sets exactly this before calling
/// `nvmlDeviceGetMemoryInfo_v2`.
const NVML_MEMORY_V2: c_uint = (size_of::<nvmlMemory_v2_t>() as c_uint) | (2 << 24);

/// What `gpuInstanceId` and `computeInstanceId` hold when MIG is not enabled.
const NO_MIG_ID: c_uint = 0xFFFF_FFFF;

/// One init/shutdown lifetime: the script it read and when its clock started.
#[derive(Debug)]
struct Session {
    script: Script,
    started: Instant,
}

impl Session {
    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

#[derive(Debug)]
struct Global {
    refcount: u32,
    session: Option<Arc<Session>>,
    last_init_error: String,
}

static GLOBAL: Mutex<Global> = Mutex::new(Global {
    refcount: 0,
    session: None,
    last_init_error: String::new(),
});

/// Device handles are addresses of these bytes; the byte values are never used.
static DEVICE_SLOTS: [u8; MAX_DEVICES] = [0; MAX_DEVICES];

fn global() -> MutexGuard<'static, Global> {
    // Nothing here can panic while holding the lock, but never let poisoning turn into a panic
    // across the C boundary.
    GLOBAL.lock().unwrap_or_else(PoisonError::into_inner)
}

fn session() -> Result<Arc<Session>, nvmlReturn_t> {
    let global = global();
    match (&global.session, global.refcount) {
        (Some(session), 1..) => Ok(Arc::clone(session)),
        _ => Err(UNINITIALIZED),
    }
}

fn handle_of(index: usize) -> nvmlDevice_t {
    DEVICE_SLOTS.as_ptr().wrapping_add(index).cast_mut().cast()
}

fn index_of(handle: nvmlDevice_t) -> Option<usize> {
    let offset = handle.addr().wrapping_sub(DEVICE_SLOTS.as_ptr().addr());
    (offset < MAX_DEVICES).then_some(offset)
}

/// Runs `f` on the device behind `handle`, after the checks every device query makes.
fn with_device(
    handle: nvmlDevice_t,
    f: impl FnOnce(&Session, usize, &DeviceScript) -> nvmlReturn_t,
) -> nvmlReturn_t {
    let session = match session() {
        Ok(session) => session,
        Err(code) => return code,
    };
    match index_of(handle).and_then(|i| Some((i, session.script.devices.get(i)?))) {
        Some((index, device)) => f(&session, index, device),
        None => INVALID_ARGUMENT,
    }
}

/// Copies `value` and its terminating NUL into the caller's `length`-byte buffer.
///
/// # Safety
/// `buffer` is null or valid for `length` bytes of writes.
unsafe fn write_c_string(value: &str, buffer: *mut c_char, length: c_uint) -> nvmlReturn_t {
    if buffer.is_null() {
        return INVALID_ARGUMENT;
    }
    let bytes = value.as_bytes();
    if (length as usize) <= bytes.len() {
        return INSUFFICIENT_SIZE;
    }
    // SAFETY: the buffer holds `length > bytes.len()` bytes, and `value` is our own string.
    unsafe {
        ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buffer, bytes.len());
        buffer.add(bytes.len()).write(0);
    }
    SUCCESS
}

/// Writes `value` through `out` unless it is null.
///
/// # Safety
/// `out` is null or valid for a write of `T`.
unsafe fn write_out<T>(out: *mut T, value: T) -> nvmlReturn_t {
    if out.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: non-null, and valid per the caller's contract.
    unsafe { out.write(value) };
    SUCCESS
}

fn init() -> nvmlReturn_t {
    let mut global = global();
    if global.refcount > 0 {
        global.refcount = global.refcount.saturating_add(1);
        return SUCCESS;
    }
    match script::load_from_env() {
        Err(reason) => {
            global.last_init_error = reason;
            UNKNOWN
        }
        Ok(Script {
            init_error: Some(code),
            ..
        }) => {
            global.last_init_error = format!("the script's init_error is {code}");
            code
        }
        Ok(script) => {
            global.session = Some(Arc::new(Session {
                script,
                started: Instant::now(),
            }));
            global.refcount = 1;
            global.last_init_error.clear();
            SUCCESS
        }
    }
}

/// Initializes the library (reference counted; see the crate documentation).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    calls::hit(Sym::nvmlInit_v2);
    init()
}

/// Same as `nvmlInit_v2`; the flags (`NVML_INIT_FLAG_NO_GPUS`, `NVML_INIT_FLAG_NO_ATTACH`) change
/// nothing here.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    calls::hit(Sym::nvmlInitWithFlags);
    init()
}

/// Drops one reference taken by an init; the last one ends the session.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    calls::hit(Sym::nvmlShutdown);
    let mut global = global();
    if global.refcount == 0 {
        return UNINITIALIZED;
    }
    global.refcount -= 1;
    if global.refcount == 0 {
        global.session = None;
    }
    SUCCESS
}

/// A static description of `result` (after each code's comment in `nvml.h`). Works
/// without initialization, like the real one.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    calls::hit(Sym::nvmlErrorString);
    let text: &'static CStr = match result {
        SUCCESS => c"The operation was successful",
        UNINITIALIZED => c"NVML was not first initialized with nvmlInit()",
        INVALID_ARGUMENT => c"A supplied argument is invalid",
        NOT_SUPPORTED => c"The requested operation is not available on target device",
        NO_PERMISSION => c"The current user does not have permission for operation",
        ALREADY_INITIALIZED => c"Deprecated: Multiple initializations are now allowed through ref counting",
        NOT_FOUND => c"A query to find an object was unsuccessful",
        INSUFFICIENT_SIZE => c"An input argument is not large enough",
        INSUFFICIENT_POWER => c"A device's external power cables are not properly attached",
        DRIVER_NOT_LOADED => c"NVIDIA driver is not loaded",
        TIMEOUT => c"User provided timeout passed",
        IRQ_ISSUE => c"NVIDIA Kernel detected an interrupt issue with a GPU",
        LIBRARY_NOT_FOUND => c"NVML Shared Library couldn't be found or loaded",
        FUNCTION_NOT_FOUND => c"Local version of NVML doesn't implement this function",
        CORRUPTED_INFOROM => c"infoROM is corrupted",
        GPU_IS_LOST => c"The GPU has fallen off the bus or has otherwise become inaccessible",
        RESET_REQUIRED => c"The GPU requires a reset before it can be used again",
        OPERATING_SYSTEM => c"The GPU control device has been blocked by the operating system/cgroups",
        LIB_RM_VERSION_MISMATCH => c"RM detects a driver/library version mismatch",
        IN_USE => c"An operation cannot be performed because the GPU is currently in use",
        MEMORY => c"Insufficient memory",
        NO_DATA => c"No data",
        VGPU_ECC_NOT_SUPPORTED => c"The requested vgpu operation is not available on target device, because ECC is enabled",
        INSUFFICIENT_RESOURCES => c"Ran out of critical resources, other than memory",
        // nvml.h really does describe this code with the previous one's words.
        FREQ_NOT_SUPPORTED => c"Ran out of critical resources, other than memory",
        ARGUMENT_VERSION_MISMATCH => c"The provided version is invalid/unsupported",
        DEPRECATED => c"The requested functionality has been deprecated",
        NOT_READY => c"The system is not ready for the request",
        GPU_NOT_FOUND => c"No GPUs were found",
        INVALID_STATE => c"Resource not in correct state to perform requested operation",
        RESET_TYPE_NOT_SUPPORTED => c"Reset not supported for given device/parameters",
        _ => c"An internal driver error occurred",
    };
    text.as_ptr()
}

/// Writes the scripted driver version.
///
/// # Safety
/// `version` is null or valid for `length` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    calls::hit(Sym::nvmlSystemGetDriverVersion);
    match session() {
        // SAFETY: forwarded from the caller.
        Ok(session) => unsafe { write_c_string(&session.script.driver_version, version, length) },
        Err(code) => code,
    }
}

fn cuda_driver_version(out: *mut c_int) -> nvmlReturn_t {
    match session() {
        // SAFETY: the exported callers require `out` to be null or writable.
        Ok(session) => unsafe { write_out(out, session.script.cuda_driver_version) },
        Err(code) => code,
    }
}

/// Writes the scripted CUDA driver version (`1000 * major + 10 * minor`).
///
/// # Safety
/// `cuda_driver_version` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(
    cuda_driver_version_out: *mut c_int,
) -> nvmlReturn_t {
    calls::hit(Sym::nvmlSystemGetCudaDriverVersion);
    cuda_driver_version(cuda_driver_version_out)
}

/// Same as `nvmlSystemGetCudaDriverVersion` (what nvml-wrapper's `sys_cuda_driver_version`
/// calls).
///
/// # Safety
/// `cuda_driver_version` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(
    cuda_driver_version_out: *mut c_int,
) -> nvmlReturn_t {
    calls::hit(Sym::nvmlSystemGetCudaDriverVersion_v2);
    cuda_driver_version(cuda_driver_version_out)
}

/// Writes the number of scripted devices.
///
/// # Safety
/// `device_count` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(device_count: *mut c_uint) -> nvmlReturn_t {
    calls::hit(Sym::nvmlDeviceGetCount_v2);
    match session() {
        // The count is at most MAX_DEVICES.
        // SAFETY: forwarded from the caller.
        Ok(session) => unsafe { write_out(device_count, session.script.devices.len() as c_uint) },
        Err(code) => code,
    }
}

/// Writes the handle of device `index`; `NVML_ERROR_INVALID_ARGUMENT` past the last device.
///
/// # Safety
/// `device` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    calls::hit(Sym::nvmlDeviceGetHandleByIndex_v2);
    let session = match session() {
        Ok(session) => session,
        Err(code) => return code,
    };
    let index = index as usize;
    if index >= session.script.devices.len() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: forwarded from the caller.
    unsafe { write_out(device, handle_of(index)) }
}

/// Writes the device's name.
///
/// # Safety
/// `name` is null or valid for `length` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: nvmlDevice_t,
    name: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    calls::hit(Sym::nvmlDeviceGetName);
    // SAFETY: forwarded from the caller.
    with_device(device, |_, _, d| unsafe {
        write_c_string(&d.name, name, length)
    })
}

/// Writes the device's UUID.
///
/// # Safety
/// `uuid` is null or valid for `length` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: nvmlDevice_t,
    uuid: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    calls::hit(Sym::nvmlDeviceGetUUID);
    // SAFETY: forwarded from the caller.
    with_device(device, |_, _, d| unsafe {
        write_c_string(&d.uuid, uuid, length)
    })
}

/// Writes the device's index.
///
/// # Safety
/// `index` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetIndex(
    device: nvmlDevice_t,
    index: *mut c_uint,
) -> nvmlReturn_t {
    calls::hit(Sym::nvmlDeviceGetIndex);
    // The index is below MAX_DEVICES.
    // SAFETY: forwarded from the caller.
    with_device(device, |_, i, _| unsafe { write_out(index, i as c_uint) })
}

/// v1 memory information: `used` includes the reserve (see the crate documentation).
///
/// # Safety
/// `memory` is null or valid for a write of `nvmlMemory_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_t,
) -> nvmlReturn_t {
    calls::hit(Sym::nvmlDeviceGetMemoryInfo);
    with_device(device, |session, _, d| {
        let m = d.memory_at(session.elapsed());
        let info = nvmlMemory_t {
            total: m.total,
            free: m.free,
            used: m.used_v1(),
        };
        // SAFETY: forwarded from the caller.
        unsafe { write_out(memory, info) }
    })
}

/// v2 memory information: `used` excludes `reserved` (see the crate documentation). The caller
/// must set `version` to `NVML_STRUCT_VERSION(Memory, 2)`.
///
/// # Safety
/// `memory` is null or valid for reads and writes of `nvmlMemory_v2_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    calls::hit(Sym::nvmlDeviceGetMemoryInfo_v2);
    with_device(device, |session, _, d| {
        if memory.is_null() {
            return INVALID_ARGUMENT;
        }
        // SAFETY: non-null and readable per the caller's contract. Only the version is read:
        // the rest is output.
        let version = unsafe { (&raw const (*memory).version).read() };
        if version != NVML_MEMORY_V2 {
            return ARGUMENT_VERSION_MISMATCH;
        }
        let m = d.memory_at(session.elapsed());
        let info = nvmlMemory_v2_t {
            version,
            total: m.total,
            reserved: m.reserved,
            free: m.free,
            used: m.used,
        };
        // SAFETY: forwarded from the caller.
        unsafe { write_out(memory, info) }
    })
}

/// The compute processes a device reports now, per its script's `processes` rules.
fn compute_processes(session: &Session, device: &DeviceScript) -> Vec<nvmlProcessInfo_t> {
    let elapsed = session.elapsed();
    let mut children = None;
    let mut seen = HashSet::new();
    let mut infos = Vec::new();
    for rule in &device.processes {
        let pids = match rule.matcher {
            Match::ChildrenOfCaller => children
                .get_or_insert_with(|| procs::live_children_of(std::process::id()))
                .clone(),
            Match::Pid(pid) => procs::is_live(pid).then_some(pid).into_iter().collect(),
            Match::Rank(rank) => procs::live_ranks(rank),
        };
        let used = rule.used_bytes.at(elapsed);
        for pid in pids {
            if seen.insert(pid) {
                infos.push(nvmlProcessInfo_t {
                    pid,
                    usedGpuMemory: used,
                    gpuInstanceId: NO_MIG_ID,
                    computeInstanceId: NO_MIG_ID,
                });
            }
        }
    }
    infos
}

/// NVML's array-query contract: `*info_count` is the capacity of `infos` on input. When the
/// processes fit, they are written and `*info_count` becomes their number (`NVML_SUCCESS`, also
/// with zero processes and a null array). When they do not (including a null array), nothing is
/// written, `*info_count` becomes the number needed, and the result is
/// `NVML_ERROR_INSUFFICIENT_SIZE`.
///
/// # Safety
/// `info_count` is null or valid for a read and a write; `infos` is null or valid for writes of
/// `*info_count` elements.
unsafe fn report_processes(
    found: &[nvmlProcessInfo_t],
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    if info_count.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: non-null and valid per the caller's contract.
    let capacity = if infos.is_null() {
        0
    } else {
        unsafe { info_count.read() }
    };
    // At most one entry per live process, far below c_uint::MAX.
    let needed = found.len() as c_uint;
    // SAFETY: as above.
    unsafe { info_count.write(needed) };
    if needed > capacity {
        return INSUFFICIENT_SIZE;
    }
    if needed > 0 {
        // SAFETY: `infos` is non-null (capacity > 0) and holds `capacity >= needed` elements.
        unsafe { ptr::copy_nonoverlapping(found.as_ptr(), infos, found.len()) };
    }
    SUCCESS
}

/// Lists the scripted compute processes (see the crate documentation and `report_processes`).
///
/// # Safety
/// `info_count` is null or valid for a read and a write; `infos` is null or valid for writes of
/// `*info_count` elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    calls::hit(Sym::nvmlDeviceGetComputeRunningProcesses_v3);
    with_device(device, |session, _, d| {
        let found = compute_processes(session, d);
        // SAFETY: forwarded from the caller.
        unsafe { report_processes(&found, info_count, infos) }
    })
}

/// Lists graphics processes: the fake never has any.
///
/// # Safety
/// As for `nvmlDeviceGetComputeRunningProcesses_v3`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    calls::hit(Sym::nvmlDeviceGetGraphicsRunningProcesses_v3);
    // SAFETY: forwarded from the caller.
    with_device(device, |_, _, _| unsafe {
        report_processes(&[], info_count, infos)
    })
}

/// Test helper: how many times the NVML symbol named `symbol` has been called since this
/// library was loaded; `u64::MAX` for a null pointer or a symbol the fake does not export.
///
/// # Safety
/// `symbol` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn oomscope_fake_nvml_calls(symbol: *const c_char) -> u64 {
    if symbol.is_null() {
        return u64::MAX;
    }
    // SAFETY: a NUL-terminated string per the caller's contract.
    let name = unsafe { CStr::from_ptr(symbol) };
    calls::count(name.to_bytes()).unwrap_or(u64::MAX)
}

/// Test helper: copies why the last `nvmlInit` failed (empty after a successful one) into
/// `buffer`, truncated to `length - 1` bytes and NUL-terminated, and returns the full length of
/// the reason in bytes.
///
/// # Safety
/// `buffer` is null or valid for `length` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn oomscope_fake_nvml_last_init_error(
    buffer: *mut c_char,
    length: c_uint,
) -> u64 {
    let global = global();
    let reason = global.last_init_error.as_bytes();
    if !buffer.is_null() && length > 0 {
        let n = reason.len().min(length as usize - 1);
        // SAFETY: the buffer holds `length > n` bytes.
        unsafe {
            ptr::copy_nonoverlapping(reason.as_ptr().cast::<c_char>(), buffer, n);
            buffer.add(n).write(0);
        }
    }
    reason.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_version_matches_what_nvml_wrapper_sets() {
        // nvml-wrapper 0.13.0, Device::memory_info:
        // (size_of::<nvmlMemory_v2_t>() | (2_usize << 24_usize)) as u32
        let wrapper = (size_of::<nvmlMemory_v2_t>() | (2_usize << 24_usize)) as u32;
        assert_eq!(NVML_MEMORY_V2, wrapper);
        // The value nvml.h's nvmlMemory_v2 takes on 64-bit Linux.
        assert_eq!(NVML_MEMORY_V2, 0x0200_0028);
    }

    #[test]
    fn handles_round_trip_and_reject_foreign_pointers() {
        for i in [0, 1, MAX_DEVICES - 1] {
            assert_eq!(index_of(handle_of(i)), Some(i));
        }
        assert_eq!(index_of(ptr::null_mut()), None);
        assert_eq!(index_of(handle_of(MAX_DEVICES)), None);
        let elsewhere = 0_u8;
        assert_eq!(index_of((&raw const elsewhere).cast_mut().cast()), None);
    }

    #[test]
    fn strings_need_room_for_the_nul() {
        let mut buffer = [0x55 as c_char; 8];
        let write = |buffer: &mut [c_char], length: c_uint| {
            // SAFETY: `length` never exceeds the buffer.
            unsafe { write_c_string("abc", buffer.as_mut_ptr(), length) }
        };
        assert_eq!(write(&mut buffer, 3), INSUFFICIENT_SIZE);
        assert_eq!(buffer[0], 0x55);
        assert_eq!(write(&mut buffer, 4), SUCCESS);
        // SAFETY: NUL-terminated by the call above.
        assert_eq!(unsafe { CStr::from_ptr(buffer.as_ptr()) }, c"abc");
        // SAFETY: null is allowed.
        assert_eq!(
            unsafe { write_c_string("abc", ptr::null_mut(), 8) },
            INVALID_ARGUMENT
        );
    }

    fn info(pid: u32) -> nvmlProcessInfo_t {
        nvmlProcessInfo_t {
            pid,
            usedGpuMemory: u64::from(pid) * 10,
            gpuInstanceId: NO_MIG_ID,
            computeInstanceId: NO_MIG_ID,
        }
    }

    #[test]
    fn process_arrays_follow_the_nvml_size_contract() {
        let found = [info(1), info(2)];
        let mut out = [info(0); 3];
        let report = |count: &mut c_uint, out: *mut nvmlProcessInfo_t| {
            // SAFETY: `out` is null or the 3-element array, and `count` never exceeds 3.
            unsafe { report_processes(&found, count, out) }
        };

        // The count query: null array.
        let mut count = 0;
        assert_eq!(report(&mut count, ptr::null_mut()), INSUFFICIENT_SIZE);
        assert_eq!(count, 2);
        // A null array whatever the count says.
        let mut count = 3;
        assert_eq!(report(&mut count, ptr::null_mut()), INSUFFICIENT_SIZE);
        assert_eq!(count, 2);
        // Too small: nothing written.
        let mut count = 1;
        assert_eq!(report(&mut count, out.as_mut_ptr()), INSUFFICIENT_SIZE);
        assert_eq!(count, 2);
        assert_eq!(out[0].pid, 0);
        // Room to spare.
        let mut count = 3;
        assert_eq!(report(&mut count, out.as_mut_ptr()), SUCCESS);
        assert_eq!(count, 2);
        assert_eq!((out[0].pid, out[1].pid, out[2].pid), (1, 2, 0));
        assert_eq!(out[1].usedGpuMemory, 20);
        // No processes: success with a null array.
        let mut count = 0;
        // SAFETY: null array.
        assert_eq!(
            unsafe { report_processes(&[], &mut count, ptr::null_mut()) },
            SUCCESS
        );
        assert_eq!(count, 0);
        // A null count.
        // SAFETY: null pointers are allowed.
        assert_eq!(
            unsafe { report_processes(&found, ptr::null_mut(), ptr::null_mut()) },
            INVALID_ARGUMENT
        );
    }

    #[test]
    fn every_known_code_has_its_own_description() {
        let codes = [
            SUCCESS,
            UNINITIALIZED,
            INVALID_ARGUMENT,
            DRIVER_NOT_LOADED,
            ARGUMENT_VERSION_MISMATCH,
            UNKNOWN,
        ];
        let texts: HashSet<&CStr> = codes
            .iter()
            // SAFETY: nvmlErrorString returns static NUL-terminated strings.
            .map(|&code| unsafe { CStr::from_ptr(nvmlErrorString(code)) })
            .collect();
        assert_eq!(texts.len(), codes.len());
        // SAFETY: as above.
        let unknown = unsafe { CStr::from_ptr(nvmlErrorString(12345)) };
        // SAFETY: as above.
        assert_eq!(unknown, unsafe { CStr::from_ptr(nvmlErrorString(UNKNOWN)) });
    }
}
