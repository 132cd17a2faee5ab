// oomscope's window into libtorch's CUDA caching allocator, which tch does not expose
// (tch-rs#896): device statistics, empty_cache, peak reset, and the out-of-memory observer.
//
// Every function is extern "C", returns a status code, and catches every C++ exception: nothing
// thrown by libtorch ever crosses into Rust. Status: 0 ok, 1 CUDA not available, 2 error (the
// message is copied into `err`).

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/Event.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>

// Declared here rather than through <ATen/cuda/CUDAContext.h>, which pulls in CUDA's half-precision
// headers (and CCCL) that the PyTorch wheels do not ship. Only its address is taken.
struct cudaDeviceProp;
namespace at::cuda {
cudaDeviceProp* getCurrentDeviceProperties();
}  // namespace at::cuda

namespace {

void copy_message(const char* message, char* err, size_t err_len) {
  if (err == nullptr || err_len == 0) return;
  std::strncpy(err, message, err_len - 1);
  err[err_len - 1] = '\0';
}

bool cuda_present() { return c10::cuda::device_count() > 0; }

// Runs `body` when CUDA is present, turning every C++ exception into status 2 and a message:
// 0 ok, 1 CUDA not available, 2 error.
template <typename Body>
int guarded(char* err, size_t err_len, Body&& body) {
  try {
    if (!cuda_present()) return 1;
    body();
    return 0;
  } catch (const std::exception& e) {
    copy_message(e.what(), err, err_len);
    return 2;
  } catch (...) {
    copy_message("unknown C++ exception", err, err_len);
    return 2;
  }
}

}  // namespace

extern "C" {

// Field order matches AllocatorSnapshot::FIELD_NAMES on the Rust side.
struct OomscopeDeviceStats {
  int64_t allocated_bytes;
  int64_t reserved_bytes;
  int64_t active_bytes;
  int64_t inactive_split_bytes;
  int64_t peak_allocated_bytes;
  int64_t peak_reserved_bytes;
  int64_t num_alloc_retries;
  int64_t num_ooms;
};

typedef void (*oomscope_oom_callback)(int64_t device, uint64_t requested_bytes,
                                      uint64_t device_total_bytes, uint64_t device_free_bytes);

// Referencing a libtorch_cuda symbol makes the linker keep libtorch_cuda.so as a dependency even
// under --as-needed; without it, tch::Cuda::is_available() is false on a GPU host.
int oomscope_cuda_linked(void) {
  volatile auto keep = &at::cuda::getCurrentDeviceProperties;
  return keep != nullptr ? 1 : 0;
}

int oomscope_cuda_device_count(void) {
  try {
    return static_cast<int>(c10::cuda::device_count());
  } catch (...) {
    return 0;
  }
}

int oomscope_device_stats(int device, OomscopeDeviceStats* out, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(
        static_cast<c10::DeviceIndex>(device));
    constexpr auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    out->allocated_bytes = stats.allocated_bytes[all].current;
    out->reserved_bytes = stats.reserved_bytes[all].current;
    out->active_bytes = stats.active_bytes[all].current;
    out->inactive_split_bytes = stats.inactive_split_bytes[all].current;
    out->peak_allocated_bytes = stats.allocated_bytes[all].peak;
    out->peak_reserved_bytes = stats.reserved_bytes[all].peak;
    out->num_alloc_retries = stats.num_alloc_retries;
    out->num_ooms = stats.num_ooms;
  });
}

int oomscope_empty_cache(char* err, size_t err_len) {
  return guarded(err, err_len, [] { c10::cuda::CUDACachingAllocator::emptyCache(); });
}

int oomscope_reset_peak_stats(int device, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
  });
}

// The callback runs inside the allocator, before the OOM error is thrown, after the allocator
// released its lock (every libtorch since 1.13 copies the observers, unlocks, then calls them):
// it may read the allocator's statistics, but must not allocate device memory.
int oomscope_attach_oom_observer(oomscope_oom_callback callback, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    c10::cuda::CUDACachingAllocator::attachOutOfMemoryObserver(
        [callback](int64_t device, size_t requested, size_t total, size_t free_bytes) {
          callback(device, requested, total, free_bytes);
        });
  });
}

// CUDA events, so that a small result copied to the host asynchronously (gradient statistics)
// can be read once it is there, without waiting for everything queued after it: the training
// loop never stalls on oomscope. Through c10::Event, so nothing links against cudart directly.

int oomscope_event_record(int device, void** out, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    auto event = std::make_unique<c10::Event>(c10::DeviceType::CUDA);
    event->record(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)));
    *out = event.release();
  });
}

// *done = 1 once the work queued before the event has finished, else 0.
int oomscope_event_query(void* event, int* done, char* err, size_t err_len) {
  return guarded(err, err_len, [&] { *done = static_cast<c10::Event*>(event)->query() ? 1 : 0; });
}

int oomscope_event_synchronize(void* event, char* err, size_t err_len) {
  return guarded(err, err_len, [&] { static_cast<c10::Event*>(event)->synchronize(); });
}

// Starts a gradient summary of `params` without a host synchronisation: the norms of every
// defined gradient in one fused pass (at::_foreach_norm: a few kernels whatever the number of
// tensors), the sum of their squares copied non-blocking into pinned host memory, and an event
// behind the copy. Out: the host tensor (a new at::Tensor*, owned by the caller as a tch
// Tensor), the event, the number and bytes of the gradients. Status 3: no gradient.
int oomscope_gradient_norm_async(const at::Tensor* const* params, size_t n, int device,
                                 at::Tensor** host_out, void** event_out, int64_t* count,
                                 int64_t* bytes, char* err, size_t err_len) {
  int status = 0;
  int result = guarded(err, err_len, [&] {
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> grads;
    int64_t total = 0;
    for (size_t i = 0; i < n; ++i) {
      const at::Tensor& grad = params[i]->grad();
      if (grad.defined()) {
        grads.push_back(grad);
        total += static_cast<int64_t>(grad.nbytes());
      }
    }
    if (grads.empty()) {
      status = 3;
      return;
    }
    auto norms = at::_foreach_norm(grads, 2);
    auto squares = at::stack(norms).to(at::kDouble).square().sum();
    auto host = std::make_unique<at::Tensor>(squares.to(at::kCPU, /*non_blocking=*/true));
    auto event = std::make_unique<c10::Event>(c10::DeviceType::CUDA);
    event->record(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)));
    *count = static_cast<int64_t>(grads.size());
    *bytes = total;
    *host_out = host.release();
    *event_out = event.release();
  });
  return result != 0 ? result : status;
}

void oomscope_event_free(void* event) {
  try {
    delete static_cast<c10::Event*>(event);
  } catch (...) {
  }
}

}  // extern "C"
