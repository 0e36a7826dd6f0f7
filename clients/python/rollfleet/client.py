"""Client of rollfleet's trainer API (``rollout api``), standard library only.

Example::

    from rollfleet import Client

    client = Client("http://127.0.0.1:8090")
    batch = client.submit(env="game:GuessTheNumber-v0", episodes=64, n=4)
    for group in client.groups(batch.batch_id):
        train_on(group["trajectories"])   # acknowledged when the next is asked for
    client.pause()                        # returns once no generation runs
    update_weights()
    client.resume(version=1)

Acknowledgement: ``groups``, ``trajectories`` and ``failures`` acknowledge a
result once the caller's loop body has taken it, that is when the next
result is requested, or when the loop ends normally. A result of an
iteration abandoned early (``break``, an exception) is not acknowledged and
is delivered again after the server's ack wait (60 s by default), so a
trainer that crashes mid-batch and reads again gets everything it had not
finished with. With ``ack=False`` nothing is acknowledged: each item carries
its token under ``"_ack"`` and ``Client.ack`` takes a list of them.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence

__all__ = ["Batch", "Client", "RollfleetError", "StreamError"]


class RollfleetError(Exception):
    """An error answered by the server (``status`` is the HTTP status, 0
    when the server could not be reached) with the server's message."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    def __str__(self) -> str:
        return f"{self.message} (HTTP {self.status})" if self.status else self.message


class StreamError(RollfleetError):
    """A result stream ended with an error line from the server."""


@dataclass(frozen=True)
class Batch:
    """A submitted batch, as ``Client.submit`` returns it."""

    batch_id: str
    episodes: int
    groups: int
    n: int
    submit_version: int
    resubmitted: bool = False


class Client:
    """A trainer's client of one ``rollout api`` server.

    ``base_url`` is the server's URL (``http://host:port``); ``timeout`` bounds
    each request but the result streams, whose reads wait up to
    ``stream_timeout`` for the next line.
    """

    def __init__(self, base_url: str, timeout: float = 60.0, stream_timeout: float = 600.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.stream_timeout = stream_timeout

    # -- requests -------------------------------------------------------

    def _request(self, method: str, path: str, body: Any = None, timeout: Optional[float] = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as e:
            raise _http_error(e) from None
        except urllib.error.URLError as e:
            raise RollfleetError(f"{method} {self.base_url}{path}: {e.reason}") from None

    def submit(
        self,
        env: str = "",
        episodes: int = 0,
        n: int = 1,
        rows: Optional[Sequence[dict]] = None,
        sampling: Optional[dict] = None,
        max_length: int = 0,
        max_turns: int = 0,
        obs_style: str = "",
        max_staleness: Optional[int] = None,
        stale_policy: str = "",
        seed: Optional[int] = None,
        batch_id: str = "",
        **extra: Any,
    ) -> Batch:
        """Submit a batch of episodes and return its description.

        ``env`` is an env id (or ids and patterns, comma-separated); ``episodes``
        counts episodes, a multiple of ``n`` samples per prompt; ``rows`` are
        dataset rows (``{"prompt", "label", "env"}``, math or NeMo Gym rows);
        ``sampling`` holds ``temperature``, ``top_p`` and ``max_tokens``.
        Zero values take the server's defaults; ``extra`` passes other fields
        of the API (``apply_chat_template``, ``prompt_overflow``) as they are.
        """
        body: dict[str, Any] = {"n": n}
        for key, value in (
            ("id", batch_id), ("env", env), ("episodes", episodes), ("rows", list(rows or [])),
            ("sampling", sampling), ("max_length", max_length), ("max_turns", max_turns),
            ("obs_style", obs_style), ("stale_policy", stale_policy),
        ):
            if value:
                body[key] = value
        if max_staleness is not None:
            body["max_staleness"] = max_staleness
        if seed is not None:
            body["seed"] = seed
        body.update(extra)
        r = self._request("POST", "/v1/batches", body)
        return Batch(
            batch_id=r["batch_id"], episodes=r["episodes"], groups=r["groups"], n=r.get("n", 0),
            submit_version=r["submit_version"], resubmitted=r.get("resubmitted", False),
        )

    def ack(self, batch_id: str, tokens: Sequence[str]) -> int:
        """Acknowledge results of a batch by their tokens; returns how many."""
        if not tokens:
            return 0
        r = self._request("POST", f"/v1/batches/{_quote(batch_id)}/ack", {"acks": list(tokens)})
        return int(r["acked"])

    def close(self, batch_id: str) -> None:
        """Close a batch: the server removes what is left of it."""
        self._request("DELETE", f"/v1/batches/{_quote(batch_id)}")

    def pause(self, on_pause: str = "finish") -> dict:
        """Pause generation; returns the policy state once no generation
        runs. ``on_pause`` is ``"finish"`` (running generations end) or
        ``"abort"`` (they are cancelled and generated again after the resume)."""
        return self._request("POST", "/v1/pause", {"on_pause": on_pause}, timeout=max(self.timeout, 600.0))

    def resume(self, version: int) -> dict:
        """Resume generation under policy ``version`` (never older than the
        fleet's); returns the policy state."""
        return self._request("POST", "/v1/resume", {"version": version})

    def state(self) -> dict:
        """The fleet's policy state: ``epoch``, ``version``, ``paused``, ``on_pause``."""
        return self._request("GET", "/v1/state")

    def status(self) -> dict:
        """The policy state, the workers and every batch with its progress."""
        return self._request("GET", "/v1/status")

    def health(self) -> bool:
        """Whether the server answers and is connected to NATS."""
        try:
            return bool(self._request("GET", "/healthz").get("ok"))
        except RollfleetError:
            return False

    # -- result streams ---------------------------------------------------

    def groups(self, batch_id: str, ack: bool = True, wait: Optional[float] = None) -> Iterator[dict]:
        """Iterate over a batch's groups (``group_id``, ``env``, ``mean_score``,
        ``trajectories``) until every group that can complete has come.

        See the module doc for acknowledgement. ``wait`` ends the iteration
        after so many seconds even if the batch is not complete."""
        return self._results(batch_id, "groups", "group", ack, wait)

    def trajectories(self, batch_id: str, ack: bool = True, wait: Optional[float] = None) -> Iterator[dict]:
        """Iterate over a batch's trajectories until every episode is decided."""
        return self._results(batch_id, "trajectories", "trajectory", ack, wait)

    def failures(self, batch_id: str, ack: bool = True, wait: Optional[float] = None) -> Iterator[dict]:
        """Iterate over a batch's failure records (``episode_id``, ``kind``,
        ``reason``…) until every episode is decided."""
        return self._results(batch_id, "failures", "failure", ack, wait)

    def _results(self, batch_id: str, path: str, key: str, ack: bool, wait: Optional[float]) -> Iterator[dict]:
        pending: Optional[str] = None
        query = "" if wait is None else "?" + urllib.parse.urlencode({"wait": f"{wait}s"})
        url = f"{self.base_url}/v1/batches/{_quote(batch_id)}/{path}{query}"
        while True:
            done = False
            try:
                resp = urllib.request.urlopen(url, timeout=self.stream_timeout)
            except urllib.error.HTTPError as e:
                raise _http_error(e) from None
            except urllib.error.URLError as e:
                raise RollfleetError(f"GET {url}: {e.reason}") from None
            with resp:
                for raw in resp:
                    line = json.loads(raw)
                    if "error" in line:
                        raise StreamError(line["error"], resp.status)
                    if "done" in line:
                        done = bool(line["done"])
                        break
                    if ack and pending is not None:
                        self.ack(batch_id, [pending])
                        pending = None
                    item = line[key]
                    if ack:
                        pending = line["ack"]
                    else:
                        item["_ack"] = line["ack"]
                    yield item
            if ack and pending is not None:
                self.ack(batch_id, [pending])
                pending = None
            if done or wait is not None:
                return


def _quote(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def _http_error(e: urllib.error.HTTPError) -> RollfleetError:
    try:
        message = json.load(e).get("error") or e.reason
    except (ValueError, AttributeError):
        message = str(e.reason)
    return RollfleetError(str(message), e.code)
