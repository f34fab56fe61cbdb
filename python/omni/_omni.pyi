# Type stub of the extension omni._omni (python/omni_module.cpp). Use the omni package:
# omni.Omni wraps Engine with the public keywords, output types and docstrings.
from os import PathLike
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

class Engine:
    def __init__(
        self,
        model: str,
        *,
        enable_cpu_offload: bool,
        device: str,
        dtype: str,
        vae_tiling: bool,
        sim_memory: Union[int, str],
        sim_link_gbps: float,
        prompt_cache: Union[int, str],
        offload_streaming: bool,
        pin_memory: bool,
        max_pin_chunk_bytes: int,
        split_components: Sequence[str],
        device_memory_budget: Union[int, str, None],
        reserve_memory: Union[int, str, None],
        enable_layerwise_offload: bool,
        prefetch_blocks: int,
        offload_auto: bool,
        host_memory_budget: Union[int, str, None],
        pinned_staging: Union[int, str],
        loras: Sequence[tuple[str, str, float]],
    ) -> None: ...
    def generate(
        self,
        prompt: str,
        *,
        negative_prompt: str,
        height: Optional[int],
        width: Optional[int],
        num_frames: Optional[int],
        num_inference_steps: Optional[int],
        guidance_scale: Optional[float],
        guidance_scale_2: Optional[float],
        boundary_ratio: Optional[float],
        flow_shift: Optional[float],
        seed: int,
        callback: Optional[Callable[[int, int], object]],
        preset: Optional[str],
    ) -> npt.NDArray[np.uint8]: ...
    def request_report_json(self) -> Optional[str]: ...
    def offload_report_json(self) -> str: ...
    @property
    def device(self) -> str: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...

def save_frames(
    frames: npt.NDArray[np.uint8], path: Union[str, PathLike[str]], fps: int
) -> list[Path]: ...
def _throw_for_test(kind: str, message: str) -> None: ...
