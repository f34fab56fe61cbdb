// omni._omni: the Python binding of the engine facade (omni/omni.h) and of
// nothing past it. python/omni/__init__.py builds the public API on top
// (omni.Omni's keywords, output types, the error classes, the writers).
//
// Note [The GIL and cancellation]
// Engine.generate releases the GIL while the engine works, so other Python
// threads run meanwhile. The engine calls the progress function after every
// denoising step, on the calling thread; it takes the GIL, runs the signal
// handlers that are due (PyErr_CheckSignals: a Ctrl-C becomes a
// KeyboardInterrupt there), then the caller's callback. A Python exception
// from either is kept, omni::Cancelled stops the request at that step (the
// engine stays usable: Omni::generate's contract), and once the GIL is back
// the kept exception is raised to the caller as it was.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <variant>
#include <vector>

#include "omni/error.h"
#include "omni/omni.h"
#include "omni/pipelines/request_preset.h"

namespace py = pybind11;

namespace {

using ByteSize = std::variant<std::uint64_t, std::string>;

std::uint64_t to_bytes(const ByteSize& size) {
  if (const auto* bytes = std::get_if<std::uint64_t>(&size)) return *bytes;
  return omni::device::parse_byte_size(std::get<std::string>(size));
}

// uint8 [F, H, W, 3] frames as a numpy array that shares the tensor's memory
// and keeps it alive.
py::array_t<std::uint8_t> to_numpy(const torch::Tensor& frames) {
  OMNI_INTERNAL_ASSERT(frames.scalar_type() == torch::kUInt8 && frames.dim() == 4,
                       "frames must be uint8 [F, H, W, 3]");
  auto owner = std::make_unique<torch::Tensor>(frames.contiguous());
  std::vector<py::ssize_t> shape(owner->sizes().begin(), owner->sizes().end());
  auto* data = owner->data_ptr<std::uint8_t>();
  py::capsule base(owner.get(), [](void* p) { delete static_cast<torch::Tensor*>(p); });
  owner.release();
  return py::array_t<std::uint8_t>(shape, data, base);
}

// One omni::Omni that can be closed. omni.h: one thread drives it at a time,
// so each call holds mutex_; a call waits for another thread's without the
// GIL (that thread's progress callback needs it), and a call from inside this
// engine's own progress callback is refused rather than deadlocking.
class Engine {
 public:
  explicit Engine(omni::EngineArgs args) {
    py::gil_scoped_release no_gil;
    omni_ = std::make_unique<omni::Omni>(std::move(args));
  }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  py::array_t<std::uint8_t> generate(const omni::GenerationRequest& request,
                                     const py::object& callback) {
    auto lock = hold("generate");
    std::optional<py::error_already_set> raised;  // Note [The GIL and cancellation]
    auto progress = [&](int step, int total) {
      py::gil_scoped_acquire gil;
      try {
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
        if (!callback.is_none()) callback(step, total);
      } catch (py::error_already_set& e) {
        raised = std::move(e);
        throw omni::Cancelled(omni::detail::concat("cancelled at step ", step, " of ", total));
      }
    };
    omni::GenerateResult result;
    try {
      BusyThread busy(busy_thread_);
      py::gil_scoped_release no_gil;
      result = omni_->generate(request, progress);
    } catch (const omni::Cancelled&) {
      if (raised) throw *raised;
      throw;
    }
    last_report_json_ = result.report_json().dump();  // as omni generate --report-json writes it
    return to_numpy(result.frames);
  }

  // The latest request's report with its seconds, or nothing before one.
  std::optional<std::string> request_report_json() {
    auto lock = hold("offload_report");
    return last_report_json_;
  }

  std::string offload_report_json() {
    auto lock = hold("offload_report");
    return omni_->offload_report().to_json().dump();
  }

  std::string device_name() {
    auto lock = hold("device");
    return omni_->device().name();
  }

  // Destroys the engine: hooks removed, device buffers and host homes (the
  // pinned memory) freed. Idempotent.
  void close() {
    std::unique_ptr<omni::Omni> omni;
    {
      auto lock = hold("close", /*closed_ok=*/true);
      omni = std::move(omni_);
    }
    py::gil_scoped_release no_gil;
    omni.reset();
  }

  bool closed() {
    auto lock = hold("closed", /*closed_ok=*/true);
    return omni_ == nullptr;
  }

 private:
  // Marks the thread that is inside omni_->generate (and so may call back).
  class BusyThread {
   public:
    explicit BusyThread(std::atomic<std::thread::id>& slot) : slot_(slot) {
      slot_ = std::this_thread::get_id();
    }
    ~BusyThread() { slot_ = std::thread::id(); }
    BusyThread(const BusyThread&) = delete;
    BusyThread& operator=(const BusyThread&) = delete;

   private:
    std::atomic<std::thread::id>& slot_;
  };

  std::unique_lock<std::mutex> hold(const char* what, bool closed_ok = false) {
    if (busy_thread_ == std::this_thread::get_id())
      throw std::runtime_error(std::string("Omni.") + what +
                               "() cannot be called from this Omni's own progress callback");
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) {
      py::gil_scoped_release no_gil;
      lock.lock();
    }
    if (!omni_ && !closed_ok)
      throw std::runtime_error(std::string("Omni.") + what + "(): this Omni is closed");
    return lock;
  }

  std::mutex mutex_;
  std::atomic<std::thread::id> busy_thread_{};
  std::unique_ptr<omni::Omni> omni_;
  std::optional<std::string> last_report_json_;
};

// The C++ errors that become the Python class of the same name in omni
// (python/omni/__init__.py), with the C++ message. omni::Cancelled becomes a
// KeyboardInterrupt, any other omni::Error omni.Error.
#define OMNI_PYTHON_ERRORS(X) \
  X(ConfigError)              \
  X(FormatError)              \
  X(InvalidRequest)           \
  X(DeviceOutOfMemory)        \
  X(ResidencyViolation)       \
  X(NonResidentWeightAccess)

void raise_omni_error(const char* name, const std::exception& e) {
  try {
    PyErr_SetString(py::module_::import("omni").attr(name).ptr(), e.what());
  } catch (py::error_already_set&) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
}

void translate_errors(std::exception_ptr p) {
#define OMNI_CATCH(name)        \
  catch (const omni::name& e) { \
    raise_omni_error(#name, e); \
  }
  try {
    if (p) std::rethrow_exception(p);
  }
  OMNI_PYTHON_ERRORS(OMNI_CATCH)
  catch (const omni::Cancelled& e) {
    PyErr_SetString(PyExc_KeyboardInterrupt, e.what());
  }
  catch (const omni::Error& e) {
    raise_omni_error("Error", e);
  }
  catch (const c10::Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
  }
#undef OMNI_CATCH
}

// Test-only: throws the named C++ error, so the tests can check the
// translation of errors no request can provoke (ResidencyViolation is a
// broken invariant of the offload engine itself).
[[noreturn]] void throw_for_test(const std::string& kind, const std::string& message) {
#define OMNI_THROW(name) \
  if (kind == #name) throw omni::name(message);
  OMNI_PYTHON_ERRORS(OMNI_THROW)
#undef OMNI_THROW
  if (kind == "Cancelled") throw omni::Cancelled(message);
  if (kind == "Error") throw omni::Error(message);
  if (kind == "InternalError") throw omni::InternalError(message);
  throw std::invalid_argument("unknown error kind '" + kind + "'");
}

}  // namespace

PYBIND11_MODULE(_omni, m) {
  m.doc() = "omni's engine facade (omni::Omni); use the omni package, not this module.";
  py::register_local_exception_translator(translate_errors);

  py::class_<Engine>(m, "Engine")
      .def(py::init([](const std::string& model, bool enable_cpu_offload, const std::string& device,
                       const std::string& dtype, bool vae_tiling, const ByteSize& sim_memory,
                       double sim_link_gbps, const ByteSize& prompt_cache, bool offload_streaming,
                       bool pin_memory, std::uint64_t max_pin_chunk_bytes,
                       const std::vector<std::string>& split_components,
                       const std::optional<ByteSize>& device_memory_budget,
                       const std::optional<ByteSize>& reserve_memory, bool enable_layerwise_offload,
                       std::size_t prefetch_blocks, bool offload_auto,
                       const std::optional<ByteSize>& host_memory_budget,
                       const ByteSize& pinned_staging,
                       const std::vector<std::tuple<std::string, std::string, double>>& loras) {
             omni::EngineArgs args;
             args.model = model;
             args.enable_cpu_offload = enable_cpu_offload;
             args.device = device;
             args.dtype = dtype;
             args.vae_tiling = vae_tiling;
             args.sim_memory_bytes = to_bytes(sim_memory);
             args.sim_link_gbps = sim_link_gbps;
             args.prompt_cache_bytes = to_bytes(prompt_cache);
             args.offload.streaming = offload_streaming;
             args.offload.pin_memory = pin_memory;
             args.offload.max_pin_chunk_bytes = max_pin_chunk_bytes;
             args.offload.split_components = split_components;
             if (device_memory_budget)
               args.offload.device_memory_budget = to_bytes(*device_memory_budget);
             if (reserve_memory) args.offload.reserve_bytes = to_bytes(*reserve_memory);
             args.enable_layerwise_offload = enable_layerwise_offload;
             args.offload.prefetch_blocks = prefetch_blocks;
             args.offload_auto = offload_auto;
             if (host_memory_budget) args.host_memory_budget_bytes = to_bytes(*host_memory_budget);
             args.pinned_staging_bytes = to_bytes(pinned_staging);
             for (const auto& [component, path, scale] : loras)
               args.loras.push_back({.component = component, .path = path, .scale = scale});
             return std::make_unique<Engine>(std::move(args));
           }),
           py::arg("model"), py::kw_only(), py::arg("enable_cpu_offload"), py::arg("device"),
           py::arg("dtype"), py::arg("vae_tiling"), py::arg("sim_memory"), py::arg("sim_link_gbps"),
           py::arg("prompt_cache"), py::arg("offload_streaming"), py::arg("pin_memory"),
           py::arg("max_pin_chunk_bytes"), py::arg("split_components"),
           py::arg("device_memory_budget"), py::arg("reserve_memory"),
           py::arg("enable_layerwise_offload"), py::arg("prefetch_blocks"), py::arg("offload_auto"),
           py::arg("host_memory_budget"), py::arg("pinned_staging"), py::arg("loras"),
           "Loads the model and enables offload (GIL released). Errors: omni's classes.")
      .def(
          "generate",
          [](Engine& engine, const std::string& prompt, const std::string& negative_prompt,
             std::optional<int> height, std::optional<int> width, std::optional<int> num_frames,
             std::optional<int> num_inference_steps, std::optional<double> guidance_scale,
             std::optional<double> guidance_scale_2, std::optional<double> boundary_ratio,
             std::optional<double> flow_shift, std::uint64_t seed, const py::object& callback,
             const std::optional<std::string>& preset) {
            omni::GenerationRequest request;
            request.prompt = prompt;
            request.negative_prompt = negative_prompt;
            request.height = height;
            request.width = width;
            request.num_frames = num_frames;
            request.steps = num_inference_steps;
            request.guidance_scale = guidance_scale;
            request.guidance_scale_2 = guidance_scale_2;
            request.boundary_ratio = boundary_ratio;
            request.flow_shift = flow_shift;
            request.seed = seed;
            if (preset) request = omni::pipelines::apply_preset(request, *preset);
            return engine.generate(request, callback);
          },
          py::arg("prompt"), py::kw_only(), py::arg("negative_prompt"), py::arg("height"),
          py::arg("width"), py::arg("num_frames"), py::arg("num_inference_steps"),
          py::arg("guidance_scale"), py::arg("guidance_scale_2"), py::arg("boundary_ratio"),
          py::arg("flow_shift"), py::arg("seed"), py::arg("callback"), py::arg("preset"),
          "Runs one request (GIL released; Note [The GIL and cancellation]); returns uint8 "
          "frames [F, H, W, 3].")
      .def("request_report_json", &Engine::request_report_json,
           "The latest request's offload report as omni generate --report-json writes it, or "
           "None before the first request.")
      .def("offload_report_json", &Engine::offload_report_json,
           "The offload report of everything since the model was loaded, as JSON.")
      .def_property_readonly("device", &Engine::device_name)
      .def("close", &Engine::close, "Frees the engine, its device memory and its host homes.")
      .def_property_readonly("closed", &Engine::closed);

  m.def(
      "save_frames",
      [](py::array_t<std::uint8_t, py::array::c_style> frames, const std::filesystem::path& path,
         int fps) {
        OMNI_CHECK(frames.ndim() == 4 && frames.shape(3) == 3, omni::FormatError,
                   "frames must be uint8 [F, H, W, 3]");
        omni::GenerateResult result;
        result.frames =
            torch::from_blob(const_cast<std::uint8_t*>(frames.data()),
                             {frames.shape(0), frames.shape(1), frames.shape(2), 3}, torch::kUInt8);
        result.fps = fps;
        py::gil_scoped_release no_gil;
        return omni::detail::with_typed_filesystem_errors([&] { return result.save(path); });
      },
      py::arg("frames"), py::arg("path"), py::arg("fps"),
      "Writes uint8 frames [F, H, W, 3] as omni generate --output does (GenerateResult::save); "
      "returns the files written.");

  m.def("_throw_for_test", &throw_for_test, py::arg("kind"), py::arg("message"));
}
