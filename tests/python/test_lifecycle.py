"""Omni objects: two in one process, close() and the context manager (the pinned host memory
comes back), the offload report."""

import ctypes
import gc
import os

import numpy as np
import pytest

import omni
from conftest import MODEL, PROMPT, STEPS


def resident_bytes():
    """The resident set after giving the allocator's free memory back to the system
    (glibc's malloc_trim), so that it counts what is in use."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_two_omni_objects_in_one_process(engine):
    with omni.Omni(MODEL, device="cpu") as plain:
        offloaded = engine.generate(PROMPT, num_inference_steps=STEPS, seed=21)
        resident = plain.generate(PROMPT, num_inference_steps=STEPS, seed=21)
        # The offload invariant: the same seed gives the same frames with and without it.
        assert np.array_equal(offloaded, resident)
        assert plain.device == "cpu" and engine.device == "sim"
        assert plain.offload_report()["strategy"] == "none"
    assert plain.closed
    assert np.array_equal(engine.generate(PROMPT, num_inference_steps=STEPS, seed=21), offloaded)


def test_close_returns_the_pinned_host_memory():
    """The weights' host homes are page-locked anonymous mappings (the report's
    pinned_host_bytes). Once a first engine has paid the one-time costs (thread pools, the
    tokenizer's module), another one holds its homes while open, and leaving the `with` block
    gives back everything it held. A close() that left the engine, or its homes, alive would
    leave at least the homes."""

    def open_generate_close():
        with omni.Omni(MODEL, enable_cpu_offload=True) as engine:
            engine.generate(PROMPT, num_inference_steps=1, num_frames=1)
            return engine.offload_report()["pinned_host_bytes"], resident_bytes()

    first_pinned, _ = open_generate_close()
    before = resident_bytes()
    pinned, held = open_generate_close()
    after = resident_bytes()
    assert pinned == first_pinned and pinned > 1 << 20
    assert held - before >= pinned
    assert after - before < pinned // 2


def test_the_report_of_the_latest_request_and_since_load():
    with omni.Omni(MODEL, enable_cpu_offload=True) as fresh:
        at_load = fresh.offload_report()
        assert "seconds" not in at_load
        assert [c["uploads"] for c in at_load["components"] if c["role"] == "vae"] == [1]
        fresh.generate(PROMPT, num_inference_steps=STEPS, num_frames=1)
        fresh.generate(PROMPT, num_inference_steps=STEPS, num_frames=1)
        latest = fresh.offload_report()
        total = fresh.offload_report(since_load=True)
    assert latest["seconds"] > 0
    assert latest["d2h_bytes"] == total["d2h_bytes"] == 0
    # Each request uploads both experts once; the VAE stayed from load; the repeated prompts
    # came from the prompt cache, so the second request never needed the encoder.
    by_name = {c["name"]: c for c in latest["components"]}
    assert {n: by_name[n]["uploads"] for n in by_name} == {
        "transformer": 1, "transformer_2": 1, "text_encoder": 0, "vae": 0}
    assert latest["prompt_cache"] == {"hits": 2, "misses": 0, "text_encoder_ran": False}
    assert total["h2d_bytes"] > 2 * latest["h2d_bytes"]
    assert sum(t["bytes"] for t in latest["transfers"]) == latest["h2d_bytes"]


def test_the_context_manager_closes_on_an_error():
    with pytest.raises(omni.InvalidRequest):
        with omni.Omni(MODEL) as scoped:
            scoped.generate(PROMPT, height=63)
    assert scoped.closed
    assert "closed" in repr(scoped)
