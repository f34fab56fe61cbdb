#!/usr/bin/env python3
"""Header floods against a real `omni serve`: what they cost in memory.

A flood is a connection that sends a request line, a Host, then endless
`X: v` header lines as fast as the server takes them (issue 34, D2). For each
flood count (32 and 128 by default) the program opens that many floods at
once against one fresh server and samples the server's RSS (/proc/PID/status)
every 50 ms until every flood was cut (or --seconds passed), then again once
they are gone. It prints a table and writes JSON:

  floods           how many at once
  rss before       after one answered /health (MiB)
  peak growth      highest RSS during the floods, minus before (MiB)
  after growth     RSS 2 s after the last flood ended, minus before (MiB)
  431              floods answered 431 (the rest: closed or reset unanswered)
  KiB sent         median bytes a flood got into its socket before the cut (the
                   kernel buffers a few MiB of them on loopback)
  cut (s)          the slowest flood's time from its first byte to the cut
  /health (ms)     one probe 0.5 s into the floods (503 past --max-connections;
                   "-" when every flood was cut before then)

A program, not a test: the figures are measurements of this machine. Target
(issue 34): 32 floods grow RSS by at most 200 MB.

  python3 bench/serve/header_flood.py --omni build/bin/omni \
      [--floods 32,128] [--seconds 20] [--receive-timeout 30] [--json PATH]
"""
import argparse
import json
import os
import re
import select
import socket
import statistics
import subprocess
import sys
import time

HEAD = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
BLOCK = b"X: v\r\n" * 2730  # 16 KiB of fields per send


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def start_server(args):
    cmd = [args.omni, "serve", args.model, "--enable-cpu-offload", "--device", "sim",
           "--port", "0", "--receive-timeout", str(args.receive_timeout),
           "--max-connections", str(args.max_connections)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.time() + 120
    text = ""
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        text += line
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", text)
        if m:
            return proc, int(m.group(1))
    proc.kill()
    sys.exit(f"omni serve did not print its port: {text}")


def get_health(port, timeout=10.0):
    start = time.time()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        status = int(data[9:12]) if data.startswith(b"HTTP/1.1 ") else 0
    except OSError:
        status = 0
    return status, (time.time() - start) * 1e3


class Flood:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setblocking(False)
        self.pending = HEAD
        self.sent = 0
        self.received = b""
        self.started = time.time()
        self.ended = None

    def pump(self, writable, readable):
        if self.ended is not None:
            return
        try:
            if readable:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return self.end()
                self.received += chunk
            if writable:
                if not self.pending:
                    self.pending = BLOCK
                n = self.sock.send(self.pending)
                self.sent += n
                self.pending = self.pending[n:]
        except BlockingIOError:
            pass
        except OSError:
            self.end()

    def end(self):
        self.ended = time.time()
        self.sock.close()

    def status(self):
        r = self.received
        return int(r[9:12]) if r.startswith(b"HTTP/1.1 ") and len(r) >= 12 else 0


def run_floods(args, count):
    proc, port = start_server(args)
    try:
        get_health(port)
        before = rss_bytes(proc.pid)
        floods = [Flood(port) for _ in range(count)]
        peak = before
        probe = None
        start = last_sample = time.time()
        while any(f.ended is None for f in floods) and time.time() - start < args.seconds:
            live = [f for f in floods if f.ended is None]
            r, w, _ = select.select([f.sock for f in live], [f.sock for f in live], [], 0.05)
            rs, ws = set(r), set(w)
            for f in live:
                f.pump(f.sock in ws, f.sock in rs)
            if time.time() - last_sample >= 0.05:
                peak = max(peak, rss_bytes(proc.pid))
                last_sample = time.time()
            if probe is None and time.time() - start > 0.5:
                probe = get_health(port, timeout=5.0)
        for f in floods:
            if f.ended is None:
                f.end()
        peak = max(peak, rss_bytes(proc.pid))
        time.sleep(2)
        after = rss_bytes(proc.pid)
        cut = [f.ended - f.started for f in floods]
        return {
            "floods": count,
            "rss_before_mib": before / 2**20,
            "peak_growth_mib": (peak - before) / 2**20,
            "after_growth_mib": (after - before) / 2**20,
            "answered_431": sum(f.status() == 431 for f in floods),
            "median_kib_sent": statistics.median(f.sent for f in floods) / 1024,
            "slowest_cut_s": max(cut),
            "all_cut": all(c < args.seconds for c in cut),
            "health_status": probe[0] if probe else None,
            "health_ms": probe[1] if probe else None,
        }
    finally:
        proc.kill()
        proc.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--omni", default="build/bin/omni")
    p.add_argument("--model", default="example:wan-shaped")
    p.add_argument("--floods", default="32,128")
    p.add_argument("--seconds", type=float, default=20.0, help="how long a flood may last at most")
    p.add_argument("--receive-timeout", type=float, default=30.0)
    p.add_argument("--max-connections", type=int, default=128)
    p.add_argument("--json", default="bench-header-flood.json")
    args = p.parse_args()
    rows = [run_floods(args, int(n)) for n in args.floods.split(",")]
    print(f"header floods against {args.omni} (--receive-timeout {args.receive_timeout:g}, "
          f"--max-connections {args.max_connections})")
    print(f"{'floods':>6} {'rss before':>10} {'peak growth':>11} {'after growth':>12} "
          f"{'431':>4} {'KiB sent':>9} {'cut (s)':>7} {'/health':>12}")
    for r in rows:
        health = (f"{r['health_status']} {r['health_ms']:.0f} ms" if r["health_ms"] is not None
                  else "-")
        print(f"{r['floods']:>6} {r['rss_before_mib']:>8.1f} M {r['peak_growth_mib']:>9.1f} M "
              f"{r['after_growth_mib']:>10.1f} M {r['answered_431']:>4} "
              f"{r['median_kib_sent']:>9.0f} "
              f"{r['slowest_cut_s']:>6.2f}{'' if r['all_cut'] else '+'} {health:>12}")
    for r in rows:
        if r["floods"] == 32:
            ok = r["peak_growth_mib"] * 2**20 <= 200e6
            print(f"target: 32 floods grow RSS by <= 200 MB: "
                  f"{'PASS' if ok else 'FAIL'} ({r['peak_growth_mib'] * 2**20 / 1e6:.1f} MB)")
    with open(args.json, "w") as f:
        json.dump({"omni": args.omni, "receive_timeout_s": args.receive_timeout,
                   "rows": rows}, f, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
