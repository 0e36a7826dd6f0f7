"""Tests of rollfleet.wire against the fixtures the Go encoder writes (messages/fixtures_test.go).

Run from the repository root with ``python3 -m unittest discover -s clients/python/tests -v``.
"""

from __future__ import annotations

import base64
import json
import math
import struct
import sys
import unittest
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from rollfleet import wire  # noqa: E402

FIXTURES = HERE / "fixtures"

# The decoders to test: the pure one always, the msgpack package's when it is installed.
BACKENDS: list[wire.Backend] = ["pure"] + (["msgpack"] if wire.HAVE_MSGPACK else [])


def pack(v: Any) -> bytes:
    """A minimal msgpack encoder for building test inputs, choosing the smallest encodings as the
    Go encoder does."""
    if v is None:
        return b"\xc0"
    if v is True:
        return b"\xc3"
    if v is False:
        return b"\xc2"
    if isinstance(v, int):
        if 0 <= v <= 0x7F:
            return bytes([v])
        if -32 <= v < 0:
            return struct.pack(">b", v)
        if v > 0:
            for code, fmt in ((0xCC, ">B"), (0xCD, ">H"), (0xCE, ">I"), (0xCF, ">Q")):
                if v < 1 << (8 * struct.calcsize(fmt)):
                    return bytes([code]) + struct.pack(fmt, v)
        for code, fmt in ((0xD0, ">b"), (0xD1, ">h"), (0xD2, ">i"), (0xD3, ">q")):
            if v >= -(1 << (8 * struct.calcsize(fmt) - 1)):
                return bytes([code]) + struct.pack(fmt, v)
        raise OverflowError(v)
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, str):
        b = v.encode()
        if len(b) < 32:
            return bytes([0xA0 | len(b)]) + b
        return header(len(b), 0xD9, 0xDA, 0xDB) + b
    if isinstance(v, (bytes, bytearray)):
        return header(len(v), 0xC4, 0xC5, 0xC6) + bytes(v)
    if isinstance(v, (list, tuple)):
        head = bytes([0x90 | len(v)]) if len(v) < 16 else header(len(v), None, 0xDC, 0xDD)
        return head + b"".join(pack(x) for x in v)
    if isinstance(v, dict):
        head = bytes([0x80 | len(v)]) if len(v) < 16 else header(len(v), None, 0xDE, 0xDF)
        return head + b"".join(pack(k) + pack(x) for k, x in v.items())
    raise TypeError(type(v))


def header(n: int, c8: int | None, c16: int, c32: int) -> bytes:
    if c8 is not None and n < 256:
        return bytes([c8, n])
    if n < 1 << 16:
        return bytes([c16]) + struct.pack(">H", n)
    return bytes([c32]) + struct.pack(">I", n)


def neutral(v: Any) -> Any:
    """The fixtures' JSON form of a decoded value: byte strings in base64."""
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    if isinstance(v, dict):
        return {k: neutral(x) for k, x in v.items()}
    if isinstance(v, list):
        return [neutral(x) for x in v]
    return v


def fixtures() -> list[tuple[str, str, bytes, Any]]:
    """Every fixture as (name, kind, msgpack bytes, expected value)."""
    out = []
    for path in sorted(FIXTURES.glob("*.msgpack")):
        expected = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
        out.append((path.stem, expected["kind"], path.read_bytes(), expected["value"]))
    return out


def raw(name: str) -> dict[str, Any]:
    """A fixture as the generic msgpack map, to alter and re-encode."""
    return wire.unpackb((FIXTURES / f"{name}.msgpack").read_bytes())


class FixtureTest(unittest.TestCase):
    def test_there_are_fixtures(self) -> None:
        kinds = {kind for _, kind, _, _ in fixtures()}
        self.assertEqual(kinds, set(wire.KINDS))

    def test_decode_every_fixture(self) -> None:
        decoders = {
            "trajectory": wire.decode_trajectory,
            "group": wire.decode_group,
            "failure": wire.decode_failure,
            "step": wire.decode_step,
            "episode_request": wire.decode_episode_request,
            "policy_state": wire.decode_policy_state,
            "worker_status": wire.decode_worker_status,
        }
        for backend in BACKENDS:
            for name, kind, data, want in fixtures():
                with self.subTest(fixture=name, backend=backend):
                    got = decoders[kind](data, backend=backend)
                    self.assertEqual(neutral(got), want)
                    self.assertEqual(wire.decode(kind, data, backend=backend), got)

    def test_pure_and_msgpack_agree(self) -> None:
        if not wire.HAVE_MSGPACK:
            self.skipTest("the msgpack package is not installed")
        for name, _, data, _ in fixtures():
            with self.subTest(fixture=name):
                self.assertEqual(wire.unpackb(data), wire.unpackb(data, backend="msgpack"))

    def test_types(self) -> None:
        t = wire.decode_trajectory((FIXTURES / "trajectory_chat.msgpack").read_bytes())
        self.assertTrue(all(type(x) is int for x in t["observation_tokens"]))
        self.assertTrue(all(type(x) is float for x in t["rollout_log_probs"]))
        self.assertTrue(all(type(x) is float for x in t["step_rewards"]))
        self.assertIs(type(t["reward"]), float)
        self.assertIs(type(t["extra_logs"]["turn_count"]), float)
        self.assertEqual(t["env_seed"], 2**64 - 1)
        # float32 values, not the decimals they were written from.
        self.assertEqual(t["rollout_log_probs"][60], struct.unpack("<f", struct.pack("<f", -0.1))[0])
        self.assertNotEqual(t["rollout_log_probs"][60], -0.1)

    def test_chat_trajectory_shape(self) -> None:
        t = wire.decode_trajectory((FIXTURES / "trajectory_chat.msgpack").read_bytes())
        self.assertEqual(len(t["rollout_log_probs"]), len(t["observation_tokens"]))
        self.assertEqual(len(t["action_ranges"]), t["turns"])
        self.assertEqual(len(t["policy_versions"]), t["turns"])
        self.assertEqual(t["staleness"], t["policy_versions"][-1] - t["policy_versions"][0])
        for start, end in t["action_ranges"]:
            self.assertLess(start, end)

    def test_subjects(self) -> None:
        data = (FIXTURES / "trajectory_chat.msgpack").read_bytes()
        self.assertEqual(wire.decode("rf.trajectories.run-7.math:gsm8k", data)["episode_id"], "ep.0001")
        cases = {
            "rf.trajectories.run-7.math:gsm8k": ("rf", "trajectory", "run-7", "math:gsm8k"),
            "a.b.groups.%.env": ("a.b", "group", "", "env"),
            "rf.failures.run/7%20%CE%B1.stale": ("rf", "failure", "run/7 α", "stale"),
            "rf.steps.r.1.1.5.13.ep%2E1": ("rf", "step", "r", "ep.1"),
            "a.b.steps.%.0.2.6.6.e": ("a.b", "step", "", "e"),
            "rf.episodes.r.e": ("rf", "episode_request", "r", "e"),
            "rf.decided.r.ep": ("rf", "decision", "r", "ep"),
            "x.control.policy": ("x", "policy_state", None, None),
        }
        for subject, want in cases.items():
            with self.subTest(subject=subject):
                self.assertEqual(tuple(wire.parse_subject(subject)), want)
        bad_subjects = [
            "rf.llm.generate", "rf.trajectories.r", "rf.steps.r.a%2", "rf.steps.r.a.b", "rf.control.workers",
            "rf.steps.r.ep", "rf.steps.r.1.1.5.13.a%2", "rf.steps.r.1.3.5.13.e", "rf.steps.r.1.3.5.16.e",
            "rf.steps.r.1.3.5.013.e", "rf.steps.r.1.1.1.1.1.e",
        ]
        for bad in bad_subjects:
            with self.subTest(subject=bad), self.assertRaises(wire.WireError):
                wire.kind_of(bad)
        with self.assertRaises(wire.WireError):
            wire.decode("rf.decided.r.ep", b"")

    def test_step_slot(self) -> None:
        # The slots rollfleet's Go side computes (messages.StepSlot).
        for group, slot in {"g": 6, "math.gsm8k/17": 10, "run-1/ep 1": 15}.items():
            with self.subTest(group=group):
                self.assertEqual(wire.step_slot(group), slot)

    def test_token(self) -> None:
        cases = {"": "%", "ep-1": "ep-1", "a.b": "a%2Eb", "*": "%2A", "a b>%": "a%20b%3E%25", "α": "%CE%B1"}
        for s, tok in cases.items():
            with self.subTest(s=s):
                self.assertEqual(wire.token(s), tok)
                self.assertEqual(wire.parse_token(tok), s)
        for bad in ["", "a.b", "%2e", "%41", "%4", "a b"]:
            with self.subTest(tok=bad), self.assertRaises(wire.WireError):
                wire.parse_token(bad)

    def test_name_token(self) -> None:
        # Values from Go's messages.NameToken.
        cases = {
            "run-7": "run-7",
            "run/7 α": "13b4d2c8c40ed8d9",
            "a.b": "e61d99190466522c",
            "": "cbf29ce484222325",
            "abcdefghijklmnopqrstuvwxyz012345": "abcdefghijklmnopqrstuvwxyz012345",
            "abcdefghijklmnopqrstuvwxyz0123456": "a1d47233d209bd89",
        }
        for s, want in cases.items():
            with self.subTest(s=s):
                self.assertEqual(wire.name_token(s), want)
        self.assertEqual(len(wire.name_token("a\\b")), 16)


class UnpackTest(unittest.TestCase):
    """The generic msgpack decoder, on every format the Go encoder writes."""

    def check(self, data: bytes, want: Any) -> None:
        for backend in BACKENDS:
            with self.subTest(data=data.hex(), backend=backend):
                got = wire.unpackb(data, backend=backend)
                self.assertEqual(got, want)
                self.assertIs(type(got), type(want))

    def test_formats(self) -> None:
        cases: list[tuple[str, Any]] = [
            ("00", 0), ("7f", 127), ("ff", -1), ("e0", -32),
            ("cc80", 128), ("ccff", 255), ("cd0100", 256), ("cdffff", 65535),
            ("ce00010000", 65536), ("ceffffffff", 2**32 - 1),
            ("cf0000000100000000", 2**32), ("cfffffffffffffffff", 2**64 - 1),
            ("d0df", -33), ("d080", -128), ("d1ff7f", -129), ("d18000", -32768),
            ("d2ffff7fff", -32769), ("d280000000", -(2**31)),
            ("d3ffffffff7fffffff", -(2**31) - 1), ("d38000000000000000", -(2**63)),
            ("ca3f800000", 1.0), ("cabdcccccd", struct.unpack(">f", bytes.fromhex("bdcccccd"))[0]),
            ("cb3ff8000000000000", 1.5),
            ("c0", None), ("c2", False), ("c3", True),
            ("a0", ""), ("a3616263", "abc"), ("d903616263", "abc"), ("da0003616263", "abc"),
            ("db00000003616263", "abc"), ("a2ceb1", "α"),
            ("c400", b""), ("c403010203", b"\x01\x02\x03"), ("c5000101", b"\x01"), ("c60000000101", b"\x01"),
            ("90", []), ("9201a1", None),  # placeholder replaced below
            ("dc000101", [1]), ("dd0000000101", [1]),
            ("80", {}), ("81a16101", {"a": 1}), ("de0001a16101", {"a": 1}), ("df00000001a16101", {"a": 1}),
            ("8101a162", {1: "b"}),
        ]
        cases[cases.index(("9201a1", None))] = ("9201a162", [1, "b"])
        for h, want in cases:
            self.check(bytes.fromhex(h), want)

    def test_invalid_utf8_reads_as_replacement(self) -> None:
        self.check(bytes.fromhex("a2ff61"), "\ufffda")

    def test_pack_round_trip(self) -> None:
        values = [0, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**64 - 1,
                  -1, -32, -33, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**63),
                  "x" * 31, "x" * 32, "x" * 255, "x" * 256, "x" * 65536, b"y" * 255, b"y" * 256, b"y" * 65536,
                  list(range(15)), list(range(16)), {str(i): i for i in range(15)}, {str(i): i for i in range(16)}]
        for v in values:
            with self.subTest(v=repr(v)[:40]):
                self.check(pack(v), v)

    def malformed(self, data: bytes, fragment: str) -> None:
        for backend in BACKENDS:
            with self.subTest(data=data[:32].hex(), backend=backend):
                with self.assertRaises(wire.MalformedError) as cm:
                    wire.unpackb(data, backend=backend)
                if backend == "pure":
                    self.assertIn(fragment, str(cm.exception))

    def test_malformed(self) -> None:
        self.malformed(b"", "truncated")
        self.malformed(bytes.fromhex("c1"), "invalid code 0xc1")
        self.malformed(bytes.fromhex("0000"), "1 trailing bytes")
        self.malformed(bytes.fromhex("a3616263") + b"\x00", "trailing")
        self.malformed(bytes.fromhex("a46162"), "truncated")
        self.malformed(bytes.fromhex("c4ff00"), "truncated")
        self.malformed(bytes.fromhex("cd01"), "truncated")
        self.malformed(bytes.fromhex("dc0003"), "truncated")
        self.malformed(bytes.fromhex("dfffffffff"), "exceed the limit")
        self.malformed(bytes.fromhex("d40100"), "ext type")
        self.malformed(bytes.fromhex("d6ff00000000"), "ext type")  # a msgpack timestamp
        self.malformed(bytes.fromhex("c70101ff"), "ext type")
        self.malformed(bytes.fromhex("81") + bytes.fromhex("9101") + b"\x01", "map key")
        self.malformed(b"\x91" * 33 + b"\x00", "nested deeper")

    def test_nesting_limit(self) -> None:
        self.check(b"\x91" * 32 + b"\x00", json.loads("[" * 32 + "0" + "]" * 32))

    def test_too_large(self) -> None:
        with self.assertRaises(wire.TooLargeError):
            wire.unpackb(b"\x00" * (wire.MAX_MESSAGE_SIZE + 1))


class MalformedMessageTest(unittest.TestCase):
    """Typed decoders reject what Go's Decode rejects, with a WireError."""

    def rejects(self, decode: Any, data: bytes, error: type[wire.WireError], fragment: str) -> None:
        for backend in BACKENDS:
            with self.subTest(backend=backend, fragment=fragment):
                with self.assertRaises(error) as cm:
                    decode(data, backend=backend)
                self.assertIsInstance(cm.exception, ValueError)
                self.assertIn(fragment, str(cm.exception))

    def test_every_truncation(self) -> None:
        for name, kind, data, _ in fixtures():
            for n in range(len(data)):
                with self.subTest(fixture=name, length=n):
                    with self.assertRaises(wire.MalformedError):
                        wire.decode(kind, data[:n])

    def test_trailing_bytes(self) -> None:
        for name, kind, data, _ in fixtures():
            with self.subTest(fixture=name):
                self.rejects(lambda d, **kw: wire.decode(kind, d, **kw), data + b"\xc0", wire.MalformedError, "trailing")

    def test_versions(self) -> None:
        m = raw("trajectory_chat")
        m["v"] = 2
        self.rejects(wire.decode_trajectory, pack(m), wire.VersionError, "version 2 is newer than supported 1")
        m["v"] = 0
        self.rejects(wire.decode_trajectory, pack(m), wire.VersionError, "missing version")
        del m["v"]
        self.rejects(wire.decode_trajectory, pack(m), wire.VersionError, "Trajectory.v: missing version")
        m["v"] = "1"
        self.rejects(wire.decode_trajectory, pack(m), wire.VersionError, "want a version number")
        # Nested messages carry their own version.
        g = raw("group")
        g["t"][1]["v"] = 3
        self.rejects(wire.decode_group, pack(g), wire.VersionError, "Group.trajectories[1].v")
        s = raw("step_first")
        del s["er"]["v"]
        self.rejects(wire.decode_step, pack(s), wire.VersionError, "StepEvent.episode.v")

    def test_packed_lengths(self) -> None:
        for key, word in (("ot", 4), ("lp", 4), ("ar", 8)):
            m = raw("trajectory_chat")
            m[key] = m[key][: word + 2]
            with self.subTest(key=key):
                self.rejects(wire.decode_trajectory, pack(m), wire.MalformedError, f"is not a multiple of {word}")
        m = raw("trajectory_chat")
        m["ot"] = [1, 2, 3]  # an array, not a packed bin
        self.rejects(wire.decode_trajectory, pack(m), wire.MalformedError, "observation_tokens: want a bin of packed int32")

    def test_nil_and_empty_packed(self) -> None:
        m = raw("trajectory_single_turn")
        self.assertIsNone(m["ot"])
        m["ot"], m["lp"], m["ar"] = b"", b"", b""
        t = wire.decode_trajectory(pack(m))
        self.assertEqual((t["observation_tokens"], t["rollout_log_probs"], t["action_ranges"]), ([], [], []))

    def test_field_types(self) -> None:
        cases: list[tuple[str, Any, str]] = [
            ("tn", "3", "Trajectory.turns: want an int32"),
            ("tn", 2**31, "want an int32"),
            ("tn", True, "want an int32"),
            ("r", "1", "Trajectory.reward: want a number"),
            ("tr", 1, "Trajectory.truncated: want a bool"),
            ("id", 5, "Trajectory.episode_id: want a string"),
            ("es", -1, "Trajectory.env_seed: want an uint64"),
            ("xl", [1], "Trajectory.extra_logs: want a map"),
            ("xl", {"a": "b"}, "Trajectory.extra_logs['a']: want a number"),
            ("sr", {}, "Trajectory.step_rewards: want an array"),
            ("sm", [5], "Trajectory.samples[0]: want a map (Sample)"),
        ]
        for key, value, fragment in cases:
            m = raw("trajectory_chat")
            m[key] = value
            with self.subTest(key=key, value=value):
                self.rejects(wire.decode_trajectory, pack(m), wire.MalformedError, fragment)
        self.rejects(wire.decode_trajectory, pack([1]), wire.MalformedError, "Trajectory: want a map")

    def test_unknown_fields_are_ignored(self) -> None:
        m = raw("failure")
        m["zz"] = [1, "two", {"three": 3.0}]
        want = wire.decode_failure((FIXTURES / "failure.msgpack").read_bytes())
        self.assertEqual(wire.decode_failure(pack(m)), want)

    def test_absent_fields_are_zero(self) -> None:
        t = wire.decode_trajectory(pack({"v": 1}))
        self.assertEqual(t["observation_tokens"], [])
        self.assertEqual(t["extra_logs"], {})
        self.assertIsNone(t["env_seed"])
        self.assertEqual(t["reward"], 0.0)
        self.assertEqual(t["policy_versions"], [])

    def test_float_fields_take_integers(self) -> None:
        m = raw("trajectory_chat")
        m["r"] = 2
        self.assertEqual(wire.decode_trajectory(pack(m))["reward"], 2.0)

    def test_errors_are_value_errors(self) -> None:
        self.assertTrue(issubclass(wire.WireError, ValueError))
        for cls in (wire.MalformedError, wire.VersionError, wire.TooLargeError):
            self.assertTrue(issubclass(cls, wire.WireError))


class WorkedExampleTest(unittest.TestCase):
    """The worked example of docs/wire.md."""

    def test_packed_example(self) -> None:
        tokens = bytes.fromhex("c40c 5c500200 68030000 c6000000".replace(" ", ""))
        logprobs = bytes.fromhex("c40c 00000000 cdccccbd 000048c1".replace(" ", ""))
        t = wire.decode("trajectory", pack({"v": 1, "ot": wire.unpackb(tokens), "lp": wire.unpackb(logprobs)}))
        self.assertEqual(t["observation_tokens"], [151644, 872, 198])
        self.assertEqual(t["rollout_log_probs"][0], 0.0)
        self.assertEqual(t["rollout_log_probs"][1], -0.10000000149011612)
        self.assertEqual(t["rollout_log_probs"][2], -12.5)
        self.assertTrue(all(math.isfinite(x) for x in t["rollout_log_probs"]))
        ranges = wire.unpackb(bytes.fromhex("c408 03000000 05000000".replace(" ", "")))
        self.assertEqual(wire.decode_trajectory(pack({"v": 1, "ar": ranges}))["action_ranges"], [[3, 5]])


if __name__ == "__main__":
    unittest.main()
