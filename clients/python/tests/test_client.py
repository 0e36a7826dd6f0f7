"""Tests of rollfleet.client against a real fleet: ``rollout api`` in its
embedded mode (NATS, the actors and the stand-in model in one process).

Run from the repository root: python3 -m unittest discover -s clients/python/tests -v
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from rollfleet import Client, RollfleetError  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
GTN = "game:GuessTheNumber-v0-easy"


def _go() -> str:
    for candidate in (shutil.which("go"), "/usr/local/go/bin/go"):
        if candidate and os.path.exists(candidate):
            return candidate
    raise unittest.SkipTest("go is not installed")


class ClientTest(unittest.TestCase):
    """One embedded fleet for the whole class."""

    proc: subprocess.Popen
    tmp: str
    client: Client

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.mkdtemp(prefix="rollfleet-pytest-")
        binary = os.path.join(cls.tmp, "rollout")
        subprocess.run([_go(), "build", "-o", binary, "./cmd/rollout"], cwd=REPO, check=True)
        cls.proc = subprocess.Popen(
            [binary, "api", "--listen", "127.0.0.1:0", "--log-level", "warn", "--ack-wait", "5s"],
            stdout=subprocess.PIPE, text=True,
        )
        line = cls.proc.stdout.readline()
        if "listening on " not in line:
            cls.proc.kill()
            raise RuntimeError(f"rollout api did not start: {line!r}")
        cls.client = Client(line.split("listening on ", 1)[1].strip(), timeout=30)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.proc.terminate()
        try:
            cls.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            cls.proc.kill()
            cls.proc.wait()
        cls.proc.stdout.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_groups(self) -> None:
        c = self.client
        self.assertTrue(c.health())
        batch = c.submit(env=GTN, episodes=8, n=4, seed=1, sampling={"temperature": 1.0, "max_tokens": 64})
        self.assertEqual((batch.episodes, batch.groups, batch.n), (8, 2, 4))
        groups = list(c.groups(batch.batch_id))
        self.assertEqual(len(groups), 2)
        for g in groups:
            self.assertTrue(g["group_id"].startswith(batch.batch_id))
            self.assertEqual(g["env"], GTN)
            self.assertIsInstance(g["mean_score"], (int, float))
            self.assertEqual(len(g["trajectories"]), 4)
            for t in g["trajectories"]:
                self.assertEqual(t["group_id"], g["group_id"])
                tokens, ranges = t["observation_tokens"], t["action_ranges"]
                self.assertTrue(tokens and ranges)
                for start, end in ranges:
                    self.assertTrue(0 <= start < end <= len(tokens))
                self.assertIn("reward", t)
                if "policy_versions" in t:
                    self.assertEqual(len(t["policy_versions"]), len(ranges))
        # Every group was acknowledged: reading again yields nothing.
        self.assertEqual(list(c.groups(batch.batch_id, wait=5)), [])
        status = c.status()
        mine = [b for b in status["batches"] if b["manifest"]["batch_id"] == batch.batch_id]
        self.assertEqual(len(mine), 1)
        self.assertTrue(mine[0]["done"])
        self.assertEqual(mine[0]["groups_delivered"], 2)
        c.close(batch.batch_id)

    def test_unacknowledged_results_come_back(self) -> None:
        c = self.client
        batch = c.submit(env=GTN, episodes=3, seed=2)
        first = list(c.trajectories(batch.batch_id, ack=False))
        self.assertEqual(len(first), 3)
        c.ack(batch.batch_id, [first[0]["_ack"]])
        # The other two come again once the ack wait (5 s here) has passed.
        again = list(c.trajectories(batch.batch_id))
        self.assertEqual(sorted(t["episode_id"] for t in again), sorted(t["episode_id"] for t in first[1:]))
        self.assertEqual(list(c.failures(batch.batch_id)), [])

    def test_pause_resume(self) -> None:
        c = self.client
        version = c.state()["version"]
        st = c.pause(on_pause="abort")
        self.assertTrue(st["paused"])
        self.assertEqual(st["on_pause"], "abort")
        st = c.resume(version + 1)
        self.assertFalse(st["paused"])
        self.assertEqual(c.state()["version"], version + 1)
        batch = c.submit(env=GTN, episodes=1, seed=3)
        self.assertEqual(batch.submit_version, version + 1)
        with self.assertRaises(RollfleetError) as cm:
            c.resume(version)
        self.assertEqual(cm.exception.status, 409)

    def test_errors(self) -> None:
        c = self.client
        with self.assertRaises(RollfleetError) as cm:
            c.submit(env="game:NoSuchGame-v0", episodes=4)
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("game:NoSuchGame-v0", cm.exception.message)
        with self.assertRaises(RollfleetError) as cm:
            c.submit(env=GTN, episodes=6, n=4)
        self.assertIn("not a multiple", str(cm.exception))
        with self.assertRaises(RollfleetError) as cm:
            list(c.groups("no-such-batch"))
        self.assertEqual(cm.exception.status, 404)
        with self.assertRaises(RollfleetError):
            c.pause(on_pause="later")
        self.assertFalse(Client("http://127.0.0.1:1").health())


if __name__ == "__main__":
    unittest.main()
