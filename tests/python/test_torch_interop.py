"""omni and torch in one process: built against the torch this Python imports, the module shares
its LibTorch (one copy of libtorch*.so) and returns torch tensors; a torch of another version is
refused at import with both versions named (omni/_build.py, python/CMakeLists.txt)."""

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

import omni
from conftest import MODEL, PROMPT, STEPS
from omni import _build


def _torch_it_was_built_against():
    if importlib.util.find_spec("torch") is None:
        pytest.skip(f"{sys.executable} has no torch (the module was built against LibTorch {_build.TORCH_VERSION})")
    import torch

    if omni._release(torch.__version__) != omni._release(_build.TORCH_VERSION):
        pytest.skip(f"this Python's torch is {torch.__version__}, the module's LibTorch {_build.TORCH_VERSION}")
    return torch


def _run(code: str) -> subprocess.CompletedProcess:
    """code in a fresh interpreter (a process that has not imported omni or torch yet)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=300)


def test_torch_then_omni_share_one_libtorch_and_pt_is_a_torch_tensor():
    _torch_it_was_built_against()
    r = _run(f"""
        import torch
        import omni
        with omni.Omni({MODEL!r}, enable_cpu_offload=True) as engine:
            frames = engine.generate({PROMPT!r}, num_inference_steps={STEPS}, num_frames=1, seed=7,
                                     output_type="pt")
        assert isinstance(frames, torch.Tensor), type(frames)
        assert frames.dtype == torch.float32 and tuple(frames.shape[-1:]) == (3,), frames.shape
        # Every LibTorch library mapped into the process, by real path: one file each.
        import collections, os
        paths = collections.defaultdict(set)
        for line in open("/proc/self/maps"):
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            name = os.path.basename(path)
            if name.startswith(("libtorch_cpu.so", "libc10.so", "libtorch_cuda.so", "libcudart.so")):
                paths[name.split(".so")[0]].add(os.path.realpath(path))
        assert paths["libtorch_cpu"] and paths["libc10"], dict(paths)
        assert all(len(p) == 1 for p in paths.values()), dict(paths)
        print("ok", dict(paths))
        """)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("ok"), r.stdout


def test_omni_then_torch_also_works():
    _torch_it_was_built_against()
    r = _run("""
        import omni
        import torch
        assert isinstance(torch.zeros(2) + 1, torch.Tensor)
        print("ok")
        """)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_torch_of_another_version_is_an_import_error_naming_both():
    # A stand-in torch module of another version, imported before omni.
    r = _run("""
        import sys, types
        sys.modules["torch"] = types.SimpleNamespace(__version__="0.9.1+fake", __file__="/fake/torch/__init__.py")
        try:
            import omni
        except ImportError as e:
            print(e)
        else:
            raise SystemExit("omni imported beside torch 0.9.1")
        """)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0.9.1+fake" in r.stdout and _build.TORCH_VERSION in r.stdout, r.stdout


def test_the_check_reads_the_running_torch_version():
    assert omni._release("2.15.0+cu132") == (2, 15, 0)
    assert omni._release("1.13.0a0+gitunknown") == (1, 13, 0)
    assert omni._release(_build.TORCH_VERSION) is not None
