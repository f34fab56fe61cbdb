"""vllm-omni's per-request overrides of the expert switch (boundary_ratio) and
the scheduler's shift (flow_shift): they change the frames exactly as the
model's own values would, and an Omni-wide value applies to every request."""

import numpy as np

import omni
from conftest import MODEL, PROMPT, STEPS


def test_the_models_own_values_given_explicitly_change_nothing(engine):
    # tiny-shapes: boundary_ratio 0.875 (model_index.json), shift 3.0 (scheduler_config.json).
    plain = engine.generate(PROMPT, num_inference_steps=STEPS, seed=3)
    same = engine.generate(PROMPT, num_inference_steps=STEPS, seed=3,
                           boundary_ratio=0.875, flow_shift=3.0)
    assert np.array_equal(plain, same)


def test_each_override_changes_the_frames(engine):
    plain = engine.generate(PROMPT, num_inference_steps=STEPS, seed=3)
    shifted = engine.generate(PROMPT, num_inference_steps=STEPS, seed=3, flow_shift=1.0)
    switched = engine.generate(PROMPT, num_inference_steps=STEPS, seed=3, boundary_ratio=0.1)
    assert not np.array_equal(plain, shifted)
    assert not np.array_equal(plain, switched)
    assert not np.array_equal(shifted, switched)


def test_an_omni_wide_override_applies_to_every_request(engine):
    wanted = engine.generate(PROMPT, num_inference_steps=STEPS, seed=3, flow_shift=1.0)
    with omni.Omni(MODEL, enable_cpu_offload=True, flow_shift=1.0) as shifted_engine:
        got = shifted_engine.generate(PROMPT, num_inference_steps=STEPS, seed=3)
        own = shifted_engine.generate(PROMPT, num_inference_steps=STEPS, seed=3, flow_shift=3.0)
    assert np.array_equal(wanted, got)
    assert np.array_equal(own, engine.generate(PROMPT, num_inference_steps=STEPS, seed=3))
