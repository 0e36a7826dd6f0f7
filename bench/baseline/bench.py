#!/usr/bin/env python3
"""Side-by-side benchmark: `rollout run` against the Python agent loop
(agent_loop.py), both playing GuessTheNumber against one stand-in model
server (`rollout toyllm`) in its own process. scripts/bench-baseline.sh
builds rollout and runs this.

For each model setting and each concurrency, it starts one stand-in server
and runs the two sides interleaved (rollfleet, Python, rollfleet, Python,
...), each as a child process. Per run it reports turns/s, the child's CPU
(user + system, from wait4's rusage) per turn and peak RSS, the stand-in's
CPU per turn apart (from /proc/PID/stat), the mean turns per episode, and
the fraction of the server's generation slots that were busy (from the
stand-in's toyllm:running_seconds_total), over the whole run and over its
middle half. It ends with the medians per side and their ratios.

Standard library only (the Python side needs aiohttp).
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TICKS = os.sysconf("SC_CLK_TCK")
TURNS = re.compile(rb'"turns":\s*(\d+)')


def proc_cpu(pid):
    """CPU seconds (user + system) of a live process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def scrape(url):
    """The stand-in's running seconds and concurrency cap, from /metrics."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    values = {}
    for line in text.splitlines():
        if line.startswith("toyllm:"):
            name = line.split("{", 1)[0]
            values[name] = float(line.rsplit(" ", 1)[1])
    return values.get("toyllm:running_seconds_total", 0.0), values.get("toyllm:max_concurrent", 0.0)


class Toy:
    """One `rollout toyllm` process."""

    def __init__(self, rollout, latency, max_concurrent):
        args = [rollout, "toyllm", "--listen", "127.0.0.1:0", "--log-level", "warn"]
        if latency:
            args += ["--latency", latency]
        if max_concurrent:
            args += ["--max-concurrent", str(max_concurrent)]
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        m = re.search(r"http://[0-9.:]+", line)
        if not m:
            self.p.kill()
            raise SystemExit(f"stand-in model did not start: {line!r}")
        self.url = m.group(0)

    def stop(self):
        self.p.terminate()
        self.p.wait()


def run_side(cmd, toy, out):
    """Runs one side to the end; returns its measurements."""
    busy0, slots = scrape(toy.url)
    toy_cpu0 = proc_cpu(toy.p.pid)
    samples, stop = [], threading.Event()

    def sample():
        while not stop.wait(0.5):
            samples.append((time.monotonic(), scrape(toy.url)[0]))

    start = time.monotonic()
    samples.append((start, busy0))
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    sampler = threading.Thread(target=sample)
    sampler.start()
    err = child.stderr.read()
    _, status, ru = os.wait4(child.pid, 0)
    wall = time.monotonic() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    stop.set()
    sampler.join()
    busy1, _ = scrape(toy.url)
    toy_cpu = proc_cpu(toy.p.pid) - toy_cpu0
    samples.append((time.monotonic(), busy1))
    if child.returncode != 0:
        sys.stderr.write(err.decode(errors="replace"))
        raise SystemExit(f"{cmd[0]} exited with status {child.returncode}")
    episodes = turns = 0
    with open(out, "rb") as f:
        for line in f:
            m = TURNS.search(line)
            episodes += 1
            turns += int(m.group(1)) if m else 0
    r = {"wall": wall, "turns": turns, "episodes": episodes, "cpu": ru.ru_utime + ru.ru_stime,
         "rss_mb": ru.ru_maxrss / 1024, "toy_cpu": toy_cpu, "busy": None, "busy_mid": None}
    if slots > 0:
        r["busy"] = (busy1 - busy0) / (wall * slots)
        lo, hi = start + wall / 4, start + 3 * wall / 4
        mid = [s for s in samples if lo <= s[0] <= hi]
        if len(mid) >= 2:
            r["busy_mid"] = (mid[-1][1] - mid[0][1]) / ((mid[-1][0] - mid[0][0]) * slots)
    return r


def pct(v):
    return "-" if v is None else f"{100 * v:.1f}%"


def row(side, r):
    return (f"| {side} | {r['turns'] / r['wall']:,.0f} | {1000 * r['cpu'] / r['turns']:.3f} | "
            f"{1000 * r['toy_cpu'] / r['turns']:.3f} | {r['turns'] / r['episodes']:.2f} | {r['rss_mb']:,.0f} | "
            f"{pct(r['busy'])} | {pct(r['busy_mid'])} | {r['wall']:.1f} s |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rollout", required=True, help="the rollout binary")
    p.add_argument("--episodes", type=int, default=2000)
    p.add_argument("--concurrency", default="512", help="comma-separated concurrencies")
    p.add_argument("--models", default="0,10ms/256",
                   help="comma-separated stand-in settings: LATENCY[/MAX_CONCURRENT], 0 for none")
    p.add_argument("--rounds", type=int, default=2, help="A/B pairs per setting")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--workdir", required=True, help="where the runs write their trajectories")
    p.add_argument("--run-flags", default="", help="extra flags for rollout run, space-separated")
    a = p.parse_args()
    summary = []
    for model in a.models.split(","):
        latency, _, slots = model.partition("/")
        latency = "" if latency == "0" else latency
        for conc in (int(c) for c in a.concurrency.split(",")):
            toy = Toy(a.rollout, latency, int(slots or 0))
            title = (f"stand-in at {latency or 'zero latency'}"
                     + (f", {slots} sequences at once" if slots else "")
                     + f"; {a.episodes} episodes at concurrency {conc}")
            print(f"\n### {title}\n")
            print("| side | turns/s | CPU ms/turn | model server CPU ms/turn | turns/episode | peak RSS MB "
                  "| server busy | busy, middle half | wall |")
            print("|---|---|---|---|---|---|---|---|---|")
            runs = {"rollfleet": [], "python": []}
            try:
                for rnd in range(a.rounds):
                    seed = a.seed + rnd
                    out = os.path.join(a.workdir, "rollfleet.jsonl")
                    cmd = [a.rollout, "run", "--env", "game:GuessTheNumber-v0", "--episodes", str(a.episodes),
                           "--concurrency", str(conc), "--seed", str(seed), "--vllm", toy.url, "--out", out]
                    r = run_side(cmd + a.run_flags.split(), toy, out)
                    runs["rollfleet"].append(r)
                    print(row("rollfleet", r), flush=True)
                    out = os.path.join(a.workdir, "python.jsonl")
                    cmd = [a.python, os.path.join(HERE, "agent_loop.py"), "--url", toy.url, "--episodes",
                           str(a.episodes), "--concurrency", str(conc), "--seed", str(seed), "--out", out]
                    r = run_side(cmd, toy, out)
                    runs["python"].append(r)
                    print(row("python", r), flush=True)
            finally:
                toy.stop()
            med = {side: {k: statistics.median(r[k] / r["turns"] if k in ("cpu", "toy_cpu") else
                                               r["turns"] / r["wall"] if k == "wall" else r[k] for r in rs)
                          for k in ("wall", "cpu", "toy_cpu")} for side, rs in runs.items()}
            f, py = med["rollfleet"], med["python"]
            summary.append(f"| {title} | {f['wall']:,.0f} / {py['wall']:,.0f} = {f['wall'] / py['wall']:.2f}x | "
                           f"{1000 * f['cpu']:.3f} / {1000 * py['cpu']:.3f} = {f['cpu'] / py['cpu']:.2f} |")
    print("\n### medians: rollfleet / python\n")
    print("| setting | turns/s | CPU ms per turn |")
    print("|---|---|---|")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
