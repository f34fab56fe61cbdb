"""omni.Omni.generate on the bundled models/tiny-shapes: outputs, seeds, progress, parity with
the CLI (the same PNG bytes and the same report)."""

import json
import subprocess

import numpy as np
import pytest

import omni
from conftest import MODEL, PROMPT, STEPS


def test_generate_returns_float_frames_in_unit_range(engine):
    frames = engine.generate(PROMPT, num_inference_steps=STEPS, seed=7)
    assert isinstance(frames, np.ndarray)
    assert frames.dtype == np.float32
    assert frames.shape == (9, 64, 64, 3)  # the model's omni_defaults.json
    assert frames.min() >= 0.0 and frames.max() <= 1.0
    assert frames.std() > 0.01  # a picture, not a constant


def test_request_fields_reach_the_engine(engine):
    frames = engine.generate(PROMPT, num_inference_steps=STEPS, height=32, width=48, num_frames=5)
    assert frames.shape == (5, 32, 48, 3)
    steps = []
    engine.generate(PROMPT, num_inference_steps=4, num_frames=1, callback=lambda s, t: steps.append((s, t)))
    assert steps == [(1, 4), (2, 4), (3, 4), (4, 4)]


def test_same_seed_same_frames_other_seed_other_frames(engine):
    a = engine.generate(PROMPT, num_inference_steps=STEPS, num_frames=1, seed=3)
    b = engine.generate(PROMPT, num_inference_steps=STEPS, num_frames=1, seed=3)
    c = engine.generate(PROMPT, num_inference_steps=STEPS, num_frames=1, seed=4)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_guidance_and_negative_prompt_change_the_frames(engine):
    base = engine.generate(PROMPT, num_inference_steps=STEPS, num_frames=1, seed=5)
    for change in ({"guidance_scale": 1.5}, {"guidance_scale_2": 1.5}, {"negative_prompt": "blue"}):
        other = engine.generate(PROMPT, num_inference_steps=STEPS, num_frames=1, seed=5, **change)
        assert not np.array_equal(base, other), change


def test_a_torch_generator_is_honoured_through_its_initial_seed(engine):
    torch = pytest.importorskip("torch")
    by_seed = engine.generate(PROMPT, num_inference_steps=STEPS, num_frames=1, seed=11)
    by_generator = engine.generate(
        PROMPT, num_inference_steps=STEPS, num_frames=1, generator=torch.Generator().manual_seed(11)
    )
    assert np.array_equal(by_seed, by_generator)
    with pytest.raises(omni.InvalidRequest, match="seed=12"):
        engine.generate(PROMPT, seed=12, generator=torch.Generator().manual_seed(11))


def test_output_types(engine):
    frames = engine.generate(PROMPT, num_inference_steps=STEPS, num_frames=5, seed=2)
    images = engine.generate(PROMPT, num_inference_steps=STEPS, num_frames=5, seed=2, output_type="pil")
    assert len(images) == 5 and images[0].size == (64, 64) and images[0].mode == "RGB"
    assert np.array_equal(np.stack([np.asarray(i) for i in images]), np.rint(frames * 255).astype(np.uint8))
    torch = pytest.importorskip("torch")
    tensor = engine.generate(PROMPT, num_inference_steps=STEPS, num_frames=5, seed=2, output_type="pt")
    assert isinstance(tensor, torch.Tensor) and tensor.dtype == torch.float32
    assert np.array_equal(tensor.numpy(), frames)
    with pytest.raises(ValueError, match="latent"):
        engine.generate(PROMPT, output_type="latent")


def test_the_same_seed_writes_the_same_png_and_report_as_the_cli(omni_binary, tmp_path):
    cli_png, cli_report = tmp_path / "cli.png", tmp_path / "cli.json"
    subprocess.run(
        [omni_binary, "generate", MODEL, "--prompt", PROMPT, "--seed", "7", "--steps", str(STEPS),
         "--enable-cpu-offload", "--output", cli_png, "--report-json", cli_report, "--quiet"],
        check=True,
    )
    with omni.Omni(MODEL, enable_cpu_offload=True) as fresh:  # the CLI's first request, too
        frames = fresh.generate(PROMPT, seed=7, num_inference_steps=STEPS)
        report = fresh.offload_report()
    written = omni.save_image(frames, tmp_path / "py.png")
    assert [p.name for p in written] == ["py.png"]
    assert (tmp_path / "py.png").read_bytes() == cli_png.read_bytes()

    expected = json.loads(cli_report.read_text())
    assert report.keys() == expected.keys()
    timing = {"seconds", "gbps", "upload_seconds", "exposed_transfer_seconds", "hidden_transfer_seconds"}

    def untimed(value):
        if isinstance(value, dict):
            return {k: untimed(v) for k, v in value.items() if k not in timing}
        if isinstance(value, list):
            return [untimed(v) for v in value]
        return value

    assert untimed(report) == untimed(expected)
    assert report["strategy"] == "model-level" and report["simulated"] is True
    assert report["pinned_host_bytes"] > 0 and report["d2h_bytes"] == 0


def test_streaming_and_whole_swaps_give_the_same_frames_and_report_exposure():
    frames, exposed = {}, {}
    for streaming in ("on", "off"):
        with omni.Omni(MODEL, enable_cpu_offload=True, offload_streaming=streaming,
                       sim_link_gbps=1.0) as e:
            frames[streaming] = e.generate(PROMPT, num_inference_steps=STEPS, num_frames=1, seed=9)
            report = e.offload_report()
        assert report["streaming"] == (streaming == "on")
        exposed[streaming] = report["exposed_transfer_seconds"]
        for c in report["components"]:
            assert "exposed_transfer_seconds" in c and "hidden_transfer_seconds" in c
    assert np.array_equal(frames["on"], frames["off"])
    # Whole swaps make compute wait for every upload; streaming hides part.
    assert exposed["on"] < exposed["off"], exposed
    with pytest.raises(omni.ConfigError, match="offload_streaming"):
        omni.Omni(MODEL, enable_cpu_offload=True, offload_streaming="sometimes")


def test_a_host_memory_budget_maps_homes_and_keeps_the_frames():
    request = dict(num_inference_steps=STEPS, num_frames=1, seed=4)
    with omni.Omni(MODEL, enable_cpu_offload=True) as e:
        reference = e.generate(PROMPT, **request)
        assert e.offload_report()["mapped_host_bytes"] == 0
    with omni.Omni(MODEL, enable_cpu_offload=True, host_memory_budget="3MiB",
                   pinned_staging="1MiB") as e:
        frames = e.generate(PROMPT, **request)
        report = e.offload_report()
    assert np.array_equal(frames, reference)
    assert report["mapped_host_bytes"] > 0
    assert report["staging_host_bytes"] == 1 << 20
    kinds = {c["name"]: c["home"] for c in report["host_plan"]["components"]}
    assert "mapped" in kinds.values() and "pinned" in kinds.values(), kinds
    with pytest.raises(omni.ConfigError, match="staging"):
        omni.Omni(MODEL, enable_cpu_offload=True, host_memory_budget="1MiB",
                  pinned_staging="2MiB")


def test_budget_layerwise_and_auto_modes_give_the_same_frames():
    shaped = "example:wan-shaped"  # blocks large against its VAE, unlike tiny-shapes
    request = dict(num_inference_steps=2, height=32, width=32, num_frames=5, seed=9)
    with omni.Omni(shaped, device="cpu") as e:
        reference = e.generate(PROMPT, **request)
    with omni.Omni(shaped, enable_cpu_offload=True, device="sim") as e:
        transformer = max(c["bytes"] for c in e.offload_report()["components"])
    modes = {
        "budget": dict(device_memory_budget=transformer * 3 // 2),
        "layerwise": dict(enable_layerwise_offload=True, sim_memory=transformer - 1,
                          prefetch_blocks=2),
        "auto": dict(offload="auto", sim_memory=transformer - 1),
    }
    for name, keywords in modes.items():
        with omni.Omni(shaped, device="sim", **keywords) as e:
            frames = e.generate(PROMPT, **request)
            report = e.offload_report()
        assert np.array_equal(frames, reference), name
        assert report["strategy"] == ("layerwise" if name == "auto" else name), name
    with pytest.raises(omni.ConfigError, match="offload"):
        omni.Omni(shaped, device="sim", offload="sometimes")
    with pytest.raises(omni.ConfigError, match="budget"):
        omni.Omni(shaped, device="sim", device_memory_budget=1024)
