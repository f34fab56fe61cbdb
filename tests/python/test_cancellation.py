"""A KeyboardInterrupt cancels a request at the next step, the engine stays usable, and the
GIL is released while the engine works (Note [The GIL and cancellation] in omni_module.cpp)."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from conftest import MODEL, PROMPT, STEPS


def reference(engine):
    return engine.generate(PROMPT, num_inference_steps=STEPS, seed=9)


def test_a_callback_raising_keyboard_interrupt_stops_at_that_step(engine):
    expected = reference(engine)
    steps = []

    def callback(step, total):
        steps.append(step)
        if step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        engine.generate(PROMPT, num_inference_steps=8, callback=callback)
    assert steps == [1, 2]
    # Usable afterwards, and nothing of the cancelled request leaks into the next one.
    assert np.array_equal(reference(engine), expected)


def test_any_callback_exception_cancels_and_is_raised_as_it_was(engine):
    class Stop(Exception):
        pass

    steps = []

    def callback(step, total):
        steps.append(step)
        raise Stop("from the callback")

    with pytest.raises(Stop, match="from the callback"):
        engine.generate(PROMPT, num_inference_steps=4, callback=callback)
    assert steps == [1]


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt, as in a terminal (a background job ignores it)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_sigint_during_a_request_cancels_it(engine, sigint_raises):
    expected = reference(engine)
    steps = []

    def callback(step, total):
        steps.append(step)
        if step == 3:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        engine.generate(PROMPT, num_inference_steps=8, callback=callback)
    assert steps[-1] in (3, 4)  # raised in the callback, or at the next step's check
    assert np.array_equal(reference(engine), expected)


# The child's callback is a dict's __setitem__: C code only, so no Python bytecode runs on the
# main thread between steps, and the signal handler can only run where the binding checks for
# it (PyErr_CheckSignals at each step). Another thread says when the first step is done
# (signal handlers never run on it).
CTRL_C_CHILD = textwrap.dedent(
    """
    import signal
    import sys
    import threading
    import time
    from omni import Omni

    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    omni = Omni(sys.argv[1], enable_cpu_offload=True)
    progress = {}

    def announce():
        while 1 not in progress:
            time.sleep(0.001)
        print("running", flush=True)

    threading.Thread(target=announce, daemon=True).start()
    try:
        omni.generate(sys.argv[2], num_inference_steps=200, callback=progress.__setitem__)
        print("finished")
    except KeyboardInterrupt:
        print("cancelled")
    print("steps", len(progress))
    print("then", omni.generate(sys.argv[2], num_inference_steps=1, num_frames=1).shape)
    """
)


def test_ctrl_c_cancels_a_request_at_the_next_step(tmp_path):
    """The user's case: SIGINT arrives while the engine computes."""
    script = tmp_path / "child.py"
    script.write_text(CTRL_C_CHILD)
    child = subprocess.Popen(
        [sys.executable, script, MODEL, PROMPT], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.stdout.readline() == "running\n"
    child.send_signal(signal.SIGINT)
    out, _ = child.communicate(timeout=300)
    assert child.returncode == 0, out
    cancelled, steps, then = out.splitlines()
    assert cancelled == "cancelled", out
    assert int(steps.split()[1]) < 199, out
    assert then == "then (1, 64, 64, 3)", out


def test_the_gil_is_released_while_the_engine_works(engine):
    """A watcher thread samples the main thread's Python frame between the first and the last
    step. Holding the GIL through the engine's work, the main thread would only let it run
    inside the callback (frame `callback`); released, it sees the main thread in `generate`."""
    main = threading.get_ident()
    seen = set()
    state = {"between_steps": False, "done": False}

    def watch():
        while not state["done"]:
            if state["between_steps"]:
                seen.add(sys._current_frames()[main].f_code.co_name)
            time.sleep(0.001)

    def callback(step, total):
        state["between_steps"] = step < total

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        engine.generate(PROMPT, num_inference_steps=10, callback=callback)
    finally:
        state["done"] = True
        watcher.join()
    assert "generate" in seen, seen


def test_two_threads_share_one_omni_one_request_at_a_time(engine):
    expected = reference(engine)
    results = [None, None]

    def run(i):
        results[i] = reference(engine)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(r, expected) for r in results)
