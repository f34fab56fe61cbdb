"""omni.cpp from Python: multi-component diffusion pipelines with model-level CPU offload.

    from omni import Omni, save_image

    with Omni("models/tiny-shapes", enable_cpu_offload=True) as omni:
        frames = omni.generate("a red circle moving right on a black background", seed=7)
        save_image(frames, "out.png")   # frames: float32 (F, H, W, 3) in [0, 1]
        print(omni.offload_report())

The engine is the C++ runtime (omni::Omni, through the extension omni._omni);
this module turns its keywords, frames, reports and errors into Python ones.
"""

import json
import os
import re
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

__all__ = [
    "Omni",
    "save_image",
    "save_video",
    "Error",
    "ConfigError",
    "FormatError",
    "InvalidRequest",
    "DeviceOutOfMemory",
    "ResidencyViolation",
    "NonResidentWeightAccess",
]


# The C++ errors (omni/error.h), raised with the C++ message. A KeyboardInterrupt
# (Ctrl-C, or one raised by a progress callback) cancels a request at the next
# denoising step; the engine stays usable.
class Error(Exception):
    """Base of every error omni raises on purpose."""


class ConfigError(Error, ValueError):
    """A configuration that cannot work: unknown device or dtype, a bad model directory layout,
    an invalid option value."""


class FormatError(Error, ValueError):
    """A file that cannot be read or does not follow its format (a missing or corrupt
    checkpoint), or frames a writer cannot write."""


class InvalidRequest(Error, ValueError):
    """A request with invalid values (a size the model cannot take, zero steps, an empty
    prompt); nothing ran."""


class DeviceOutOfMemory(Error, MemoryError):
    """The device could not hold what was asked of it."""


class ResidencyViolation(Error, RuntimeError):
    """An offload transition would break the residency invariant (a bug in omni)."""


class NonResidentWeightAccess(ResidencyViolation):
    """A computation used a weight that is offloaded (a component ran without its hook)."""


from . import _omni  # noqa: E402  (the extension raises the classes above)

ProgressCallback = Callable[[int, int], Any]

def _dtype_spec(dtype: Any) -> str:
    """The C++ DtypeSpec text of a dtype, a torch.dtype or a {component: dtype} dict."""
    if isinstance(dtype, dict):
        return ",".join(f"{name}={str(value).removeprefix('torch.')}" for name, value in dtype.items())
    return str(dtype).removeprefix("torch.")


class Omni:
    """A loaded model: the C++ engine omni::Omni.

    Omni(model, *, enable_cpu_offload=False, device="auto", dtype="auto", ...)

    model: a diffusers model directory (model_index.json), e.g. "models/tiny-shapes", or the
        built-in "example:wan-shaped".
    enable_cpu_offload: model-level offload (the CLI's --enable-cpu-offload): only the running
        component group stays on the device, the rest waits in pinned host memory.
    device: "auto" | "cpu" | "sim" | "cuda[:N]"; "auto" is cuda:0 when there is one, else cpu,
        or the simulated stand-in accelerator "sim" when offload is enabled.
    dtype: "auto" (each component keeps the dtype its checkpoint stores) | "float32" |
        "bfloat16" | "float16" (or a torch.dtype), or per component as a dict
        {"transformer": "bfloat16", "vae": "float32"} or the CLI's "transformer=bfloat16,vae=float32".
        ConfigError for an unknown dtype or a component the model does not have.
    sim_memory: capacity of the sim device, bytes or a size such as "2GiB".
    sim_link_gbps: speed of the sim device's host-to-device link in GB/s (0: memcpy speed).
    prompt_cache: bytes of text-encoder outputs kept for repeated prompts (0: off), bytes or a
        size such as "256MiB".
    offload_streaming: "on" (default) hides phase boundaries behind compute block by block;
        "off" swaps whole components (the CLI's --offload-streaming).
    pin_memory: page-lock the weights' host homes (pageable when False).
    max_pin_chunk_bytes: the largest single pinned allocation.
    split_components: for split models, the sub-components to swap (all when empty).
    device_memory_budget: device bytes the weights may hold, bytes or a size such as "20GiB"
        (the CLI's --device-memory-budget); implies offload: components stay while they fit.
    reserve_memory: device bytes kept free of weights (the CLI's --reserve-memory).
    enable_layerwise_offload: DiT blocks stream through every call, for a device smaller than one
        DiT (the CLI's --enable-layerwise-offload); prefetch_blocks: blocks uploaded ahead.
    host_memory_budget: host memory for the weights, bytes or a size such as "16GiB" (the
        CLI's --host-memory-budget; with enable_cpu_offload): components whose pinned homes do
        not fit keep their home in the mapped checkpoint and upload through a pinned staging
        ring of pinned_staging bytes (default "512MiB", part of the budget).
    offload: "auto" chooses the offload mode from the component sizes and the budget (the CLI's
        --offload auto); None (default) follows the keywords above.
    vae_use_tiling: the VAE decodes frames larger than 256x256 in overlapping, blended tiles
        (default None: on, as the CLI's --vae-tiling on); False decodes in one piece.
    boundary_ratio, flow_shift: vllm-omni's overrides of the model's expert switch
        (model_index.json's boundary_ratio, in (0, 1); two-expert models) and its scheduler's
        shift (positive), for every request that does not set its own (generate's keywords).
        None: the model's own. A model without such a thing raises InvalidRequest at generate.

    Loading releases the GIL. Errors: ConfigError, FormatError, DeviceOutOfMemory (with the C++
    message); an unknown keyword is a TypeError. One thread uses an Omni at a time (a second
    thread's call waits). close(), or leaving a `with` block, frees the device memory and the
    pinned host memory at once.
    """

    def __init__(
        self,
        model: Union[str, os.PathLike],
        *,
        enable_cpu_offload: bool = False,
        device: str = "auto",
        dtype: Any = "auto",
        sim_memory: Union[int, str] = "64GiB",
        sim_link_gbps: float = 0.0,
        prompt_cache: Union[int, str] = "256MiB",
        offload_streaming: Union[str, bool] = "on",
        pin_memory: bool = True,
        max_pin_chunk_bytes: int = 256 << 20,
        split_components: Sequence[str] = (),
        device_memory_budget: Union[int, str, None] = None,
        reserve_memory: Union[int, str, None] = None,
        enable_layerwise_offload: bool = False,
        prefetch_blocks: int = 1,
        offload: Optional[str] = None,
        host_memory_budget: Union[int, str, None] = None,
        pinned_staging: Union[int, str] = "512MiB",
        vae_use_tiling: Optional[bool] = None,
        boundary_ratio: Optional[float] = None,
        flow_shift: Optional[float] = None,
    ) -> None:
        self._boundary_ratio = boundary_ratio
        self._flow_shift = flow_shift
        if offload_streaming not in ("on", "off", True, False):
            raise ConfigError(f"offload_streaming must be 'on' or 'off', got {offload_streaming!r}")
        if offload not in (None, "auto"):
            raise ConfigError(f"offload must be 'auto' or None, got {offload!r}")
        if isinstance(split_components, str):
            raise TypeError("split_components must be a sequence of names, not a string")
        self._engine = _omni.Engine(
            os.fspath(model),
            enable_cpu_offload=bool(enable_cpu_offload),
            device=device,
            dtype=_dtype_spec(dtype),
            vae_tiling=vae_use_tiling is None or bool(vae_use_tiling),
            sim_memory=sim_memory,
            sim_link_gbps=float(sim_link_gbps),
            prompt_cache=prompt_cache,
            offload_streaming=offload_streaming in ("on", True),
            pin_memory=bool(pin_memory),
            max_pin_chunk_bytes=max_pin_chunk_bytes,
            split_components=list(split_components),
            device_memory_budget=device_memory_budget,
            reserve_memory=reserve_memory,
            enable_layerwise_offload=bool(enable_layerwise_offload),
            prefetch_blocks=int(prefetch_blocks),
            offload_auto=offload == "auto",
            host_memory_budget=host_memory_budget,
            pinned_staging=pinned_staging,
        )

    def generate(
        self,
        prompt: str,
        *,
        negative_prompt: Optional[str] = None,
        height: Optional[int] = None,
        width: Optional[int] = None,
        num_frames: Optional[int] = None,
        num_inference_steps: Optional[int] = None,
        guidance_scale: Optional[float] = None,
        guidance_scale_2: Optional[float] = None,
        boundary_ratio: Optional[float] = None,
        flow_shift: Optional[float] = None,
        seed: Optional[int] = None,
        generator: Any = None,
        output_type: str = "np",
        callback: Optional[ProgressCallback] = None,
    ) -> Any:
        """Generates a video (or an image: num_frames=1) from a prompt.

        Returns, by output_type:
          "np"  (default): a numpy float32 array (F, H, W, 3) in [0, 1];
          "pil": a list of F PIL.Image images (needs Pillow);
          "pt":  a torch float32 tensor (F, H, W, 3) in [0, 1] (needs torch).

        height, width, num_frames, num_inference_steps, guidance_scale, guidance_scale_2: the
        model's defaults when None (its omni_defaults.json, else diffusers' WanPipeline's).
        boundary_ratio, flow_shift: this request's overrides (see Omni); None: the Omni's.
        seed: the same seed gives the same frames as `omni generate --seed` (0 when None).
        generator: a torch.Generator, honoured through its initial_seed() (instead of seed).
        callback(step, total): called after every denoising step, holding the GIL; an
        exception it raises cancels the request there and is raised by generate.

        The GIL is released while the engine works. A KeyboardInterrupt (Ctrl-C) cancels the
        request at the next step; the engine stays usable. InvalidRequest for bad values
        (nothing runs), DeviceOutOfMemory when the device cannot hold a component.
        """
        if output_type not in ("np", "pil", "pt"):
            raise ValueError(f"output_type must be 'np', 'pil' or 'pt', got {output_type!r}")
        if output_type == "pil":
            import PIL.Image  # noqa: F401  (before the engine runs: ImportError without Pillow)
        elif output_type == "pt":
            import torch  # noqa: F401
        if callback is not None and not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        frames = self._engine.generate(
            prompt,
            negative_prompt="" if negative_prompt is None else negative_prompt,
            height=height,
            width=width,
            num_frames=num_frames,
            num_inference_steps=num_inference_steps,
            guidance_scale=guidance_scale,
            guidance_scale_2=guidance_scale_2,
            boundary_ratio=self._boundary_ratio if boundary_ratio is None else boundary_ratio,
            flow_shift=self._flow_shift if flow_shift is None else flow_shift,
            seed=_resolve_seed(seed, generator),
            callback=callback,
        )
        if output_type == "pil":
            import PIL.Image

            return [PIL.Image.fromarray(frame) for frame in frames]
        images = frames.astype(np.float32) / np.float32(255)
        if output_type == "pt":
            import torch

            return torch.from_numpy(images)
        return images

    def offload_report(self, *, since_load: bool = False) -> dict:
        """The offload report as a dict.

        By default the latest request's, exactly as `omni generate --report-json` writes it
        (device, strategy, peak_resident_bytes, pinned_host_bytes, h2d_bytes, d2h_bytes,
        components, transfers, seconds, ...). With since_load=True, or before the first
        request: the totals since the model was loaded (the same keys but seconds).
        """
        last = None if since_load else self._engine.request_report_json()
        return json.loads(last if last is not None else self._engine.offload_report_json())

    @property
    def device(self) -> str:
        """The device the engine runs on: "cpu", "sim" (the stand-in) or "cuda:N"."""
        return self._engine.device

    @property
    def closed(self) -> bool:
        """Whether close() has run."""
        return self._engine.closed

    def close(self) -> None:
        """Frees the engine now: its device memory and its pinned host memory. Idempotent; any
        other call afterwards raises RuntimeError."""
        self._engine.close()

    def __enter__(self) -> "Omni":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<omni.Omni {'closed' if self.closed else 'on ' + self.device}>"


def _resolve_seed(seed: Optional[int], generator: Any) -> int:
    if generator is not None:
        if not hasattr(generator, "initial_seed"):
            raise TypeError(
                f"generator must be a torch.Generator (or have initial_seed()), got "
                f"{type(generator).__name__}"
            )
        from_generator = int(generator.initial_seed())
        if seed is not None and seed != from_generator:
            raise InvalidRequest(
                f"seed={seed} and a generator seeded with {from_generator}: pass one of them"
            )
        seed = from_generator
    if seed is None:
        return 0
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if not 0 <= seed < 1 << 64:
        raise InvalidRequest(f"seed must be in [0, 2**64), got {seed}")
    return int(seed)


def _to_uint8_frames(frames: Any) -> np.ndarray:
    """Frames as a C-contiguous uint8 (F, H, W, 3) array: from float [0, 1] or uint8 arrays,
    (H, W, 3) single frames, torch tensors, or a list of PIL images."""
    if isinstance(frames, (list, tuple)) and frames and hasattr(frames[0], "convert"):
        frames = np.stack([np.asarray(image.convert("RGB")) for image in frames])
    elif hasattr(frames, "detach") and hasattr(frames, "cpu"):  # a torch.Tensor
        frames = frames.detach().cpu().numpy()
    array = np.asarray(frames)
    if array.ndim == 3:
        array = array[np.newaxis]
    if array.ndim != 4 or array.shape[-1] != 3:
        raise FormatError(f"frames must be (F, H, W, 3) or (H, W, 3), got shape {array.shape}")
    if array.dtype == np.uint8:
        return np.ascontiguousarray(array)
    if array.dtype.kind != "f":
        raise FormatError(f"frames must be float in [0, 1] or uint8, got {array.dtype}")
    if not np.isfinite(array).all():
        raise FormatError("frames contain NaN or infinity")
    return np.ascontiguousarray(np.rint(np.clip(array, 0, 1) * 255).astype(np.uint8))


def _check_pattern(path: str) -> None:
    # The writer formats a pattern with printf and one int: any other conversion (%s) would
    # read memory it was not given.
    rest = path.replace("%%", "")
    if "%" in rest and (rest.count("%") != 1 or not re.search(r"%\d*d", rest)):
        raise FormatError(f"{path}: a frame pattern takes one %d conversion (e.g. frames/%03d.png)")


def save_image(frames: Any, path: Union[str, os.PathLike]) -> list:
    """Writes frames as PNG, as `omni generate --output` does: one frame as that image, several
    as a contact sheet (left to right, top to bottom), or one file per frame for a pattern
    such as "frames/%03d.png". frames: generate's output (float [0, 1] or uint8, (F, H, W, 3)
    or (H, W, 3), numpy, torch or a list of PIL images). Returns the paths written."""
    if os.fspath(path).endswith(".mp4"):
        raise FormatError(f"{os.fspath(path)}: save_image writes PNG; use save_video for .mp4")
    _check_pattern(os.fspath(path))
    return _omni.save_frames(_to_uint8_frames(frames), path, 16)


def save_video(frames: Any, path: Union[str, os.PathLike], fps: int = 16) -> list:
    """Writes frames as an H.264 .mp4 at fps frames per second (FFmpeg's libraries), as
    `omni generate --output out.mp4` does. FormatError for another extension, an fps out of
    1..240 or a build without video. Returns the paths written."""
    if not os.fspath(path).endswith(".mp4"):
        raise FormatError(f"{os.fspath(path)}: save_video writes .mp4")
    return _omni.save_frames(_to_uint8_frames(frames), path, fps)
