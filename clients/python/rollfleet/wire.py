"""Decoders for rollfleet's NATS wire format.

rollfleet publishes msgpack messages whose fields have short keys (``"ot"``, ``"lp"`` …) and whose
token ids and log-probabilities travel as packed little-endian binary values. This module turns
those bytes into plain Python values under the long names that ``rollout run`` uses in its JSONL
output (``observation_tokens``, ``action_ranges``, ``rollout_log_probs`` …), so that a trainer can
consume the streams directly with any NATS client. docs/wire.md describes the format in full.

It needs only the standard library. The pure-Python msgpack decoder is the default; when the
``msgpack`` package is importable, ``backend="msgpack"`` (or ``"auto"``) uses it instead, with the
same limits and errors.

Every decoder raises :class:`WireError` (a :class:`ValueError`) for input it cannot accept:
:class:`MalformedError` for bytes that are not a well-formed encoding of the message,
:class:`VersionError` for a missing or newer wire version ``v`` (a reader may leave such a message
for an upgraded consumer), :class:`TooLargeError` past :data:`MAX_MESSAGE_SIZE`.

Example::

    from rollfleet import wire

    traj = wire.decode_trajectory(msg.data)
    traj["observation_tokens"]   # list[int]
    traj["action_ranges"]        # list[[start, end]]
    traj["rollout_log_probs"]    # list[float], the exact float32 values
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final, Literal, NamedTuple

__all__ = [
    "VERSION",
    "MAX_MESSAGE_SIZE",
    "MAX_NESTING",
    "MAX_CONTAINER_LEN",
    "HAVE_MSGPACK",
    "KINDS",
    "Backend",
    "Message",
    "WireError",
    "MalformedError",
    "VersionError",
    "TooLargeError",
    "SubjectInfo",
    "unpackb",
    "decode",
    "decode_trajectory",
    "decode_group",
    "decode_failure",
    "decode_step",
    "decode_episode_request",
    "decode_policy_state",
    "decode_worker_status",
    "kind_of",
    "parse_subject",
    "token",
    "parse_token",
    "name_token",
]

VERSION: Final = 1
"""The newest wire version this module understands (``messages.Version`` in Go)."""

MAX_MESSAGE_SIZE: Final = 8 << 20
"""The largest message accepted, in bytes, as in Go's ``messages.MaxMessageSize``."""

MAX_NESTING: Final = 32
"""How deeply containers may nest, as Go's decoder allows."""

MAX_CONTAINER_LEN: Final = 1 << 16
"""The most entries an array or map may declare, as Go's decoder allows."""

Backend = Literal["pure", "msgpack", "auto"]
"""Which msgpack decoder to use: this module's (``"pure"``, the default), the ``msgpack``
package's (``"msgpack"``), or the package's when it is importable (``"auto"``)."""

Message = dict[str, Any]
"""A decoded message: its fields under their long names."""

try:  # optional, never required
    import msgpack as _msgpack
except ImportError:  # pragma: no cover - depends on the system
    _msgpack = None

HAVE_MSGPACK: Final = _msgpack is not None
"""Whether the optional ``msgpack`` package is importable."""


class WireError(ValueError):
    """Input that is not a valid rollfleet message."""


class MalformedError(WireError):
    """Bytes that are not a well-formed msgpack encoding of the expected message."""


class VersionError(WireError):
    """A message without a wire version, or with a version newer than :data:`VERSION`."""


class TooLargeError(WireError):
    """A message larger than :data:`MAX_MESSAGE_SIZE`."""


# --- msgpack ---------------------------------------------------------------------------------


def _describe(v: Any) -> str:
    """Names a decoded value's msgpack type for error messages."""
    if v is None:
        return "nil"
    if isinstance(v, bool):
        return "a bool"
    if isinstance(v, int):
        return f"the integer {v}"
    if isinstance(v, float):
        return "a float"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, (bytes, bytearray)):
        return f"a bin of {len(v)} bytes"
    if isinstance(v, list):
        return f"an array of {len(v)}"
    if isinstance(v, dict):
        return f"a map of {len(v)}"
    return type(v).__name__


class _Reader:
    """Decodes one msgpack value from bytes, within the limits Go's decoder enforces."""

    __slots__ = ("data", "off")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.off = 0

    def error(self, at: int, reason: str) -> MalformedError:
        return MalformedError(f"malformed msgpack at byte {at}: {reason}")

    def take(self, n: int) -> bytes:
        """Returns the next n bytes, which the input must hold."""
        left = len(self.data) - self.off
        if n > left:
            raise self.error(self.off, f"truncated: {n} bytes declared, {left} left")
        b = self.data[self.off : self.off + n]
        self.off += n
        return b

    def length(self, size: int) -> int:
        """Reads a big-endian unsigned length of size bytes (1, 2 or 4)."""
        b = self.take(size)
        return int.from_bytes(b, "big")

    def count(self, n: int, per_entry: int) -> int:
        """Checks a container's declared entry count before anything is allocated for it."""
        if n > MAX_CONTAINER_LEN:
            raise self.error(self.off, f"{n} entries exceed the limit of {MAX_CONTAINER_LEN}")
        left = len(self.data) - self.off
        if n * per_entry > left:  # every value takes at least one byte
            raise self.error(self.off, f"truncated: {n} entries declared, {left} bytes left")
        return n

    def read_array(self, n: int, depth: int) -> list[Any]:
        self.count(n, 1)
        return [self.value(depth + 1) for _ in range(n)]

    def read_map(self, n: int, depth: int) -> dict[Any, Any]:
        self.count(n, 2)
        out: dict[Any, Any] = {}
        for _ in range(n):
            at = self.off
            k = self.value(depth + 1)
            if isinstance(k, (list, dict)):
                raise self.error(at, f"map key is {_describe(k)}")
            out[k] = self.value(depth + 1)
        return out

    def read_str(self, n: int) -> str:
        # Go strings may hold any bytes; invalid UTF-8 reads as U+FFFD, as Go's JSON writes it.
        return self.take(n).decode("utf-8", errors="replace")

    def value(self, depth: int = 0) -> Any:
        if depth > MAX_NESTING:
            raise self.error(self.off, f"nested deeper than {MAX_NESTING}")
        if self.off >= len(self.data):
            raise self.error(self.off, "truncated")
        at = self.off
        c = self.data[at]
        self.off += 1
        if c <= 0x7F:  # positive fixint
            return c
        if c >= 0xE0:  # negative fixint
            return c - 0x100
        if c <= 0x8F:
            return self.read_map(c & 0x0F, depth)
        if c <= 0x9F:
            return self.read_array(c & 0x0F, depth)
        if c <= 0xBF:
            return self.read_str(c & 0x1F)
        if c == 0xC0:
            return None
        if c == 0xC2:
            return False
        if c == 0xC3:
            return True
        if c in (0xC4, 0xC5, 0xC6):  # bin 8/16/32
            return self.take(self.length(1 << (c - 0xC4)))
        if c in (0xD9, 0xDA, 0xDB):  # str 8/16/32
            return self.read_str(self.length(1 << (c - 0xD9)))
        if c == 0xCA:
            return struct.unpack(">f", self.take(4))[0]
        if c == 0xCB:
            return struct.unpack(">d", self.take(8))[0]
        if 0xCC <= c <= 0xCF:  # uint 8/16/32/64
            return int.from_bytes(self.take(1 << (c - 0xCC)), "big")
        if 0xD0 <= c <= 0xD3:  # int 8/16/32/64
            return int.from_bytes(self.take(1 << (c - 0xD0)), "big", signed=True)
        if c in (0xDC, 0xDD):
            return self.read_array(self.length(2 if c == 0xDC else 4), depth)
        if c in (0xDE, 0xDF):
            return self.read_map(self.length(2 if c == 0xDE else 4), depth)
        if c in (0xC7, 0xC8, 0xC9) or 0xD4 <= c <= 0xD8:
            raise self.error(at, f"ext type (code 0x{c:02x}) is not part of rollfleet's wire format")
        raise self.error(at, f"invalid code 0x{c:02x}")


def _unpack_pure(data: bytes) -> Any:
    r = _Reader(data)
    v = r.value()
    if r.off != len(data):
        raise MalformedError(f"malformed msgpack: {len(data) - r.off} trailing bytes after the value")
    return v


def _reject_ext(code: int, data: bytes) -> Any:
    raise MalformedError(f"malformed msgpack: ext type {code} is not part of rollfleet's wire format")


_PLAIN: Final = (str, bytes, int, float, bool, type(None))


def _check_plain(v: Any, depth: int) -> None:
    """Applies the pure decoder's rules to what the msgpack package returned."""
    if depth > MAX_NESTING:
        raise MalformedError(f"malformed msgpack: nested deeper than {MAX_NESTING}")
    if isinstance(v, list):
        for x in v:
            _check_plain(x, depth + 1)
    elif isinstance(v, dict):
        for k, x in v.items():
            if not isinstance(k, _PLAIN):
                raise MalformedError(f"malformed msgpack: map key is {_describe(k)}")
            _check_plain(x, depth + 1)
    elif not isinstance(v, _PLAIN):  # an ext value the package decoded itself (a timestamp)
        raise MalformedError(f"malformed msgpack: {type(v).__name__} is not part of rollfleet's wire format")


def _unpack_msgpack(data: bytes) -> Any:
    assert _msgpack is not None
    try:
        v = _msgpack.unpackb(
            data,
            raw=False,
            use_list=True,
            strict_map_key=False,
            unicode_errors="replace",
            ext_hook=_reject_ext,
            max_array_len=MAX_CONTAINER_LEN,
            max_map_len=MAX_CONTAINER_LEN,
        )
    except _msgpack.ExtraData as e:
        raise MalformedError(f"malformed msgpack: {len(e.extra)} trailing bytes after the value") from None
    except WireError:
        raise
    except (ValueError, TypeError, _msgpack.UnpackException) as e:  # truncated, bad codes, limits, keys
        raise MalformedError(f"malformed msgpack: {e}") from e
    _check_plain(v, 0)
    return v


def unpackb(data: bytes | bytearray | memoryview, *, backend: Backend = "pure") -> Any:
    """Decodes exactly one msgpack value from data into dicts, lists, str, bytes, int, float,
    bool and None.

    It accepts every msgpack type the Go encoder writes and rejects ext types, trailing bytes,
    declared lengths the data cannot hold, containers of more than :data:`MAX_CONTAINER_LEN`
    entries, nesting deeper than :data:`MAX_NESTING` and input larger than
    :data:`MAX_MESSAGE_SIZE`. float32 values become the Python floats of exactly their value;
    strings that are not valid UTF-8 read with U+FFFD in place of the bad bytes.
    """
    data = bytes(data)
    if len(data) > MAX_MESSAGE_SIZE:
        raise TooLargeError(f"message too large: {len(data)} bytes, limit {MAX_MESSAGE_SIZE}")
    if backend == "auto":
        backend = "msgpack" if HAVE_MSGPACK else "pure"
    if backend == "pure":
        return _unpack_pure(data)
    if backend == "msgpack":
        if _msgpack is None:
            raise RuntimeError("the msgpack package is not installed")
        return _unpack_msgpack(data)
    raise ValueError(f"unknown backend {backend!r}")


# --- fields ----------------------------------------------------------------------------------

# A field converter turns the value under a short key (None when the key is absent) into its
# Python form; path names the field in errors. A missing key or nil reads as the field's zero
# value, as Go's decoder leaves it.
_Conv = Callable[[Any, str], Any]


def _wrong(path: str, want: str, v: Any) -> MalformedError:
    return MalformedError(f"{path}: want {want}, got {_describe(v)}")


def _str(v: Any, path: str) -> str:
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    raise _wrong(path, "a string", v)


def _bool(v: Any, path: str) -> bool:
    if v is None:
        return False
    if isinstance(v, bool):
        return v
    raise _wrong(path, "a bool", v)


def _float(v: Any, path: str) -> float:
    if v is None:
        return 0.0
    if isinstance(v, float) or (isinstance(v, int) and not isinstance(v, bool)):
        return float(v)
    raise _wrong(path, "a number", v)


def _bytes(v: Any, path: str) -> bytes:
    if v is None:
        return b""
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    raise _wrong(path, "a bin", v)


def _int(bits: int, signed: bool) -> _Conv:
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    want = f"an {'int' if signed else 'uint'}{bits}"

    def conv(v: Any, path: str) -> int:
        if v is None:
            return 0
        if isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi:
            return v
        raise _wrong(path, want, v)

    return conv


_i32 = _int(32, True)
_i64 = _int(64, True)
_u64 = _int(64, False)


def _packed(code: str, word: int, what: str) -> _Conv:
    """Reads a bin of packed little-endian 4-byte words; nil and an empty bin are both empty."""

    def conv(v: Any, path: str) -> list[Any]:
        if v is None:
            return []
        if not isinstance(v, (bytes, bytearray)):
            raise _wrong(path, f"a bin of packed {what}", v)
        if len(v) % word:
            raise MalformedError(f"{path}: packed length {len(v)} is not a multiple of {word}")
        return list(struct.unpack(f"<{len(v) // 4}{code}", v))

    return conv


_tokens = _packed("i", 4, "int32 token ids")
_logprobs = _packed("f", 4, "float32 log-probabilities")
_range_words = _packed("i", 8, "int32 (start, end) pairs")


def _ranges(v: Any, path: str) -> list[list[int]]:
    w = _range_words(v, path)
    return [[w[i], w[i + 1]] for i in range(0, len(w), 2)]


def _optional(conv: _Conv) -> _Conv:
    """A Go pointer field: None when absent or nil."""

    def opt(v: Any, path: str) -> Any:
        return None if v is None else conv(v, path)

    return opt


def _list(conv: _Conv) -> _Conv:
    def lst(v: Any, path: str) -> list[Any]:
        if v is None:
            return []
        if not isinstance(v, list):
            raise _wrong(path, "an array", v)
        return [conv(x, f"{path}[{i}]") for i, x in enumerate(v)]

    return lst


def _map(conv: _Conv) -> _Conv:
    def mp(v: Any, path: str) -> dict[str, Any]:
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise _wrong(path, "a map", v)
        out: dict[str, Any] = {}
        for k, x in v.items():
            if not isinstance(k, str):
                raise MalformedError(f"{path}: map key {k!r} is not a string")
            out[k] = conv(x, f"{path}[{k!r}]")
        return out

    return mp


def _check_version(v: Any, path: str) -> None:
    """Accepts what Go's Decode accepts: 1 ≤ v ≤ VERSION, an absent v being 0."""
    if v is None or v == 0:
        raise VersionError(f"{path}.v: missing version (0)")
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise VersionError(f"{path}.v: want a version number, got {_describe(v)}")
    if v > VERSION:
        raise VersionError(f"{path}.v: version {v} is newer than supported {VERSION}")


class _Struct:
    """A message type: its fields as (short key, long name, converter), in wire order."""

    def __init__(self, name: str, versioned: bool, fields: list[tuple[str, str, _Conv]]) -> None:
        self.name = name
        self.versioned = versioned
        self.fields = fields

    def __call__(self, v: Any, path: str) -> Message:
        if v is None:
            v = {}
        if not isinstance(v, dict):
            raise _wrong(path, f"a map ({self.name})", v)
        for k in v:
            if not isinstance(k, str):
                raise MalformedError(f"{path}: map key {k!r} is not a string")
        if self.versioned:
            _check_version(v.get("v"), path)
        # Keys this module does not know are ignored, as Go's decoder ignores them: fields are
        # added without a version bump.
        return {name: conv(v.get(key), f"{path}.{name}") for key, name, conv in self.fields}


_SAMPLING = _Struct(
    "SamplingParams",
    False,
    [
        ("t", "temperature", _float),
        ("p", "top_p", _float),
        ("k", "top_k", _i32),
        ("m", "max_tokens", _i32),
        ("s", "stop", _list(_str)),
        ("sd", "seed", _optional(_i64)),
        ("mp", "min_p", _float),
        ("pp", "presence_penalty", _float),
        ("fp", "frequency_penalty", _float),
        ("rp", "repetition_penalty", _float),
        ("mn", "min_tokens", _i32),
        ("si", "stop_token_ids", _tokens),
        ("ie", "ignore_eos", _bool),
        ("ss", "skip_special_tokens", _bool),
        ("is", "include_stop_str_in_output", _bool),
        ("so", "structured_outputs", _bytes),
    ],
)

_CHAT_MESSAGE = _Struct(
    "ChatMessage",
    False,
    [
        ("r", "role", _str),
        ("c", "content", _str),
        ("rs", "reasoning_content", _str),
        ("tc", "tool_calls", _bytes),
        ("ti", "tool_call_id", _str),
        ("n", "name", _str),
    ],
)

_TURN_TIMINGS = _Struct(
    "TurnTimings",
    False,
    [
        ("q", "queue_ns", _i64),
        ("tk", "tokenize_ns", _i64),
        ("g", "generate_ns", _i64),
        ("m", "model_ns", _i64),
        ("s", "step_ns", _i64),
        ("p", "publish_ns", _i64),
        ("w", "wall_ns", _i64),
        ("ep", "endpoint", _str),
    ],
)

_EPISODE_REQUEST = _Struct(
    "EpisodeRequest",
    True,
    [
        ("rid", "run_id", _str),
        ("id", "episode_id", _str),
        ("g", "group_id", _str),
        ("i", "sample_index", _i32),
        ("n", "group_size", _i32),
        ("e", "env", _str),
        ("eo", "env_options", _bytes),
        ("es", "env_seed", _optional(_u64)),
        ("p", "prompt", _str),
        ("ct", "chat_template", _bool),
        ("ctn", "chat_template_name", _str),
        ("ctk", "chat_template_kwargs", _bytes),
        ("l", "label", _str),
        ("sp", "sampling", _SAMPLING),
        ("ml", "max_length", _i32),
        ("mt", "max_turns", _i32),
        ("ts", "submit_time_ns", _i64),
        ("sv", "submit_policy_version", _i64),
        ("mxs", "max_staleness", _optional(_i32)),
        ("stp", "stale_policy", _str),
        ("os", "obs_style", _str),
        ("ms", "messages", _list(_CHAT_MESSAGE)),
        ("ti", "task_index", _i32),
        ("ri", "rollout_index", _i32),
        ("po", "prompt_overflow", _str),
        ("tid", "trace_id", _str),
    ],
)

_STEP_EVENT = _Struct(
    "StepEvent",
    True,
    [
        ("rid", "run_id", _str),
        ("id", "episode_id", _str),
        ("tn", "turn", _i32),
        ("a", "attempt", _i32),
        ("rq", "request", _u64),
        ("ru", "run", _str),
        ("er", "episode", _optional(_EPISODE_REQUEST)),
        ("pt", "prompt_tokens", _tokens),
        ("pm", "prompt_messages", _list(_CHAT_MESSAGE)),
        ("at", "action_tokens", _tokens),
        ("al", "action_logprobs", _logprobs),
        ("ax", "action_text", _str),
        ("fx", "feedback_text", _str),
        ("ft", "feedback_tokens", _tokens),
        ("r", "reward", _float),
        ("s", "score", _float),
        ("d", "done", _bool),
        ("tr", "truncated", _bool),
        ("fr", "finish_reason", _str),
        ("xl", "extra_logs", _map(_float)),
        ("in", "info", _map(_str)),
        ("ok", "success", _bool),
        ("ptc", "prompt_truncated_tokens", _i32),
        ("rs", "resumed", _i32),
        ("st", "env_state", _bytes),
        ("ep", "endpoint", _str),
        ("pv", "policy_version", _i64),
        ("rst", "restarts", _i32),
        ("sto", "stale", _bool),
        ("gn", "generate_ns", _i64),
        ("sn", "step_ns", _i64),
        ("err", "error", _str),
        ("fk", "failure_kind", _str),
        ("tid", "trace_id", _str),
        ("tm", "timings", _TURN_TIMINGS),
    ],
)

_SAMPLE = _Struct(
    "Sample",
    False,
    [
        ("ot", "observation_tokens", _tokens),
        ("ar", "action_ranges", _ranges),
        ("lp", "rollout_log_probs", _logprobs),
        ("r", "reward", _float),
        ("rt", "return", _float),
        ("ptc", "prompt_truncated_tokens", _i32),
    ],
)

_TRAJECTORY = _Struct(
    "Trajectory",
    True,
    [
        ("rid", "run_id", _str),
        ("id", "episode_id", _str),
        ("g", "group_id", _str),
        ("i", "sample_index", _i32),
        ("n", "group_size", _i32),
        ("e", "env", _str),
        ("es", "env_seed", _optional(_u64)),
        ("p", "prompt", _str),
        ("l", "label", _str),
        ("ot", "observation_tokens", _tokens),
        ("ar", "action_ranges", _ranges),
        ("lp", "rollout_log_probs", _logprobs),
        ("r", "reward", _float),
        ("s", "scores", _float),
        ("xl", "extra_logs", _map(_float)),
        ("tr", "truncated", _bool),
        ("tn", "turns", _i32),
        ("sr", "step_rewards", _list(_float)),
        ("fr", "finish_reason", _str),
        ("pv", "policy_versions", _list(_i64)),
        ("sv", "submit_policy_version", _i64),
        ("stl", "staleness", _i64),
        ("sto", "stale", _bool),
        ("rst", "restarts", _i32),
        ("ts", "submit_time_ns", _i64),
        ("dt", "done_time_ns", _i64),
        ("gn", "generate_ns", _i64),
        ("os", "obs_style", _str),
        ("sm", "samples", _list(_SAMPLE)),
        ("ok", "success", _bool),
        ("in", "info", _map(_str)),
        ("ti", "_ng_task_index", _i32),
        ("rs", "resumed", _i32),
        ("ptc", "prompt_truncated_tokens", _i32),
        ("ri", "rollout_index", _i32),
        ("rtx", "responses", _list(_str)),
        ("tid", "trace_id", _str),
        ("pms", "prompt_messages", _list(_CHAT_MESSAGE)),
        ("fb", "feedback", _list(_str)),
        ("tm", "timings", _list(_TURN_TIMINGS)),
    ],
)

_GROUP = _Struct(
    "Group",
    True,
    [
        ("rid", "run_id", _str),
        ("g", "group_id", _str),
        ("e", "env", _str),
        ("ms", "mean_score", _float),
        ("t", "trajectories", _list(_TRAJECTORY)),
    ],
)

_FAILURE = _Struct(
    "Failure",
    True,
    [
        ("rid", "run_id", _str),
        ("id", "episode_id", _str),
        ("g", "group_id", _str),
        ("e", "env", _str),
        ("k", "kind", _str),
        ("r", "reason", _str),
        ("sj", "subject", _str),
        ("tn", "turn", _i32),
        ("ts", "time_ns", _i64),
        ("pl", "payload", _bytes),
        ("tid", "trace_id", _str),
    ],
)

_POLICY_STATE = _Struct(
    "PolicyState",
    True,
    [
        ("ep", "epoch", _u64),
        ("pv", "version", _i64),
        ("pa", "paused", _bool),
        ("op", "on_pause", _str),
        ("ts", "time_ns", _i64),
    ],
)

_ENDPOINT_STATUS = _Struct(
    "EndpointStatus",
    False,
    [
        ("u", "url", _str),
        ("h", "healthy", _bool),
        ("if", "in_flight", _i64),
        ("mx", "max_in_flight", _i64),
    ],
)

_WORKER_STATUS = _Struct(
    "WorkerStatus",
    True,
    [
        ("k", "kind", _str),
        ("id", "id", _str),
        ("ep", "epoch", _u64),
        ("pv", "version", _i64),
        ("pa", "paused", _bool),
        ("if", "in_flight", _i64),
        ("hd", "held", _i64),
        ("eps", "endpoints", _list(_ENDPOINT_STATUS)),
    ],
)

_BY_KIND: Final[dict[str, _Struct]] = {
    "trajectory": _TRAJECTORY,
    "group": _GROUP,
    "failure": _FAILURE,
    "step": _STEP_EVENT,
    "episode_request": _EPISODE_REQUEST,
    "policy_state": _POLICY_STATE,
    "worker_status": _WORKER_STATUS,
}

KINDS: Final = tuple(_BY_KIND)
"""The message kinds :func:`decode` takes."""


def _decode(schema: _Struct, data: bytes | bytearray | memoryview, backend: Backend) -> Message:
    return schema(unpackb(data, backend=backend), schema.name)


def decode_trajectory(data: bytes | bytearray | memoryview, *, backend: Backend = "pure") -> Message:
    """Decodes a Trajectory (subjects ``<prefix>.trajectories.<run>.<env>``).

    Every field is present: ``observation_tokens`` (list of int), ``action_ranges`` (list of
    ``[start, end]``, half-open positions in ``observation_tokens``), ``rollout_log_probs`` (one
    float per observation token, 0 outside the action ranges), ``policy_versions`` (one per turn,
    or empty), ``submit_policy_version``, ``staleness``, ``stale``, ``restarts``, ``samples``
    (single-turn styles only) and the rest under the names of ``rollout run``'s JSONL. Absent
    optional fields read as their zero values (``env_seed`` as None).
    """
    return _decode(_TRAJECTORY, data, backend)


def decode_group(data: bytes | bytearray | memoryview, *, backend: Backend = "pure") -> Message:
    """Decodes a Group (``<prefix>.groups.<run>.<env>``): ``group_id``, ``env``, ``run_id``,
    ``mean_score`` and ``trajectories``, each as :func:`decode_trajectory` returns it."""
    return _decode(_GROUP, data, backend)


def decode_failure(data: bytes | bytearray | memoryview, *, backend: Backend = "pure") -> Message:
    """Decodes a Failure (``<prefix>.failures.<run>.<kind>``); ``payload`` is bytes."""
    return _decode(_FAILURE, data, backend)


def decode_step(data: bytes | bytearray | memoryview, *, backend: Backend = "pure") -> Message:
    """Decodes a StepEvent (``<prefix>.steps.<run>.<slot%2>.<slot%4>.<slot%8>.<slot%16>.<episode>``,
    the slot of the episode's group, see :func:`step_slot`); ``episode`` is the
    EpisodeRequest on turn 0 (as :func:`decode_episode_request` returns it) and None otherwise."""
    return _decode(_STEP_EVENT, data, backend)


def decode_episode_request(data: bytes | bytearray | memoryview, *, backend: Backend = "pure") -> Message:
    """Decodes an EpisodeRequest (``<prefix>.episodes.<run>.<env>``); ``env_options`` is bytes
    (a JSON object, or empty), ``env_seed`` and ``max_staleness`` are None when unset."""
    return _decode(_EPISODE_REQUEST, data, backend)


def decode_policy_state(data: bytes | bytearray | memoryview, *, backend: Backend = "pure") -> Message:
    """Decodes the fleet's PolicyState (``<prefix>.control.policy``): ``epoch``, ``version``,
    ``paused``, ``on_pause`` and ``time_ns``."""
    return _decode(_POLICY_STATE, data, backend)


def decode_worker_status(data: bytes | bytearray | memoryview, *, backend: Backend = "pure") -> Message:
    """Decodes a WorkerStatus, a worker's answer to a request on ``<prefix>.control.workers``."""
    return _decode(_WORKER_STATUS, data, backend)


# --- subjects --------------------------------------------------------------------------------

# The kind token of each stored subject, and the message kind it carries.
_SUBJECT_KINDS: Final = {
    "episodes": "episode_request",
    "steps": "step",
    "trajectories": "trajectory",
    "groups": "group",
    "failures": "failure",
}


# A steps subject carries its group's slot at each power of two up to this many slots.
MAX_STEP_SHARDS: Final = 16
_SLOT_LEVELS: Final = 4


def step_slot(group_id: str) -> int:
    """The slot of a group's steps: the 32-bit FNV-1a hash of the group id modulo 16. Collector
    shard ``i/N`` assembles the groups whose slot modulo N is i."""
    h = 0x811C9DC5
    for b in group_id.encode():
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h % MAX_STEP_SHARDS


def _slot_tokens(slot: int) -> list[str]:
    return [str(slot % (1 << k)) for k in range(1, _SLOT_LEVELS + 1)]


_SLOTS: Final = {str(slot): slot for slot in range(MAX_STEP_SHARDS)}


class SubjectInfo(NamedTuple):
    """What a rollfleet subject names."""

    prefix: str
    """The fleet's subject prefix (``rf`` by default)."""
    kind: str
    """The message kind it carries (see :data:`KINDS`), or ``"decision"`` for a decision."""
    run: str | None
    """The run id (``""`` is a run of its own), None for the control subject."""
    name: str | None
    """The env (episodes, trajectories, groups), the episode (steps, decisions) or the failure
    kind (failures); None for the control subject."""


def parse_subject(subject: str) -> SubjectInfo:
    """Splits a subject of one of rollfleet's streams into its prefix, kind, run and name, with
    the run and name unescaped (:func:`parse_token`)."""
    toks = subject.split(".")
    if len(toks) >= 3 and toks[-2:] == ["control", "policy"]:
        return SubjectInfo(".".join(toks[:-2]), "policy_state", None, None)
    # Run and name are escaped into single tokens, so the kind is the third from the end, but for
    # steps, whose four slot tokens come between run and episode.
    if len(toks) >= 4 and toks[-3] != "steps":
        kind = "decision" if toks[-3] == "decided" else _SUBJECT_KINDS.get(toks[-3])
        if kind is not None:
            return SubjectInfo(".".join(toks[:-3]), kind, parse_token(toks[-2]), parse_token(toks[-1]))
    if len(toks) >= 8 and toks[-7] == "steps":
        slot = _SLOTS.get(toks[-2])
        if slot is not None and toks[-5:-1] == _slot_tokens(slot):
            return SubjectInfo(".".join(toks[:-7]), "step", parse_token(toks[-6]), parse_token(toks[-1]))
    raise WireError(f"{subject!r} is not a subject of a rollfleet stream")


def kind_of(subject_or_kind: str) -> str:
    """Returns the message kind a subject carries, or the kind itself (see :data:`KINDS`)."""
    if subject_or_kind in _BY_KIND:
        return subject_or_kind
    kind = parse_subject(subject_or_kind).kind
    if kind == "decision":
        raise WireError(f"{subject_or_kind!r}: a decision has no body, only its Rf-Outcome and Rf-Run headers")
    return kind


def decode(subject_or_kind: str, data: bytes | bytearray | memoryview, *, backend: Backend = "pure") -> Message:
    """Decodes a message by its kind (one of :data:`KINDS`) or by the subject it came on, e.g.
    ``decode(msg.subject, msg.data)``."""
    return _decode(_BY_KIND[kind_of(subject_or_kind)], data, backend)


def _escaped(c: int) -> bool:
    return c <= 0x20 or c >= 0x7F or c in b".*>%"


def token(s: str) -> str:
    """Escapes an id (a run, env or episode id) into one subject token as Go's ``messages.Token``
    does: bytes of its UTF-8 that are whitespace, controls, non-ASCII, ``.``, ``*``, ``>`` or ``%``
    become ``%XX`` (uppercase hex); the empty string becomes ``%``. Use it to build filters such as
    ``f"rf.trajectories.{token(run)}.>"``."""
    if s == "":
        return "%"
    return "".join(f"%{c:02X}" if _escaped(c) else chr(c) for c in s.encode("utf-8", errors="surrogateescape"))


def parse_token(tok: str) -> str:
    """Inverts :func:`token`, accepting only its exact output."""
    if tok == "%":
        return ""
    if tok == "":
        raise WireError("subject token is empty")
    out = bytearray()
    i = 0
    raw = tok.encode("utf-8", errors="surrogateescape")
    while i < len(raw):
        c = raw[i]
        if c != 0x25:  # '%'
            if _escaped(c):
                raise WireError(f"subject token {tok!r}: byte {chr(c)!r} at {i} should be escaped")
            out.append(c)
            i += 1
            continue
        hexits = raw[i + 1 : i + 3].decode("ascii", errors="replace")
        if len(hexits) != 2 or any(h not in "0123456789ABCDEF" for h in hexits) or not _escaped(int(hexits, 16)):
            raise WireError(f"subject token {tok!r}: invalid escape at {i}")
        out.append(int(hexits, 16))
        i += 3
    return out.decode("utf-8", errors="surrogateescape")


def name_token(s: str) -> str:
    """Makes an id usable in a consumer name as Go's ``messages.NameToken`` does: an id of 1 to 32
    bytes of printable ASCII other than ``.``, ``*``, ``>``, ``%``, ``/`` and ``\\`` stays as it
    is; any other becomes the 16 hex digits of its 64-bit FNV-1a hash. ``rollout run`` names its
    consumers ``run-<name_token(run)>-<trajectory|failure|group>``."""
    b = s.encode("utf-8", errors="surrogateescape")
    if 0 < len(b) <= 32 and not any(_escaped(c) or c in b"/\\" for c in b):
        return s
    h = 0xCBF29CE484222325
    for c in b:
        h = ((h ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"
