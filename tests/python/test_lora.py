"""LoRAs fused at load (Omni(lora=...)) and the lightning preset, through the Python API:
the same dicts and frames as the C++ engine (tests/engine/lora_engine_test.cpp)."""

import json
import struct

import numpy as np
import pytest

import omni
from conftest import MODEL, PROMPT, STEPS

SHAPED = "example:wan-shaped"


def write_safetensors(path, tensors):
    """A float32 safetensors file from {name: numpy array}, written by hand (no torch needed)."""
    header, data, offset = {}, b"", 0
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(np.shape(array)), "data_offsets": [offset, offset + len(raw)]}
        data += raw
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


@pytest.fixture
def shaped_lora(tmp_path):
    rng = np.random.default_rng(5)
    return write_safetensors(tmp_path / "shaped.safetensors", {
        "transformer.blocks.0.fc1.lora_A.weight": rng.standard_normal((8, 128)),
        "transformer.blocks.0.fc1.lora_B.weight": rng.standard_normal((384, 8)),
    })


def test_scale_zero_gives_the_base_frames_and_the_report_lists_it(shaped_lora):
    kwargs = dict(device="sim", enable_cpu_offload=True)
    with omni.Omni(SHAPED, **kwargs) as base:
        expected = base.generate(PROMPT, num_inference_steps=2, seed=4)
        base_report = base.offload_report()
    with omni.Omni(SHAPED, lora={"transformer": (shaped_lora, 0.0)}, **kwargs) as zero:
        assert np.array_equal(zero.generate(PROMPT, num_inference_steps=2, seed=4), expected)
    with omni.Omni(SHAPED, lora={"transformer_2": str(shaped_lora), "transformer": (shaped_lora, 0.5)},
                   **kwargs) as fused:
        frames = fused.generate(PROMPT, num_inference_steps=2, seed=4)
        report = fused.offload_report()
    assert not np.array_equal(frames, expected)
    assert report["h2d_bytes"] == base_report["h2d_bytes"]
    assert [(l["component"], l["scale"], l["tensors"]) for l in report["loras"]] == [
        ("transformer_2", 1.0, 1), ("transformer", 0.5, 1)]
    assert base_report["loras"] == []


def test_bad_loras_raise_typed_errors(tmp_path, shaped_lora):
    with pytest.raises(omni.ConfigError, match="no component 'unet'"):
        omni.Omni(SHAPED, device="cpu", lora={"unet": shaped_lora})
    with pytest.raises(omni.FormatError):
        omni.Omni(SHAPED, device="cpu", lora={"transformer": tmp_path / "absent.safetensors"})
    other = write_safetensors(tmp_path / "other.safetensors", {"lora_unet_mid.lora_down.weight": np.ones((2, 2))})
    with pytest.raises(omni.FormatError, match="no key matches"):
        omni.Omni(SHAPED, device="cpu", lora={"transformer": other})
    with pytest.raises(omni.ConfigError):
        omni.Omni(SHAPED, device="cpu", lora={"transformer": (shaped_lora, 1.0, 2.0)})


def test_the_lightning_preset_is_its_settings_under_the_requests_own(engine):
    explicit = engine.generate(PROMPT, num_inference_steps=4, guidance_scale=1.0, flow_shift=5.0, seed=3)
    assert np.array_equal(engine.generate(PROMPT, preset="lightning", seed=3), explicit)
    own = engine.generate(PROMPT, num_inference_steps=STEPS, guidance_scale=1.0, flow_shift=5.0, seed=3)
    assert np.array_equal(engine.generate(PROMPT, preset="lightning", num_inference_steps=STEPS, seed=3), own)
    with pytest.raises(omni.InvalidRequest, match="unknown preset"):
        engine.generate(PROMPT, preset="turbo")


def test_an_omni_wide_preset_applies_to_every_request():
    with omni.Omni(MODEL, device="cpu") as plain:
        explicit = plain.generate(PROMPT, num_inference_steps=4, guidance_scale=1.0, flow_shift=5.0, seed=3)
    with omni.Omni(MODEL, device="cpu", preset="lightning") as lightning:
        assert np.array_equal(lightning.generate(PROMPT, seed=3), explicit)
