//! Drives `libfake_nvml.so` through the real nvml-wrapper 0.13.0, the way the collector does,
//! and through the raw `NvmlLib` bindings the wrapper is built on for the C contracts the
//! wrapper never exercises.
//!
//! Nothing extra is built: cargo builds this package's library (cdylib and rlib in one rustc
//! run) before its integration tests, writing `libfake_nvml.so` into `<target>/<profile>/deps/`,
//! the directory holding this test binary. That also holds for another package's tests when
//! they list this package as a dev-dependency. (A cdylib-only library would *not* be built for
//! integration tests: that is why the crate is also an rlib.)

use std::ffi::{CStr, c_char, c_int, c_uint};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper_sys::bindings::{
    NvmlLib, nvmlDevice_t, nvmlMemory_t, nvmlMemory_v2_t, nvmlProcessInfo_t,
    nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH as ARGUMENT_VERSION_MISMATCH,
    nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE as INSUFFICIENT_SIZE,
    nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT as INVALID_ARGUMENT,
    nvmlReturn_enum_NVML_ERROR_UNINITIALIZED as UNINITIALIZED,
    nvmlReturn_enum_NVML_ERROR_UNKNOWN as UNKNOWN, nvmlReturn_enum_NVML_SUCCESS as SUCCESS,
};

use oomscope_format::units::{GIB, MIB};
/// The version nvml-wrapper 0.13.0 writes into `nvmlMemory_v2_t` (`NVML_STRUCT_VERSION`).
const MEMORY_V2: c_uint = (size_of::<nvmlMemory_v2_t>() | (2 << 24)) as c_uint;

/// The cdylib cargo built, next to this test binary in `<target>/<profile>/deps/`.
fn fake_nvml_path() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let lib = exe
        .parent()
        .expect("the test binary lives in <target>/<profile>/deps")
        .join("libfake_nvml.so");
    assert!(
        lib.is_file(),
        "{} is missing; run through `cargo test -p oomscope-fake-nvml`",
        lib.display()
    );
    lib
}

static SERIAL: Mutex<()> = Mutex::new(());
static NEXT_DIR: AtomicU32 = AtomicU32::new(0);

/// One test's script. The script variable and the fake's init count are process-wide, so tests
/// hold this (and run one at a time) until everything they loaded is dropped.
struct Scenario {
    dir: PathBuf,
    _serial: MutexGuard<'static, ()>,
}

impl Scenario {
    fn new(script: Option<&str>) -> Self {
        let serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        let dir = std::env::temp_dir().join(format!(
            "oomscope-fake-nvml-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let scenario = Self {
            dir,
            _serial: serial,
        };
        match script {
            Some(text) => {
                let path = scenario.dir.join("script.json");
                std::fs::write(&path, text).unwrap();
                scenario.point_at(&path);
            }
            // SAFETY: tests touching the environment are serialized by SERIAL, and nothing else
            // in this process reads it concurrently.
            None => unsafe { std::env::remove_var("OOMSCOPE_FAKE_NVML_SCRIPT") },
        }
        scenario
    }

    fn point_at(&self, path: &std::path::Path) {
        // SAFETY: as in `new`.
        unsafe { std::env::set_var("OOMSCOPE_FAKE_NVML_SCRIPT", path) };
    }

    fn init(&self) -> Result<Nvml, NvmlError> {
        let lib = fake_nvml_path();
        Nvml::builder().lib_path(lib.as_os_str()).init()
    }

    /// The raw bindings nvml-wrapper uses, without calling any init.
    fn raw(&self) -> NvmlLib {
        // SAFETY: loading the fake runs no initialization code with preconditions.
        unsafe { NvmlLib::new(fake_nvml_path()) }.expect("dlopen libfake_nvml.so")
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The test-side model of a schedule: linear between points, held outside them.
fn ramp(points: &[(u64, u64)], at: Duration) -> f64 {
    let t = at.as_secs_f64() * 1000.0;
    let (first, last) = (points[0], points[points.len() - 1]);
    if t <= first.0 as f64 {
        return first.1 as f64;
    }
    for pair in points.windows(2) {
        let ((t0, v0), (t1, v1)) = (pair[0], pair[1]);
        if t < t1 as f64 {
            let (t0, v0, t1, v1) = (t0 as f64, v0 as f64, t1 as f64, v1 as f64);
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0);
        }
    }
    last.1 as f64
}

/// Brackets the fake's clock: it started between `init_start` and `init_end`.
#[derive(Clone, Copy)]
struct Clock {
    init_start: Instant,
    init_end: Instant,
}

impl Clock {
    /// Runs `query` and asserts the value it reports matches the rising schedule `points` at
    /// some moment the query could have been answered (plus rounding).
    fn check_rising(&self, points: &[(u64, u64)], what: &str, query: impl FnOnce() -> u64) -> u64 {
        let start = Instant::now();
        let value = query();
        let end = Instant::now();
        let earliest = start.saturating_duration_since(self.init_end);
        let latest = end.duration_since(self.init_start);
        let (low, high) = (ramp(points, earliest) - 1.0, ramp(points, latest) + 1.0);
        assert!(
            low <= value as f64 && value as f64 <= high,
            "{what}: {value} not in [{low}, {high}] (between {earliest:?} and {latest:?} after init)"
        );
        value
    }
}

fn init_timed(scenario: &Scenario) -> (Nvml, Clock) {
    let init_start = Instant::now();
    let nvml = scenario.init().expect("init");
    let init_end = Instant::now();
    (
        nvml,
        Clock {
            init_start,
            init_end,
        },
    )
}

type CallsFn = unsafe extern "C" fn(*const c_char) -> u64;
type LastErrorFn = unsafe extern "C" fn(*mut c_char, c_uint) -> u64;

/// `oomscope_fake_nvml_calls(name)` in the loaded fake.
fn calls(lib: &NvmlLib, name: &CStr) -> u64 {
    // SAFETY: the symbol has this signature, and `name` is NUL-terminated.
    unsafe {
        let f = lib
            .__library
            .get::<CallsFn>(b"oomscope_fake_nvml_calls\0")
            .unwrap();
        f(name.as_ptr())
    }
}

/// `oomscope_fake_nvml_last_init_error` in the loaded fake.
fn last_init_error(lib: &NvmlLib) -> String {
    let mut buffer = vec![0 as c_char; 1024];
    // SAFETY: the symbol has this signature, and the buffer holds `len` bytes.
    let full = unsafe {
        let f = lib
            .__library
            .get::<LastErrorFn>(b"oomscope_fake_nvml_last_init_error\0")
            .unwrap();
        f(buffer.as_mut_ptr(), buffer.len() as c_uint)
    };
    // SAFETY: NUL-terminated by the call.
    let text = unsafe { CStr::from_ptr(buffer.as_ptr()) };
    assert_eq!(full, text.to_bytes().len() as u64, "message truncated");
    text.to_string_lossy().into_owned()
}

/// Kills and reaps the child when dropped, so a failing test leaves no process behind.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Long enough that a slow machine still reads inside the ramp; the checks hold either way.
const USED_RAMP: [(u64, u64); 2] = [(0, GIB), (10_000, 10 * GIB)];
const PROCESS_RAMP: [(u64, u64); 2] = [(0, 512 * MIB), (10_000, 9 * GIB)];

fn two_device_script() -> String {
    format!(
        r#"{{
            "driver_version": "580.65.06",
            "cuda_driver_version": 13000,
            "init_error": null,
            "devices": [
                {{
                    "name": "NVIDIA H100 80GB HBM3",
                    "uuid": "GPU-fake-0",
                    "total_bytes": {total},
                    "reserved_bytes": {reserved},
                    "used_bytes": [[{t0}, {u0}], [{t1}, {u1}]],
                    "processes": [
                        {{ "match": "children_of_caller", "used_bytes": [[{pt0}, {p0}], [{pt1}, {p1}]] }},
                        {{ "match": {{ "pid": {me} }}, "used_bytes": {mib} }},
                        {{ "match": {{ "pid": 4000000000 }}, "used_bytes": {mib} }}
                    ]
                }},
                {{
                    "name": "NVIDIA A100-SXM4-40GB",
                    "uuid": "GPU-fake-1",
                    "total_bytes": {a100},
                    "reserved_bytes": {a100_reserved},
                    "used_bytes": {a100_used}
                }}
            ]
        }}"#,
        total = 80 * GIB,
        reserved = 512 * MIB,
        t0 = USED_RAMP[0].0,
        t1 = USED_RAMP[1].0,
        u0 = USED_RAMP[0].1,
        u1 = USED_RAMP[1].1,
        pt0 = PROCESS_RAMP[0].0,
        pt1 = PROCESS_RAMP[1].0,
        p0 = PROCESS_RAMP[0].1,
        p1 = PROCESS_RAMP[1].1,
        me = std::process::id(),
        mib = MIB,
        a100 = 40 * GIB,
        a100_reserved = 256 * MIB,
        a100_used = 3 * GIB,
    )
}

#[test]
fn reports_the_scripted_machine_through_nvml_wrapper() {
    let scenario = Scenario::new(Some(&two_device_script()));
    let (nvml, clock) = init_timed(&scenario);

    assert_eq!(nvml.sys_driver_version().unwrap(), "580.65.06");
    assert_eq!(nvml.sys_cuda_driver_version().unwrap(), 13000);
    assert_eq!(nvml.device_count().unwrap(), 2);

    let h100 = nvml.device_by_index(0).unwrap();
    let a100 = nvml.device_by_index(1).unwrap();
    assert_eq!(h100.name().unwrap(), "NVIDIA H100 80GB HBM3");
    assert_eq!(h100.uuid().unwrap(), "GPU-fake-0");
    assert_eq!(h100.index().unwrap(), 0);
    assert_eq!(a100.name().unwrap(), "NVIDIA A100-SXM4-40GB");
    assert_eq!(a100.uuid().unwrap(), "GPU-fake-1");
    assert_eq!(a100.index().unwrap(), 1);
    assert!(matches!(
        nvml.device_by_index(2),
        Err(NvmlError::InvalidArg)
    ));

    // Two readings ~200 ms apart, each where the schedule was while it was answered.
    let mut readings = Vec::new();
    for _ in 0..2 {
        let mut info = None;
        clock.check_rising(&USED_RAMP, "v2 used", || {
            let m = h100.memory_info().unwrap();
            let used = m.used;
            info = Some(m);
            used
        });
        let m = info.unwrap();
        assert_eq!(m.total, 80 * GIB);
        assert_eq!(m.reserved, 512 * MIB);
        assert_eq!(m.free, m.total - m.reserved - m.used);
        assert_eq!(m.version, MEMORY_V2);
        readings.push(m.used);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(readings[1] > readings[0], "{readings:?}");

    let a100_v2 = a100.memory_info().unwrap();
    assert_eq!(
        (a100_v2.total, a100_v2.reserved, a100_v2.used, a100_v2.free),
        (40 * GIB, 256 * MIB, 3 * GIB, 40 * GIB - 256 * MIB - 3 * GIB)
    );

    // The v1 struct counts the reserve as used, as real drivers do; free is the same.
    let v1 = nvml.lib().nvmlDeviceGetMemoryInfo.as_ref().unwrap();
    // SAFETY: valid handles and out-pointers.
    let (a100_v1, h100_v1) = unsafe {
        let mut a100_v1: nvmlMemory_t = std::mem::zeroed();
        assert_eq!(v1(a100.handle(), &mut a100_v1), SUCCESS);
        let mut h100_v1: nvmlMemory_t = std::mem::zeroed();
        assert_eq!(v1(h100.handle(), &mut h100_v1), SUCCESS);
        assert_eq!(v1(h100.handle(), ptr::null_mut()), INVALID_ARGUMENT);
        (a100_v1, h100_v1)
    };
    assert_eq!(
        (a100_v1.total, a100_v1.used, a100_v1.free),
        (40 * GIB, 3 * GIB + 256 * MIB, a100_v2.free)
    );
    assert_eq!(h100_v1.total, 80 * GIB);
    assert_eq!(h100_v1.used + h100_v1.free, h100_v1.total);
    clock.check_rising(&USED_RAMP, "v1 used - reserved", || {
        // SAFETY: as above.
        let mut info: nvmlMemory_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        assert_eq!(unsafe { v1(h100.handle(), &mut info) }, SUCCESS);
        info.used - 512 * MIB
    });

    nvml.shutdown().unwrap();
}

#[test]
fn lists_the_callers_children_with_their_scheduled_bytes() {
    let scenario = Scenario::new(Some(&two_device_script()));
    let (nvml, clock) = init_timed(&scenario);
    let h100 = nvml.device_by_index(0).unwrap();
    let a100 = nvml.device_by_index(1).unwrap();
    let me = std::process::id();

    // Only the fixed pid (this process) before any child exists; the absent pid never shows.
    let before = h100.running_compute_processes().unwrap();
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0].pid, me);
    assert_eq!(before[0].used_gpu_memory, UsedGpuMemory::Used(MIB));
    assert_eq!(before[0].gpu_instance_id, None);
    assert_eq!(before[0].compute_instance_id, None);

    let child = Reaped(Command::new("sleep").arg("30").spawn().unwrap());
    let child_pid = child.0.id();
    let mut listed = Vec::new();
    clock.check_rising(&PROCESS_RAMP, "child's used", || {
        listed = h100.running_compute_processes().unwrap();
        match listed.iter().find(|p| p.pid == child_pid) {
            Some(p) => match p.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => bytes,
                UsedGpuMemory::Unavailable => panic!("unavailable"),
            },
            None => panic!("child {child_pid} not listed: {listed:?}"),
        }
    });
    let pids: Vec<u32> = listed.iter().map(|p| p.pid).collect();
    assert_eq!(pids, [child_pid, me]);
    // The other device has no process rules.
    assert!(a100.running_compute_processes().unwrap().is_empty());
    assert!(h100.running_graphics_processes().unwrap().is_empty());
    assert_eq!(h100.running_compute_processes_count().unwrap(), 2);

    // Once the child is dead (and reaped) it is gone.
    drop(child);
    let after: Vec<u32> = h100
        .running_compute_processes()
        .unwrap()
        .iter()
        .map(|p| p.pid)
        .collect();
    assert_eq!(after, [me]);
}

#[test]
fn process_query_is_counted_separately_from_memory_queries() {
    let scenario = Scenario::new(Some(&two_device_script()));
    let nvml = scenario.init().unwrap();
    let lib = nvml.lib();
    let h100 = nvml.device_by_index(0).unwrap();
    let memory_calls = || calls(lib, c"nvmlDeviceGetMemoryInfo_v2");
    let process_calls = || calls(lib, c"nvmlDeviceGetComputeRunningProcesses_v3");
    let (memory_before, process_before) = (memory_calls(), process_calls());

    for _ in 0..10 {
        h100.memory_info().unwrap();
    }
    // With processes present the wrapper asks for the count, then for the array.
    h100.running_compute_processes().unwrap();

    assert_eq!(memory_calls() - memory_before, 10);
    assert_eq!(process_calls() - process_before, 2);
    // The wrapper's init already asked for the driver version once.
    assert!(calls(lib, c"nvmlSystemGetDriverVersion") >= 1);
    assert!(calls(lib, c"nvmlInit_v2") >= 1);
    assert_eq!(calls(lib, c"nvmlDeviceGetTemperature"), u64::MAX);
}

#[test]
fn init_error_makes_init_fail_with_that_error() {
    let scenario = Scenario::new(Some(r#"{ "init_error": 9 }"#));
    assert!(matches!(scenario.init(), Err(NvmlError::DriverNotLoaded)));

    let scenario_lib = scenario.raw();
    let init = scenario_lib.nvmlInit_v2.as_ref().unwrap();
    // SAFETY: no arguments.
    assert_eq!(unsafe { init() }, 9);
    assert!(last_init_error(&scenario_lib).contains("init_error is 9"));
    // Nothing was initialized, so there is nothing to shut down.
    let shutdown = scenario_lib.nvmlShutdown.as_ref().unwrap();
    // SAFETY: no arguments.
    assert_eq!(unsafe { shutdown() }, UNINITIALIZED);
}

#[test]
fn unreadable_or_invalid_scripts_make_init_fail_with_unknown() {
    let scenario = Scenario::new(Some(r#"{ "devices": [ { "name": "no uuid" } ] }"#));
    assert!(matches!(scenario.init(), Err(NvmlError::Unknown)));

    let lib = scenario.raw();
    let init = lib.nvmlInit_v2.as_ref().unwrap();
    // SAFETY: no arguments.
    assert_eq!(unsafe { init() }, UNKNOWN);
    let reason = last_init_error(&lib);
    assert!(
        reason.contains("script.json") && reason.contains("uuid"),
        "{reason}"
    );

    std::fs::write(scenario.dir.join("broken.json"), "{ not json").unwrap();
    scenario.point_at(&scenario.dir.join("broken.json"));
    assert!(matches!(scenario.init(), Err(NvmlError::Unknown)));

    scenario.point_at(&scenario.dir.join("missing.json"));
    assert!(matches!(scenario.init(), Err(NvmlError::Unknown)));
    // SAFETY: no arguments.
    assert_eq!(unsafe { init() }, UNKNOWN);
    assert!(last_init_error(&lib).contains("missing.json"));
}

#[test]
fn without_a_script_there_is_one_idle_default_device() {
    let scenario = Scenario::new(None);
    let nvml = scenario.init().unwrap();
    assert_eq!(nvml.device_count().unwrap(), 1);
    let device = nvml.device_by_index(0).unwrap();
    assert_eq!(device.name().unwrap(), "NVIDIA H100 80GB HBM3");
    assert_eq!(device.uuid().unwrap(), "GPU-fake-0");
    let m = device.memory_info().unwrap();
    assert_eq!((m.total, m.reserved, m.used), (80 * GIB, 512 * MIB, 0));
    assert_eq!(m.free, m.total - m.reserved);
    assert!(device.running_compute_processes().unwrap().is_empty());
}

#[test]
fn functions_the_fake_lacks_fail_only_when_called() {
    let scenario = Scenario::new(None);
    // Init resolves every symbol nvml-wrapper knows, and the fake exports only a few of them.
    let nvml = scenario.init().unwrap();
    let device = nvml.device_by_index(0).unwrap();
    assert!(matches!(
        device.temperature(TemperatureSensor::Gpu),
        Err(NvmlError::FailedToLoadSymbol(_))
    ));
    assert!(matches!(
        nvml.sys_nvml_version(),
        Err(NvmlError::FailedToLoadSymbol(_))
    ));
    device.memory_info().unwrap();
}

/// The C contracts nvml-wrapper never exercises, called through its raw bindings.
#[test]
fn raw_calls_follow_the_nvml_contracts() {
    let scenario = Scenario::new(Some(&two_device_script()));
    let lib = scenario.raw();
    let init = lib.nvmlInit_v2.as_ref().unwrap();
    let shutdown = lib.nvmlShutdown.as_ref().unwrap();
    let count = lib.nvmlDeviceGetCount_v2.as_ref().unwrap();
    let by_index = lib.nvmlDeviceGetHandleByIndex_v2.as_ref().unwrap();
    let name = lib.nvmlDeviceGetName.as_ref().unwrap();
    let memory = lib.nvmlDeviceGetMemoryInfo_v2.as_ref().unwrap();
    let processes = lib
        .nvmlDeviceGetComputeRunningProcesses_v3
        .as_ref()
        .unwrap();
    let driver = lib.nvmlSystemGetDriverVersion.as_ref().unwrap();
    let cuda = lib.nvmlSystemGetCudaDriverVersion_v2.as_ref().unwrap();
    let error_string = lib.nvmlErrorString.as_ref().unwrap();

    // SAFETY: every pointer passed below is null, a live local of the declared type, or (for
    // handles, which the fake only compares) an arbitrary address.
    unsafe {
        let mut n: c_uint = 0;
        let mut handle: nvmlDevice_t = ptr::null_mut();

        // Before init.
        assert_eq!(count(&mut n), UNINITIALIZED);
        assert_eq!(shutdown(), UNINITIALIZED);
        assert_eq!(
            CStr::from_ptr(error_string(INSUFFICIENT_SIZE)),
            c"An input argument is not large enough"
        );

        // Nested inits are reference counted.
        assert_eq!(init(), SUCCESS);
        assert_eq!(init(), SUCCESS);
        assert_eq!(shutdown(), SUCCESS);
        assert_eq!(count(&mut n), SUCCESS);
        assert_eq!(n, 2);
        assert_eq!(count(ptr::null_mut()), INVALID_ARGUMENT);
        let mut version: c_int = 0;
        assert_eq!(cuda(&mut version), SUCCESS);
        assert_eq!(version, 13000);

        // Handles.
        assert_eq!(by_index(2, &mut handle), INVALID_ARGUMENT);
        assert_eq!(by_index(0, ptr::null_mut()), INVALID_ARGUMENT);
        assert_eq!(by_index(0, &mut handle), SUCCESS);
        let mut other: nvmlDevice_t = ptr::null_mut();
        assert_eq!(by_index(1, &mut other), SUCCESS);
        assert_ne!(handle, other);
        let mut info: nvmlMemory_v2_t = std::mem::zeroed();
        info.version = MEMORY_V2;
        assert_eq!(memory(ptr::null_mut(), &mut info), INVALID_ARGUMENT);
        let foreign: nvmlDevice_t = (&raw mut n).cast();
        assert_eq!(memory(foreign, &mut info), INVALID_ARGUMENT);
        assert_eq!(memory(handle, ptr::null_mut()), INVALID_ARGUMENT);

        // Memory struct versions.
        for wrong in [0, (1 << 24) | 40, (2 << 24) | 32, (3 << 24) | 40] {
            info.version = wrong;
            assert_eq!(
                memory(handle, &mut info),
                ARGUMENT_VERSION_MISMATCH,
                "{wrong:#x}"
            );
        }
        info.version = MEMORY_V2;
        assert_eq!(memory(handle, &mut info), SUCCESS);
        assert_eq!(info.total, 80 * GIB);

        // Strings need room for the NUL.
        let mut buffer = [0 as c_char; 96];
        let h100_len = "NVIDIA H100 80GB HBM3".len() as c_uint;
        assert_eq!(
            name(handle, buffer.as_mut_ptr(), h100_len),
            INSUFFICIENT_SIZE
        );
        assert_eq!(name(handle, buffer.as_mut_ptr(), h100_len + 1), SUCCESS);
        assert_eq!(name(handle, ptr::null_mut(), 96), INVALID_ARGUMENT);
        assert_eq!(driver(buffer.as_mut_ptr(), 4), INSUFFICIENT_SIZE);
        assert_eq!(driver(buffer.as_mut_ptr(), 80), SUCCESS);
        assert_eq!(CStr::from_ptr(buffer.as_ptr()), c"580.65.06");

        // The process array contract: two processes once a child runs.
        let _child = Reaped(Command::new("sleep").arg("30").spawn().unwrap());
        let mut infos: [nvmlProcessInfo_t; 2] = std::mem::zeroed();
        let mut capacity: c_uint = 0;
        assert_eq!(
            processes(handle, &mut capacity, ptr::null_mut()),
            INSUFFICIENT_SIZE
        );
        assert_eq!(capacity, 2);
        capacity = 1;
        assert_eq!(
            processes(handle, &mut capacity, infos.as_mut_ptr()),
            INSUFFICIENT_SIZE
        );
        assert_eq!(capacity, 2);
        assert_eq!(infos[0].pid, 0, "nothing written when it does not fit");
        assert_eq!(
            processes(handle, &mut capacity, infos.as_mut_ptr()),
            SUCCESS
        );
        assert_eq!(capacity, 2);
        assert_eq!(infos[1].pid, std::process::id());
        assert_eq!(infos[1].usedGpuMemory, MIB);
        assert_eq!(
            (infos[1].gpuInstanceId, infos[1].computeInstanceId),
            (0xFFFF_FFFF, 0xFFFF_FFFF)
        );
        assert_eq!(
            processes(handle, ptr::null_mut(), infos.as_mut_ptr()),
            INVALID_ARGUMENT
        );
        // A device without processes: success and a zero count, even with a null array.
        capacity = 0;
        assert_eq!(processes(other, &mut capacity, ptr::null_mut()), SUCCESS);
        assert_eq!(capacity, 0);

        // After the last shutdown every query is refused again, old handles included.
        assert_eq!(shutdown(), SUCCESS);
        assert_eq!(memory(handle, &mut info), UNINITIALIZED);
        assert_eq!(shutdown(), UNINITIALIZED);
    }
}
