//! libtorch's CUDA caching allocator, through the C++ shim: statistics, `empty_cache`, peak
//! reset, and the out-of-memory observer. No C++ exception ever crosses into Rust: the shim
//! catches them and returns a status code, which becomes an [`AllocatorError`].

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::Mutex;

use oomscope_format::AllocatorStats;

#[repr(C)]
#[derive(Default)]
struct RawStats {
    values: [i64; 8],
}

unsafe extern "C" {
    fn oomscope_cuda_linked() -> c_int;
    fn oomscope_cuda_device_count() -> c_int;
    fn oomscope_device_stats(
        device: c_int,
        out: *mut RawStats,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn oomscope_empty_cache(err: *mut c_char, len: usize) -> c_int;
    fn oomscope_reset_peak_stats(device: c_int, err: *mut c_char, len: usize) -> c_int;
    fn oomscope_event_record(
        device: c_int,
        out: *mut *mut c_void,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn oomscope_event_query(
        event: *mut c_void,
        done: *mut c_int,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn oomscope_event_synchronize(event: *mut c_void, err: *mut c_char, len: usize) -> c_int;
    fn oomscope_event_free(event: *mut c_void);
    fn oomscope_gradient_norm_async(
        params: *const *const c_void,
        n: usize,
        device: c_int,
        host_out: *mut *mut c_void,
        event_out: *mut *mut c_void,
        count: *mut i64,
        bytes: *mut i64,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn oomscope_attach_oom_observer(
        callback: extern "C" fn(i64, u64, u64, u64),
        err: *mut c_char,
        len: usize,
    ) -> c_int;
}

/// Why an allocator call did nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocatorError {
    /// No CUDA device (a CPU run): there is no caching allocator to ask.
    #[error("CUDA is not available")]
    NoCuda,
    /// libtorch raised an error.
    #[error("libtorch: {0}")]
    Torch(String),
}

fn call(f: impl FnOnce(*mut c_char, usize) -> c_int) -> Result<(), AllocatorError> {
    let mut err = [0 as c_char; 512];
    match f(err.as_mut_ptr(), err.len()) {
        0 => Ok(()),
        1 => Err(AllocatorError::NoCuda),
        _ => {
            // SAFETY: the shim NUL-terminates within the buffer.
            let message = unsafe { CStr::from_ptr(err.as_ptr()) };
            Err(AllocatorError::Torch(
                message.to_string_lossy().into_owned(),
            ))
        }
    }
}

/// Number of CUDA devices libtorch sees (0 on a CPU-only host). Also makes sure libtorch_cuda is
/// linked, without which tch would not see CUDA at all.
pub fn device_count() -> usize {
    // SAFETY: no arguments; the shim catches everything.
    unsafe {
        oomscope_cuda_linked();
        usize::try_from(oomscope_cuda_device_count()).unwrap_or(0)
    }
}

fn device_index(device: usize) -> c_int {
    c_int::try_from(device).unwrap_or(c_int::MAX)
}

/// The allocator's statistics for a device (`torch.cuda.memory_stats` "all" aggregates).
pub fn stats(device: usize) -> Result<AllocatorStats, AllocatorError> {
    let mut raw = RawStats::default();
    // SAFETY: `raw` is a valid, correctly laid out output; the buffer outlives the call.
    call(|err, len| unsafe {
        oomscope_device_stats(device_index(device), &raw mut raw, err, len)
    })?;
    Ok(AllocatorStats::from_values(
        raw.values.map(|v| u64::try_from(v).unwrap_or(0)),
    ))
}

/// Releases the allocator's cached, unused blocks to the device (`torch.cuda.empty_cache`).
pub fn empty_cache() -> Result<(), AllocatorError> {
    // SAFETY: the buffer outlives the call.
    call(|err, len| unsafe { oomscope_empty_cache(err, len) })
}

/// Resets the peak statistics of a device (`torch.cuda.reset_peak_memory_stats`).
pub fn reset_peak_stats(device: usize) -> Result<(), AllocatorError> {
    // SAFETY: the buffer outlives the call.
    call(|err, len| unsafe { oomscope_reset_peak_stats(device_index(device), err, len) })
}

/// A CUDA event recorded on a device's current stream: it completes when everything queued
/// before it has run. Lets a small asynchronous result be read without a device-wide wait.
#[derive(Debug)]
pub struct DeviceEvent(std::ptr::NonNull<c_void>);

// SAFETY: a c10::Event may be queried, synchronised and destroyed from any thread.
unsafe impl Send for DeviceEvent {}

impl DeviceEvent {
    /// Records an event on `device`'s current stream, after the work queued so far.
    pub fn record(device: usize) -> Result<DeviceEvent, AllocatorError> {
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: `raw` is a valid output slot; the buffer outlives the call.
        call(|err, len| unsafe {
            oomscope_event_record(device_index(device), &raw mut raw, err, len)
        })?;
        std::ptr::NonNull::new(raw)
            .map(DeviceEvent)
            .ok_or_else(|| AllocatorError::Torch("no event was created".into()))
    }

    /// Whether the work queued before the event has finished (never waits).
    pub fn is_done(&self) -> Result<bool, AllocatorError> {
        let mut done: c_int = 0;
        // SAFETY: the event is alive (owned by self); `done` is a valid output.
        call(|err, len| unsafe { oomscope_event_query(self.0.as_ptr(), &raw mut done, err, len) })?;
        Ok(done != 0)
    }

    /// Waits until the work queued before the event has finished (and nothing queued after it).
    pub fn wait(&self) -> Result<(), AllocatorError> {
        // SAFETY: the event is alive (owned by self).
        call(|err, len| unsafe { oomscope_event_synchronize(self.0.as_ptr(), err, len) })
    }
}

impl Drop for DeviceEvent {
    fn drop(&mut self) {
        // SAFETY: created by oomscope_event_record and freed exactly once, here.
        unsafe { oomscope_event_free(self.0.as_ptr()) }
    }
}

/// A gradient summary started on the device: the sum of the squared gradient norms in pinned
/// host memory once `event` completes.
#[derive(Debug)]
pub struct GradientNormsInFlight {
    /// A 0-dim f64 CPU tensor, filled asynchronously.
    pub squares: tch::Tensor,
    /// Completes when `squares` has arrived.
    pub event: DeviceEvent,
    /// Parameters that had a gradient.
    pub params_with_grad: u64,
    /// Bytes of those gradients.
    pub gradient_bytes: u64,
}

/// Starts a gradient summary in one fused pass (`at::_foreach_norm`: a few kernels however many
/// tensors there are) and an asynchronous copy of its one number to pinned host memory.
/// `Ok(None)` when no parameter has a gradient.
pub fn gradient_norms_async(
    params: &[tch::Tensor],
    device: usize,
) -> Result<Option<GradientNormsInFlight>, AllocatorError> {
    let pointers: Vec<*const c_void> = params.iter().map(|p| p.as_ptr().cast()).collect();
    let (mut host, mut event): (*mut c_void, *mut c_void) =
        (std::ptr::null_mut(), std::ptr::null_mut());
    let (mut count, mut bytes) = (0i64, 0i64);
    let mut status = 0;
    let result = call(|err, len| {
        // SAFETY: the pointers are live tch tensors (at::Tensor*) borrowed for the call; the
        // outputs are valid slots; the buffer outlives the call.
        status = unsafe {
            oomscope_gradient_norm_async(
                pointers.as_ptr(),
                pointers.len(),
                device_index(device),
                &raw mut host,
                &raw mut event,
                &raw mut count,
                &raw mut bytes,
                err,
                len,
            )
        };
        if status == 3 { 0 } else { status }
    });
    result?;
    if status == 3 {
        return Ok(None);
    }
    let (Some(host), Some(event)) = (std::ptr::NonNull::new(host), std::ptr::NonNull::new(event))
    else {
        return Err(AllocatorError::Torch(
            "the gradient summary returned nothing".into(),
        ));
    };
    let event = DeviceEvent(event);
    // SAFETY: the shim allocated it with `new at::Tensor`, the ownership tch expects.
    let squares = unsafe { tch::Tensor::from_ptr(host.as_ptr().cast()) };
    Ok(Some(GradientNormsInFlight {
        squares,
        event,
        params_with_grad: u64::try_from(count).unwrap_or(0),
        gradient_bytes: u64::try_from(bytes).unwrap_or(0),
    }))
}

/// An out-of-memory error as the allocator reported it, before it was thrown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObservedOom {
    /// Device.
    pub device: i64,
    /// Bytes the failing allocation asked for.
    pub requested_bytes: u64,
    /// Device memory total.
    pub device_total_bytes: u64,
    /// Device memory free.
    pub device_free_bytes: u64,
}

static OBSERVED: Mutex<Vec<ObservedOom>> = Mutex::new(Vec::new());

/// What to do when the allocator reports an OOM (the session records it at once).
type OomHook = Box<dyn Fn(ObservedOom) + Send>;
static HOOK: Mutex<Option<OomHook>> = Mutex::new(None);

/// Sets the function called for every OOM the allocator reports, before its error is thrown
/// (replacing the previous one). It runs inside the allocator: host work only.
pub fn set_oom_hook(hook: Option<OomHook>) {
    if let Ok(mut slot) = HOOK.lock() {
        *slot = hook;
    }
}

extern "C" fn on_oom(device: i64, requested: u64, total: u64, free: u64) {
    // Runs inside the allocator: host memory only, never the device allocator.
    let oom = ObservedOom {
        device,
        requested_bytes: requested,
        device_total_bytes: total,
        device_free_bytes: free,
    };
    if let Ok(hook) = HOOK.lock()
        && let Some(hook) = hook.as_ref()
    {
        hook(oom);
    }
    if let Ok(mut observed) = OBSERVED.lock() {
        observed.push(oom);
    }
}

/// Attaches the OOM observer (once per process is enough; more calls add more observers).
pub fn attach_oom_observer() -> Result<(), AllocatorError> {
    // SAFETY: `on_oom` is a plain extern "C" function valid for the whole process.
    call(|err, len| unsafe { oomscope_attach_oom_observer(on_oom, err, len) })
}

/// OOMs observed since the last call.
pub fn take_observed_ooms() -> Vec<ObservedOom> {
    OBSERVED
        .lock()
        .map(|mut v| std::mem::take(&mut *v))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_cuda_every_call_says_so() {
        if device_count() > 0 {
            return; // a GPU host: covered by the GPU checks instead
        }
        assert_eq!(stats(0), Err(AllocatorError::NoCuda));
        assert_eq!(empty_cache(), Err(AllocatorError::NoCuda));
        assert_eq!(reset_peak_stats(0), Err(AllocatorError::NoCuda));
        assert_eq!(attach_oom_observer(), Err(AllocatorError::NoCuda));
        assert!(take_observed_ooms().is_empty());
    }

    #[test]
    fn an_observed_oom_reaches_the_hook_and_the_queue() {
        // What the shim's lambda does when the allocator raises an OOM.
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let sink = std::sync::Arc::clone(&seen);
        set_oom_hook(Some(Box::new(move |o| sink.lock().unwrap().push(o))));
        on_oom(0, 2 << 30, 80 << 30, 1 << 30);
        set_oom_hook(None);
        let expected = ObservedOom {
            device: 0,
            requested_bytes: 2 << 30,
            device_total_bytes: 80 << 30,
            device_free_bytes: 1 << 30,
        };
        assert_eq!(*seen.lock().unwrap(), [expected]);
        assert_eq!(take_observed_ooms(), [expected]);
    }
}
