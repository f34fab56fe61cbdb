#!/usr/bin/env python3
"""How soon a cancelled generation frees the engine (Note [Cancel points inside a step]).

Starts a real `omni serve`, runs the largest video request its --max-cost
admits, and measures:
  1. DELETE of the running job -> the engine idle again (a tiny image request
     sent right after the DELETE completes; its own idle duration subtracted);
  2. SIGTERM with that job running -> the process gone (--shutdown-timeout T:
     the drain waits T, then cancels the job).
Prints the figures; stdlib only.

  bench/serve/cancel_latency.py --omni build/bin/omni --model models/tiny-shapes \
      [--size 512x512 --frames 113 --steps 100] [--shutdown-timeout 5] [--repeats 3]
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(base, method, path, body=None, timeout=600):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        sys.exit(f"{method} {path}: HTTP {e.code}: {e.read().decode()[:500]}")


def start(args, port):
    cmd = [args.omni, "serve", args.model, "--enable-cpu-offload", "--port", str(port),
           "--shutdown-timeout", str(args.shutdown_timeout), "--max-batch", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            call(base, "GET", "/health", timeout=2)
            return proc, base
        except Exception:
            if proc.poll() is not None:
                sys.exit("omni serve exited: " + proc.stderr.read().decode()[-2000:])
            time.sleep(0.2)
    sys.exit("omni serve did not come up")


def big_job(args, base):
    w, h = args.size.split("x")
    job = call(base, "POST", "/v1/videos", {
        "prompt": "a red circle moving right on a black background", "width": int(w),
        "height": int(h), "num_frames": args.frames, "num_inference_steps": args.steps, "seed": 1})
    # Running, and past its first cancel points: inside the encoder or a step.
    while call(base, "GET", f"/v1/videos/{job['id']}")["status"] == "queued":
        time.sleep(0.05)
    time.sleep(args.into_job)
    return job["id"]


def tiny_image(base):
    start = time.monotonic()
    call(base, "POST", "/v1/images/generations",
         {"prompt": "a dot", "size": "64x64", "num_inference_steps": 1, "seed": 3})
    return time.monotonic() - start


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--omni", default="build/bin/omni")
    p.add_argument("--model", default="models/tiny-shapes")
    p.add_argument("--size", default="512x512")
    p.add_argument("--frames", type=int, default=113)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--into-job", type=float, default=2.0, help="seconds the job runs before the cancel")
    p.add_argument("--shutdown-timeout", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()

    proc, base = start(args, free_port())
    try:
        idle = min(tiny_image(base) for _ in range(3))
        latencies = []
        for _ in range(args.repeats):
            job = big_job(args, base)
            sent = time.monotonic()
            call(base, "DELETE", f"/v1/videos/{job}")
            tiny_image(base)
            latencies.append(time.monotonic() - sent - idle)
        print(f"tiny image request when idle: {idle:.3f} s")
        print(f"DELETE of a running {args.size}x{args.frames}f x{args.steps} job -> engine idle: "
              + ", ".join(f"{x:.3f}" for x in latencies) + f" s (worst {max(latencies):.3f} s)")
        big_job(args, base)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=args.shutdown_timeout + 600)
        exited = time.monotonic() - sent
        print(f"SIGTERM with that job running -> exit: {exited:.3f} s "
              f"(--shutdown-timeout {args.shutdown_timeout}: {exited - args.shutdown_timeout:.3f} s past the drain)")
    finally:
        if proc.poll() is None:
            proc.kill()


if __name__ == "__main__":
    main()
