"""A client of ``lockstep serve --http`` (docs/HTTP.md) that survives a replica's death.

Every answer of a lockstep server is a function of the request alone (model, prompt, seed,
sampling fields): no replica, batch, thread count or cache changes a bit. So a request that
failed may be sent again to any replica, and a stream that broke off may be *resumed exactly*:
send the same request again (same seed) and drop the text already delivered. The new stream
repeats that text bit for bit, then continues. Behind a load balancer (docs/SCALING.md) the
client never sees a replica's death, only a pause::

    from lockstep.http_client import HttpClient
    c = HttpClient("http://127.0.0.1:8080")
    print(c.completion(prompt="The ", max_tokens=40, seed=7)["choices"][0]["text"])
    for piece in c.stream_completion(prompt="The ", max_tokens=40, seed=7):
        print(piece, end="", flush=True)

The rule for other clients is the same three lines: give a ``seed`` (or keep the one the first
answer returned), count the text delivered per choice, and on a lost stream resend the request
and skip that many characters (they arrive again, identical). This client also checks that the
repeated text is identical and raises ``ReplicaMismatch`` otherwise, which would mean two
replicas serve different models.

Standard library only (http.client), like ``lockstep.client``.
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import time
import urllib.parse
from typing import Any, Dict, Iterator, List, Optional, Tuple

__all__ = ["HttpClient", "HttpError", "ReplicaMismatch", "RETRY_STATUS"]

# Answers that say "not now, try again" (queue full, balancer without a live replica, draining
# server): the request had no effect, so resending it is safe.
RETRY_STATUS = frozenset({429, 502, 503, 504})

# What a lost connection looks like to http.client: refused, reset, closed early, timed out.
_LOST = (ConnectionError, http.client.HTTPException, socket.timeout, OSError)


class HttpError(RuntimeError):
    """The server answered with an error that resending cannot fix (400, 401, 404, ...), or a
    retryable one still after every retry."""

    def __init__(self, status: int, body: bytes, replica: Optional[str]):
        self.status = status
        self.body = body
        self.replica = replica
        try:
            message = json.loads(body)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = body[:200].decode(errors="replace")
        super().__init__(f"HTTP {status} from {replica or 'the server'}: {message}")


class ReplicaMismatch(RuntimeError):
    """A resumed stream repeated the delivered text differently: the replicas do not serve the
    same model (compare /v1/models' parameters_sha256)."""


class _Lost(Exception):
    """One attempt ended before its answer was whole (resumable)."""


class HttpClient:
    """Completions from one base URL (a server, or a balancer in front of several).

    ``retries``: further attempts after a lost connection, a retryable status (RETRY_STATUS) or
    a stream cut short; waits ``backoff`` seconds, doubling, at most ``max_backoff``, or the
    server's Retry-After when it gives one. ``timeout``: seconds any one read may wait.
    """

    def __init__(self, base_url: str, timeout: float = 30.0, retries: int = 5, backoff: float = 0.2,
                 max_backoff: float = 2.0, api_key: Optional[str] = None,
                 headers: Optional[Dict[str, str]] = None):
        url = urllib.parse.urlsplit(base_url)
        if url.scheme != "http" or not url.hostname:
            raise ValueError(f"base_url must be http://HOST[:PORT], got {base_url!r}")
        self.host = url.hostname
        self.port = url.port or 80
        self.prefix = url.path.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        # The X-Lockstep-Replica of every response used, in order (resumed streams add one each).
        self.replicas: List[str] = []
        self.attempts = 0  # requests sent, first tries and retries together
        self.last_finish_reasons: List[Optional[str]] = []
        self.last_seed: Optional[int] = None

    # -- the endpoints ------------------------------------------------------------------------

    def completion(self, **body: Any) -> Dict[str, Any]:
        """POST /v1/completions (not streamed); the answer's JSON."""
        return self._whole("/v1/completions", body)

    def chat_completion(self, **body: Any) -> Dict[str, Any]:
        """POST /v1/chat/completions (not streamed); the answer's JSON."""
        return self._whole("/v1/chat/completions", body)

    def stream_completion(self, **body: Any) -> Iterator[str]:
        """POST /v1/completions streamed, n = 1: the text as it comes, resumed across failures."""
        return self._single(self.stream_choices("/v1/completions", **body))

    def stream_chat_completion(self, **body: Any) -> Iterator[str]:
        """POST /v1/chat/completions streamed, n = 1: the reply's text as it comes."""
        return self._single(self.stream_choices("/v1/chat/completions", **body))

    def stream_choices(self, path: str, **body: Any) -> Iterator[Tuple[int, str]]:
        """A streamed completion at ``path`` as (choice index, text) pieces, any n and any number
        of prompts (choice p * n + i), resumed across failures. Pieces carry text only: a resumed
        stream's logprobs are not merged."""
        body = self._with_seed(body)
        body["stream"] = True
        prompt = body.get("prompt")
        batch = isinstance(prompt, list) and bool(prompt) and isinstance(prompt[0], (str, list))
        n = int(body.get("n", 1)) * (len(prompt) if batch else 1)
        delivered = [""] * n  # text handed to the caller, per choice
        self.last_finish_reasons = [None] * n
        for attempt in self._attempts():
            received = [""] * n  # text of this attempt, per choice
            try:
                for index, text, finish in self._events(path, body):
                    if finish is not None:
                        self.last_finish_reasons[index] = finish
                    if not text:
                        continue
                    before = len(received[index])
                    received[index] += text
                    known = delivered[index]
                    # The part of this piece already delivered must repeat it exactly.
                    overlap_end = min(len(received[index]), len(known))
                    if received[index][before:overlap_end] != known[before:overlap_end]:
                        raise ReplicaMismatch(
                            f"choice {index}: a resumed stream (replica {self.replicas[-1]}) repeats "
                            f"the delivered text differently after {before} characters")
                    if len(received[index]) > len(known):
                        new = received[index][len(known):]
                        delivered[index] += new
                        yield index, new
                if "abort" in self.last_finish_reasons:
                    # The server stopped the generation (a drain that ran out of time): the text
                    # so far is right, the rest comes from the same request sent again.
                    raise _Lost("the generation ended with finish_reason 'abort'")
                return
            except _Lost as e:
                attempt.failed(e)

    # -- one attempt --------------------------------------------------------------------------

    def _whole(self, path: str, body: Dict[str, Any]) -> Dict[str, Any]:
        body = self._with_seed(body)
        body.pop("stream", None)
        for attempt in self._attempts():
            try:
                response, conn = self._send(path, body)
                try:
                    data = response.read()
                except _LOST as e:
                    raise _Lost(f"the answer broke off: {e!r}") from e
                finally:
                    conn.close()
                try:
                    answer = json.loads(data)
                except ValueError as e:  # cut off within the head or the body
                    raise _Lost(f"the answer broke off: {len(data)} bytes that are not whole JSON") from e
                reasons = [c.get("finish_reason") for c in answer.get("choices", [])]
                self.last_finish_reasons = reasons
                if "abort" in reasons:
                    raise _Lost("the generation ended with finish_reason 'abort'")
                return answer
            except _Lost as e:
                attempt.failed(e)
        raise AssertionError("unreachable")

    def _events(self, path: str, body: Dict[str, Any]) -> Iterator[Tuple[int, str, Optional[str]]]:
        """One streamed attempt: (index, text, finish_reason) per choice in each event; raises
        _Lost when the stream ends before ``data: [DONE]``."""
        response, conn = self._send(path, body)
        try:
            event = b""
            while True:
                try:
                    line = response.readline()
                except _LOST as e:
                    raise _Lost(f"the stream broke off: {e!r}") from e
                if not line:
                    raise _Lost("the stream ended before data: [DONE]")
                if line not in (b"\n", b"\r\n"):
                    event += line
                    continue
                if not event.startswith(b"data: "):
                    event = b""
                    continue
                payload = event[len(b"data: "):].strip()
                event = b""
                if payload == b"[DONE]":
                    return
                chunk = json.loads(payload)
                if "error" in chunk:
                    raise HttpError(500, payload, self.replicas[-1] if self.replicas else None)
                for choice in chunk.get("choices", []):
                    text = choice.get("text")
                    if text is None:
                        text = (choice.get("delta") or {}).get("content") or ""
                    yield int(choice.get("index", 0)), text, choice.get("finish_reason")
        finally:
            conn.close()

    def _send(self, path: str, body: Dict[str, Any]):
        """Sends one request; the response (status 200) and its connection. Raises _Lost for a
        lost connection or a retryable status, HttpError for any other error status."""
        self.attempts += 1
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("POST", self.prefix + path, body=json.dumps(body).encode(), headers=self.headers)
            response = conn.getresponse()
        except _LOST as e:
            conn.close()
            raise _Lost(f"no answer: {e!r}") from e
        replica = response.getheader("X-Lockstep-Replica")
        if replica:
            self.replicas.append(replica)
        if response.status == 200:
            return response, conn
        try:
            data = response.read()
        except _LOST:
            data = b""
        conn.close()
        if response.status in RETRY_STATUS:
            lost = _Lost(f"HTTP {response.status} from {replica or 'the server'}")
            lost.retry_after = response.getheader("Retry-After")
            lost.error = HttpError(response.status, data, replica)
            raise lost
        raise HttpError(response.status, data, replica)

    # -- retries ------------------------------------------------------------------------------

    def _attempts(self) -> Iterator["_Attempt"]:
        """Yields one _Attempt per try; a try that calls failed() is followed by the next one
        after the backoff, until the retries are spent (then the last failure is raised)."""
        delay = self.backoff
        for i in range(self.retries + 1):
            attempt = _Attempt()
            yield attempt
            if attempt.error is None:
                return
            if i == self.retries:
                break
            wait = delay
            retry_after = getattr(attempt.error, "retry_after", None)
            if retry_after:
                try:
                    wait = max(wait, min(float(retry_after), self.max_backoff))
                except ValueError:
                    pass
            time.sleep(wait)
            delay = min(delay * 2, self.max_backoff)
        error = attempt.error
        raise getattr(error, "error", None) or ConnectionError(
            f"{self.retries + 1} attempts failed; the last: {error}")

    def _with_seed(self, body: Dict[str, Any]) -> Dict[str, Any]:
        """The body with a seed: a retry must be the same request, so one is chosen here when
        the caller gave none (the server would otherwise pick a new one per attempt)."""
        body = dict(body)
        if body.get("seed") is None:
            body["seed"] = random.getrandbits(63)
        self.last_seed = body["seed"]
        return body

    @staticmethod
    def _single(pieces: Iterator[Tuple[int, str]]) -> Iterator[str]:
        for index, text in pieces:
            if index != 0:
                raise ValueError("stream_completion takes n = 1; use stream_choices for more")
            yield text


class _Attempt:
    __slots__ = ("error",)

    def __init__(self):
        self.error: Optional[Exception] = None

    def failed(self, error: Exception) -> None:
        self.error = error
