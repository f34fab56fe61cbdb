"""Errors are Python exceptions with the C++ message, never a crash."""

import shutil

import pytest

import omni
from omni import _omni
from conftest import MODEL, PROMPT, STEPS


def test_the_error_classes_are_the_standard_ones_too():
    assert issubclass(omni.ConfigError, ValueError)
    assert issubclass(omni.FormatError, ValueError)
    assert issubclass(omni.InvalidRequest, ValueError)
    assert issubclass(omni.DeviceOutOfMemory, MemoryError)
    assert issubclass(omni.ResidencyViolation, RuntimeError)
    assert issubclass(omni.NonResidentWeightAccess, omni.ResidencyViolation)
    for cls in (omni.ConfigError, omni.FormatError, omni.InvalidRequest, omni.DeviceOutOfMemory,
                omni.ResidencyViolation):
        assert issubclass(cls, omni.Error)


@pytest.mark.parametrize(
    "kind, python_class",
    [
        ("ConfigError", omni.ConfigError),
        ("FormatError", omni.FormatError),
        ("InvalidRequest", omni.InvalidRequest),
        ("DeviceOutOfMemory", omni.DeviceOutOfMemory),
        ("ResidencyViolation", omni.ResidencyViolation),
        ("NonResidentWeightAccess", omni.NonResidentWeightAccess),
        ("Error", omni.Error),
        ("Cancelled", KeyboardInterrupt),
        ("InternalError", RuntimeError),
    ],
)
def test_every_cpp_error_becomes_its_python_class_with_the_message(kind, python_class):
    with pytest.raises(python_class) as raised:
        _omni._throw_for_test(kind, f"the {kind} message")
    assert type(raised.value) is python_class
    assert str(raised.value) == f"the {kind} message"


def test_unknown_keywords_are_type_errors_naming_them(engine):
    with pytest.raises(TypeError, match="enable_offload"):
        omni.Omni(MODEL, enable_offload=True)
    with pytest.raises(TypeError, match="steps"):
        engine.generate(PROMPT, steps=3)


def test_vllm_omni_overrides_out_of_range_are_invalid_requests_naming_them(engine):
    for keyword, bad in (("boundary_ratio", 1.5), ("flow_shift", -1.0)):
        with pytest.raises(omni.InvalidRequest, match=keyword):
            engine.generate(PROMPT, num_inference_steps=1, **{keyword: bad})
    # The built-in example's schedule is fixed: it refuses both.
    with omni.Omni("example:wan-shaped", flow_shift=5.0) as example:
        with pytest.raises(omni.InvalidRequest, match="flow_shift"):
            example.generate(PROMPT, num_inference_steps=1, num_frames=1)
    with omni.Omni(MODEL, vae_use_tiling=False) as untiled:  # what the engine does
        assert untiled.generate(PROMPT, num_inference_steps=1, num_frames=1).shape == (1, 64, 64, 3)


def test_configuration_errors():
    with pytest.raises(omni.ConfigError, match="tpu"):
        omni.Omni(MODEL, device="tpu")
    with pytest.raises(omni.ConfigError, match="int8"):
        omni.Omni(MODEL, dtype="int8")
    with pytest.raises(omni.ConfigError, match="'unet'"):
        omni.Omni(MODEL, dtype={"unet": "bfloat16"})
    with pytest.raises(omni.ConfigError, match="float64"):
        omni.Omni(MODEL, dtype={"vae": "float64"})
    with pytest.raises(omni.ConfigError, match="byte size"):
        omni.Omni(MODEL, sim_memory="lots")


def test_missing_and_corrupt_models(tmp_path):
    with pytest.raises(omni.ConfigError, match="no-such-model"):
        omni.Omni(str(tmp_path / "no-such-model"))
    broken = tmp_path / "broken"
    shutil.copytree(MODEL, broken)
    weights = broken / "transformer" / "diffusion_pytorch_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(omni.FormatError, match="safetensors"):
        omni.Omni(str(broken))


def test_invalid_requests_run_nothing(engine):
    steps = []
    for bad in ({"height": 63}, {"width": 0}, {"num_frames": 4}, {"num_inference_steps": 0}):
        with pytest.raises(omni.InvalidRequest):
            engine.generate(PROMPT, callback=lambda s, t: steps.append(s), **bad)
    with pytest.raises(omni.InvalidRequest, match="seed"):
        engine.generate(PROMPT, seed=-1)
    assert steps == []
    assert engine.generate(PROMPT, num_inference_steps=1, num_frames=1).shape == (1, 64, 64, 3)


def test_a_device_too_small_is_out_of_memory():
    with pytest.raises(omni.DeviceOutOfMemory, match="sim-memory"):
        with omni.Omni(MODEL, enable_cpu_offload=True, sim_memory="1MiB") as small:
            small.generate(PROMPT, num_inference_steps=1, num_frames=1)


def test_a_closed_omni_refuses_calls(engine):
    closed = omni.Omni(MODEL)
    closed.close()
    closed.close()  # idempotent
    assert closed.closed
    with pytest.raises(RuntimeError, match="closed"):
        closed.generate(PROMPT)
    with pytest.raises(RuntimeError, match="closed"):
        closed.offload_report()


def test_calling_back_into_the_same_omni_from_its_callback_is_refused(engine):
    def callback(step, total):
        engine.offload_report()

    with pytest.raises(RuntimeError, match="own progress callback"):
        engine.generate(PROMPT, num_inference_steps=1, num_frames=1, callback=callback)
