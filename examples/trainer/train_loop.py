#!/usr/bin/env python3
"""An asynchronous RL training loop against a rollfleet fleet.

Each iteration submits a batch of GuessTheNumber prompts with n samples per prompt, takes the
groups as they finish, computes GRPO advantages (each reward minus its group's mean, divided by
the group's standard deviation), "trains", and syncs the new weights: it pauses the fleet, pushes
them to the model server with vLLM's /update_weights, and resumes the fleet under the new policy
version. Asynchronously (the default, staleness 1), the next batch is submitted before the
current one is trained on, so the fleet generates while the trainer trains; synchronously
(--sync), the fleet idles while the trainer trains.

The model is rollfleet's stand-in, whose whole policy is one number, its "skill" (the logit of the
token it plans; the slips it makes have logit 6). Training here is a policy-gradient step on that
one parameter: the skill moves by the mean of advantage x success, positive whenever a group
holds both wins and losses, so the success rate rises over the iterations as it would for a
real model whose update helps.

Run with no arguments from the repository root, it builds rollfleet, starts the stand-in model and
an embedded fleet with its trainer API (`rollout toyllm`, `rollout api`), and trains:

    python3 examples/trainer/train_loop.py

With --api URL it trains a running fleet instead (then --model URL names the model server whose
weights it updates). Standard library only; Python 3.10+.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "clients" / "python"))

from rollfleet import Client  # noqa: E402  (the path above makes it importable)


def start_process(args: list[str], marker: str, timeout: float = 120.0) -> tuple[subprocess.Popen, str]:
    """Start a rollfleet command and return it with the URL it prints on the line holding marker."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                raise RuntimeError(f"{args[0]} {args[1]} exited with status {proc.returncode}")
            continue
        if marker in line:
            return proc, line.strip().split()[-1]
    proc.kill()
    raise RuntimeError(f"{' '.join(args[:2])} did not start within {timeout:.0f}s")


def post_json(url: str, body: dict) -> dict:
    """POST a JSON body and decode the JSON answer."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read() or b"{}")


class StandInModel:
    """The stand-in model's weights: one skill, pushed with vLLM's /update_weights."""

    def __init__(self, url: str, skill: float) -> None:
        self.url = url.rstrip("/")
        self.skill = skill

    def push(self, skill: float, version: int) -> None:
        post_json(self.url + "/update_weights",
                  {"update_info": {"skill": skill, "weight_version": str(version)}})
        self.skill = skill


def grpo_advantages(rewards: list[float]) -> list[float]:
    """GRPO's group-relative advantages: reward minus the group mean, over the group's std."""
    mean = statistics.fmean(rewards)
    std = statistics.pstdev(rewards)
    return [(r - mean) / (std + 1e-6) for r in rewards]


def train_step(groups: list[dict], skill: float, lr: float, max_step: float = 1.5) -> tuple[float, float]:
    """One policy-gradient step on the stand-in's skill, at most max_step; returns the new skill
    and the gradient."""
    grads = []
    for g in groups:
        trajs = g["trajectories"]
        advs = grpo_advantages([t["reward"] for t in trajs])
        # d log p(win) / d skill is positive, so a won episode's advantage pushes skill up.
        grads.extend(a * (1.0 if t["success"] else 0.0) for a, t in zip(advs, trajs))
    grad = statistics.fmean(grads) if grads else 0.0
    step = max(-max_step, min(max_step, lr * grad))
    return min(30.0, max(0.5, skill + step)), grad


class Loop:
    """The training loop: batches in, groups out, weight syncs between iterations."""

    def __init__(self, client: Client, model: StandInModel, args: argparse.Namespace) -> None:
        self.client = client
        self.model = model
        self.args = args
        self.version = client.state()["version"]
        self.pool = ThreadPoolExecutor(max_workers=2)
        self.batches = 0

    def submit(self) -> str:
        a = self.args
        self.batches += 1
        batch = self.client.submit(
            env="game:GuessTheNumber-v0", episodes=a.prompts * a.n, n=a.n, seed=a.seed * 1000 + self.batches,
            max_staleness=a.max_staleness, stale_policy="drop",
            sampling={"temperature": 1.0, "max_tokens": 64}, max_length=2048)
        return batch.batch_id

    def collect(self, batch_id: str) -> list[dict]:
        groups = list(self.client.groups(batch_id))
        # Done with it: the fleet forgets the batch (its consumers, marks and
        # manifest), so a loop that runs for a week keeps nothing per batch.
        self.client.close(batch_id)
        return groups

    def run(self) -> list[dict]:
        a = self.args
        rows = []
        # Asynchronously, two batches are in flight: the next one generates
        # while this one is trained on and while the weights sync, which the
        # staleness bound of 1 allows. Synchronously, one at a time.
        ahead = 1 if a.sync else 2
        queue = [self.pool.submit(self.collect, self.submit()) for _ in range(min(ahead, a.iterations))]
        started = time.monotonic()
        for it in range(1, a.iterations + 1):
            t0 = time.monotonic()
            groups = queue.pop(0).result()
            skill, grad = train_step(groups, self.model.skill, a.lr)
            time.sleep(a.train_seconds)  # the trainer's own work: a gradient step on the GPUs
            # The weight sync: generation pauses, the model takes the new
            # weights, the fleet resumes under the next version.
            self.client.pause(on_pause=a.on_pause)
            self.version += 1
            self.model.push(skill, self.version)
            self.client.resume(self.version)
            if it + len(queue) < a.iterations:
                queue.append(self.pool.submit(self.collect, self.submit()))
            trajs = [t for g in groups for t in g["trajectories"]]
            row = {
                "iteration": it,
                "episodes": len(trajs),
                "reward": statistics.fmean(t["reward"] for t in trajs) if trajs else 0.0,
                "success": statistics.fmean(1.0 if t["success"] else 0.0 for t in trajs) if trajs else 0.0,
                "staleness": dict(sorted(Counter(t["staleness"] for t in trajs).items())),
                "turns": sum(t["turns"] for t in trajs),
                "seconds": time.monotonic() - t0,
                "skill": skill,
                "grad": grad,
            }
            rows.append(row)
            print(f"iter {it:2d}  reward {row['reward']:+.3f}  success {row['success']:.3f}  "
                  f"staleness {row['staleness']}  {row['turns'] / row['seconds']:7.0f} turns/s  "
                  f"skill {self.model.skill:5.2f} (v{self.version})", flush=True)
        total = time.monotonic() - started
        turns = sum(r["turns"] for r in rows)
        print(f"{'sync' if a.sync else 'async'}: {sum(r['episodes'] for r in rows)} episodes, "
              f"{turns} turns in {total:.1f}s = {turns / total:.0f} turns/s", flush=True)
        self.pool.shutdown()
        return rows


def build(tmp: Path) -> Path:
    """Build the rollout command into tmp."""
    exe = tmp / "rollout"
    subprocess.run(["go", "build", "-o", str(exe), "./cmd/rollout"], cwd=ROOT, check=True)
    return exe


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--api", help="trainer API of a running fleet (default: start one)")
    p.add_argument("--model", help="model server URL to push weights to (with --api)")
    p.add_argument("--iterations", type=int, default=8)
    p.add_argument("--prompts", type=int, default=64, help="prompts per batch")
    p.add_argument("--n", type=int, default=8, help="samples per prompt")
    p.add_argument("--lr", type=float, default=8.0, help="step size on the stand-in's skill")
    p.add_argument("--skill", type=float, default=9.5, help="the stand-in's starting skill")
    p.add_argument("--max-staleness", type=int, default=1)
    p.add_argument("--on-pause", choices=["finish", "abort"], default="finish")
    p.add_argument("--sync", action="store_true", help="wait for each batch before the next")
    p.add_argument("--train-seconds", type=float, default=0.0,
                   help="time the trainer spends per step besides the sync (a stand-in for its GPU work)")
    p.add_argument("--latency", default="", help="stand-in latency per token, e.g. 2ms")
    p.add_argument("--max-concurrent", type=int, default=0, help="stand-in's sequences at once")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", help="write the per-iteration rows here")
    args = p.parse_args()

    procs: list[subprocess.Popen] = []
    try:
        if args.api:
            if not args.model:
                p.error("--api needs --model, the model server whose weights the loop updates")
            api, model_url = args.api, args.model
        else:
            tmp = Path(tempfile.mkdtemp(prefix="rollfleet-train-"))
            exe = build(tmp)
            toy = [str(exe), "toyllm", "--listen", "127.0.0.1:0", "--skill", str(args.skill),
                   "--log-level", "error"]
            if args.latency:
                toy += ["--latency", args.latency]
            if args.max_concurrent:
                toy += ["--max-concurrent", str(args.max_concurrent)]
            proc, model_url = start_process(toy, "listening on")
            procs.append(proc)
            proc, api = start_process([str(exe), "api", "--listen", "127.0.0.1:0", "--vllm", model_url,
                                       "--concurrency", "1024", "--log-level", "error"], "listening on")
            procs.append(proc)
        client = Client(api)
        model = StandInModel(model_url, args.skill)
        rows = Loop(client, model, args).run()
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
        first, last = rows[0]["success"], rows[-1]["success"]
        if not last > first:
            print(f"success rate did not rise: {first:.3f} -> {last:.3f}", file=sys.stderr)
            return 1
        return 0
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    sys.exit(main())
