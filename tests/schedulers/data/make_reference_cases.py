#!/usr/bin/env python3
"""Regenerates reference_cases.{json,safetensors}: diffusers' schedulers on
config values the Wan fixtures (tests/data/wan, README §4) do not cover.

Usage (from the repository root, after tools/fixtures/make_fixtures.py):
    .venv/bin/python tests/schedulers/data/make_reference_cases.py
Uses the pinned diffusers of the project environment (scripts/requirements.txt):
UniPCMultistepScheduler and FlowMatchEulerDiscreteScheduler, built from the
Wan fixture's config.json with the case's changes. The loop is README §4's,
on that fixture's inputs; the float64 run is stored as F64 (not rounded to F32).
"""
import json
import pathlib
import struct

import numpy as np
import torch
from diffusers import FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler

HERE = pathlib.Path(__file__).resolve().parent
WAN = HERE.parent.parent / "data" / "wan"


def read_safetensors(path):
    data = pathlib.Path(path).read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        array = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=np.float32)
        out[key] = torch.from_numpy(array.reshape(info["shape"]).copy())
    return out


def write_safetensors(path, tensors):
    names = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64"}
    header, blobs, offset = {}, [], 0
    for key, tensor in tensors.items():
        array = tensor.contiguous().numpy()
        blob = array.tobytes()
        header[key] = {"dtype": names[array.dtype], "shape": list(array.shape),
                       "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    pathlib.Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def run_loop(scheduler, steps, begin_index, x, c):
    scheduler.set_timesteps(steps)
    if begin_index is not None:
        scheduler.set_begin_index(begin_index)
    outs = []
    for t in scheduler.timesteps:
        model_output = 0.5 * x + (float(t) / 1000) * c
        x = scheduler.step(model_output, t, x, return_dict=False)[0]
        outs.append(x)
    return torch.stack(outs)


# name, fixture whose config and inputs are the base, config changes, steps, begin index
CASES = [
    ("unipc_bh1", "scheduler_unipc_flow_shift3", {"solver_type": "bh1"}, 8, None),
    ("unipc_order1", "scheduler_unipc_flow_shift3", {"solver_order": 1}, 8, None),
    ("unipc_order3", "scheduler_unipc_flow_shift3", {"solver_order": 3}, 12, None),
    ("unipc_order3_bh1_sigma_min", "scheduler_unipc_flow_shift3",
     {"solver_order": 3, "solver_type": "bh1", "final_sigmas_type": "sigma_min"}, 10, None),
    ("unipc_sigma_min", "scheduler_unipc_flow_shift3", {"final_sigmas_type": "sigma_min"}, 8, None),
    ("unipc_disable_corrector", "scheduler_unipc_flow_shift3", {"disable_corrector": [0, 2, 5]}, 8,
     None),
    ("unipc_shift_terminal", "scheduler_unipc_flow_shift3", {"shift_terminal": 0.1}, 8, None),
    ("unipc_shift_3_7", "scheduler_unipc_flow_shift3", {"flow_shift": 3.7}, 8, None),
    ("unipc_one_step", "scheduler_unipc_flow_shift3", {}, 1, None),
    ("unipc_shift60_20_steps_begin0", "scheduler_unipc_flow_shift12", {"flow_shift": 60.0}, 20, 0),
    ("euler_invert_sigmas", "scheduler_flowmatch_euler_shift3", {"invert_sigmas": True}, 8, None),
    ("euler_shift_terminal", "scheduler_flowmatch_euler_shift3", {"shift_terminal": 0.1}, 8, None),
    ("euler_shift_3_7", "scheduler_flowmatch_euler_shift3", {"shift": 3.7}, 8, None),
    ("euler_one_step", "scheduler_flowmatch_euler_shift3", {}, 1, None),
]


def main():
    classes = {
        "UniPCMultistepScheduler": UniPCMultistepScheduler,
        "FlowMatchEulerDiscreteScheduler": FlowMatchEulerDiscreteScheduler,
    }
    listing, tensors = [], {}
    for name, fixture, changes, steps, begin_index in CASES:
        config = json.loads((WAN / fixture / "config.json").read_text())
        config.update(changes)
        cls = classes[config["_class_name"]]
        kwargs = {k: v for k, v in config.items() if not k.startswith("_")}
        inputs = read_safetensors(WAN / fixture / "inputs.safetensors")
        x, c = inputs["initial_sample"], inputs["c"]
        run64 = run_loop(cls(**kwargs), steps, begin_index, x.double(), c.double())
        scheduler = cls(**kwargs)
        run32 = run_loop(scheduler, steps, begin_index, x, c)
        tensors[f"{name}.timesteps"] = scheduler.timesteps.to(torch.float64)
        tensors[f"{name}.sigmas"] = scheduler.sigmas
        tensors[f"{name}.prev_samples"] = run64
        tensors[f"{name}.prev_samples.f32"] = run32
        finite = [bool(torch.isfinite(run64[i]).all()) for i in range(steps)]
        listing.append({"name": name, "inputs": fixture, "config": config, "steps": steps,
                        "begin_index": begin_index, "finite_steps": finite})
    (HERE / "reference_cases.json").write_text(json.dumps(listing, indent=1) + "\n")
    write_safetensors(HERE / "reference_cases.safetensors", tensors)


if __name__ == "__main__":
    main()
