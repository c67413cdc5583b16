"""A client for ``lockstep serve``: the model behind a Unix socket or TCP (docs/PROTOCOL.md).

Standard library only; numpy is used when it is installed. ::

    from lockstep.client import Client

    with Client("/tmp/model.sock") as model:
        print(model.inputs, model.outputs)         # [TensorSpec(name, shape, dtype), ...]
        answer = model.call(ids, [7])              # one value per input, in order
        logits = answer["logits"]                  # numpy array, or bytes without numpy

An address is a Unix socket's path, ``"tcp:HOST:PORT"`` (``serve --listen``; IPv6 as
``tcp:[::1]:PORT``) or a ``(host, port)`` tuple. Behind a balancer (docs/SCALING.md),
``Resending`` resends a call whose connection was lost on a new connection: a call is stateless
and its answer depends on its inputs alone, so any replica may answer it, and twice is harmless.

A call's inputs may be numpy arrays, lists (nested or flat) of numbers, or bytes-like objects
holding the tensor's raw little-endian bytes. Without numpy an output is its raw bytes;
``decode`` turns them into a flat list of numbers.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence

try:  # optional
    import numpy as _np
except ImportError:  # pragma: no cover - exercised where numpy is absent
    _np = None

PROTOCOL_VERSION = 1

# dtype name -> (bytes per element, struct code, numpy dtype name)
DTYPES = {
    "f32": (4, "f", "<f4"),
    "i32": (4, "i", "<i4"),
    "f64": (8, "d", "<f8"),
    "i64": (8, "q", "<i8"),
    "bf16": (2, "H", "<u2"),  # the high half of an f32, rounded to nearest even
    "bool": (1, "?", "u1"),
}

# Larger than any frame a client should accept from the server before seeing the handshake.
_MAX_HANDSHAKE_BYTES = 1 << 20


class ServerError(RuntimeError):
    """The server answered a call with an error (status 1); the message is the server's."""


class ServerRefused(ServerError):
    """The server's handshake carried an ``error`` field: it will not serve this connection
    (it has as many connections open as it allows); the message is the server's."""


class ProtocolError(ConnectionError):
    """The connection ended or the server sent something the protocol does not allow."""


class TensorSpec(NamedTuple):
    name: str
    shape: tuple
    dtype: str

    @property
    def count(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.count * DTYPES[self.dtype][0]


def _spec(entry: Dict[str, Any]) -> TensorSpec:
    spec = TensorSpec(str(entry["name"]), tuple(int(d) for d in entry["shape"]), str(entry["dtype"]))
    if spec.dtype not in DTYPES:
        raise ProtocolError(f"the server describes {spec.name} with unknown dtype {spec.dtype!r}")
    return spec


def _bf16_bits(value: float) -> int:
    """The bf16 of a float: the f32's high half, rounded to nearest even (NaN stays NaN)."""
    (bits,) = struct.unpack("<I", struct.pack("<f", value))
    if (bits & 0x7F800000) == 0x7F800000 and (bits & 0x007FFFFF):
        return (bits >> 16) | 0x0040
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def _flatten(values: Any) -> List[Any]:
    if isinstance(values, (list, tuple)):
        out: List[Any] = []
        for v in values:
            out.extend(_flatten(v))
        return out
    return [values]


def encode(spec: TensorSpec, value: Any) -> bytes:
    """One input tensor as the protocol carries it: raw little-endian, row-major."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        if len(raw) != spec.nbytes:
            raise ValueError(f"input {spec.name} takes {spec.nbytes} bytes "
                             f"({list(spec.shape)} {spec.dtype}); got {len(raw)}")
        return raw
    if _np is not None and isinstance(value, _np.ndarray):
        if value.size != spec.count:
            raise ValueError(f"input {spec.name} takes {spec.count} values {list(spec.shape)}; "
                             f"got an array of shape {list(value.shape)}")
        if spec.dtype == "bf16":
            bits = _np.ascontiguousarray(value, dtype="<f4").reshape(-1).view("<u4").astype("<u8")
            rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
            nan = ((bits & 0x7F800000) == 0x7F800000) & ((bits & 0x007FFFFF) != 0)
            return _np.where(nan, (bits >> 16) | 0x0040, rounded).astype("<u2").tobytes()
        target = _np.dtype(DTYPES[spec.dtype][2])
        if target.kind in "iu" and spec.dtype != "bool":
            if value.dtype.kind not in "iub":
                raise ValueError(f"input {spec.name} is {spec.dtype}; got a {value.dtype} array")
            info = _np.iinfo(target)
            if value.size and (value.min() < info.min or value.max() > info.max):
                raise ValueError(f"input {spec.name}: values outside {spec.dtype}")
        return _np.ascontiguousarray(value, dtype=target).tobytes()
    flat = _flatten(value)
    if len(flat) != spec.count:
        raise ValueError(f"input {spec.name} takes {spec.count} values {list(spec.shape)}; got {len(flat)}")
    if spec.dtype == "bf16":
        return struct.pack(f"<{len(flat)}H", *(_bf16_bits(float(v)) for v in flat))
    try:
        return struct.pack(f"<{len(flat)}{DTYPES[spec.dtype][1]}", *flat)
    except struct.error as e:
        raise ValueError(f"input {spec.name}: {e}") from None


def decode(spec: TensorSpec, raw: bytes) -> List[Any]:
    """An output's raw bytes as a flat list of Python numbers (bf16 widened to float)."""
    if spec.dtype == "bf16":
        halves = struct.unpack(f"<{spec.count}H", raw)
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]
    return list(struct.unpack(f"<{spec.count}{DTYPES[spec.dtype][1]}", raw))


def _as_array(spec: TensorSpec, raw: bytes):
    if spec.dtype == "bf16":
        halves = _np.frombuffer(raw, dtype="<u2").astype("<u4") << 16
        return halves.view("<f4").reshape(spec.shape)
    array = _np.frombuffer(raw, dtype=DTYPES[spec.dtype][2]).reshape(spec.shape)
    return array.astype(bool) if spec.dtype == "bool" else array


class Client:
    """One connection to ``lockstep serve``. Calls on one connection run one after another;
    open one client per thread to run calls side by side (the server batches them)."""

    def __init__(self, path: Any, timeout: Optional[float] = None):
        family, address = _address(path)
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._sock.settimeout(timeout)
            self._sock.connect(address)
            about = json.loads(self._read_frame(_MAX_HANDSHAKE_BYTES).decode("utf-8"))
        except BaseException:
            self._sock.close()
            raise
        if about.get("protocol") != PROTOCOL_VERSION:
            self._sock.close()
            raise ProtocolError(f"{path}: the server speaks protocol {about.get('protocol')!r}; "
                                f"this client speaks {PROTOCOL_VERSION}")
        if "error" in about:  # the server will not serve this connection (at its limit)
            self._sock.close()
            raise ServerRefused(f"{path}: {about['error']}")
        self.path = path
        self.handshake: Dict[str, Any] = about
        self.checkpoint: str = about["checkpoint"]
        self.step: Optional[int] = about["step"]
        self.slug: Optional[str] = about["slug"]
        self.precision: str = about["precision"]
        self.replica: Optional[str] = about.get("replica")  # which server answered (serve --name)
        self.inputs: List[TensorSpec] = [_spec(e) for e in about["inputs"]]
        self.outputs: List[TensorSpec] = [_spec(e) for e in about["outputs"]]
        self.input_bytes = sum(s.nbytes for s in self.inputs)
        self.output_bytes = sum(s.nbytes for s in self.outputs)

    # -- frames -------------------------------------------------------------------------------

    def _read_exact(self, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            try:
                r = self._sock.recv_into(view[got:], n - got)
            except ConnectionResetError:
                r = 0
            if r == 0:
                raise ProtocolError(f"{getattr(self, 'path', 'the server')}: the connection closed")
            got += r
        return bytes(buf)

    def _read_frame(self, limit: int) -> bytes:
        (n,) = struct.unpack("<Q", self._read_exact(8))
        if n > limit:
            raise ProtocolError(f"the server sent a frame of {n} bytes; at most {limit} were expected")
        return self._read_exact(n)

    # -- calls --------------------------------------------------------------------------------

    def call_raw(self, payload: bytes) -> bytes:
        """One call from its raw bytes (every input, in order); returns the outputs' raw bytes.
        Raises ServerError with the server's message when the call is refused."""
        try:
            self._sock.sendall(struct.pack("<Q", len(payload)) + payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # a refused frame: the server answered and closed; its answer is still to read
        answer = self._read_frame(1 + max(self.output_bytes, 1 << 16))
        if not answer:
            raise ProtocolError("the server sent an empty answer")
        if answer[0] == 1:
            raise ServerError(answer[1:].decode("utf-8", errors="replace"))
        if answer[0] != 0 or len(answer) != 1 + self.output_bytes:
            raise ProtocolError(f"malformed answer: status {answer[0]}, {len(answer)} bytes")
        return answer[1:]

    def encode(self, *inputs: Any, **named: Any) -> bytes:
        """A call's payload: one value per input, by position or by name."""
        values = list(inputs)
        if len(values) > len(self.inputs):
            raise TypeError(f"the model takes {len(self.inputs)} inputs "
                            f"({', '.join(s.name for s in self.inputs)}); got {len(values)}")
        for spec in self.inputs[len(values):]:
            if spec.name not in named:
                raise TypeError(f"input {spec.name} is missing")
            values.append(named.pop(spec.name))
        if named:
            raise TypeError(f"unknown or repeated inputs: {', '.join(sorted(named))}")
        return b"".join(encode(s, v) for s, v in zip(self.inputs, values))

    def split(self, raw: bytes) -> Dict[str, Any]:
        """An answer's raw outputs by name: numpy arrays with numpy, else bytes."""
        out: Dict[str, Any] = {}
        offset = 0
        for spec in self.outputs:
            chunk = raw[offset:offset + spec.nbytes]
            offset += spec.nbytes
            out[spec.name] = _as_array(spec, chunk) if _np is not None else chunk
        return out

    def call(self, *inputs: Any, **named: Any) -> Dict[str, Any]:
        """One call; returns {output name: value} in the handshake's order."""
        return self.split(self.call_raw(self.encode(*inputs, **named)))

    # -- lifetime -----------------------------------------------------------------------------

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        def specs(xs: Sequence[TensorSpec]) -> str:
            return ", ".join(f"{s.name} {list(s.shape)} {s.dtype}" for s in xs)
        return f"Client({self.path!r}: inputs {specs(self.inputs)}; outputs {specs(self.outputs)})"


def _address(address: Any):
    """(socket family, connect() address) of a Unix path, "tcp:HOST:PORT" or (host, port)."""
    if isinstance(address, tuple):
        host, port = address
    elif isinstance(address, str) and address.startswith("tcp:"):
        host, sep, port = address[4:].rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"a TCP address is tcp:HOST:PORT (port 1..65535); got {address!r}")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    else:
        return socket.AF_UNIX, address
    infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    return infos[0][0], infos[0][4]


def connect(path: Any, timeout: Optional[float] = None) -> Client:
    """A client of the server at a Unix socket path, "tcp:HOST:PORT" or (host, port)."""
    return Client(path, timeout)


class Resending:
    """Calls to a server or a balancer in front of several (docs/SCALING.md) that survive a lost
    connection: a call whose connection closed, was refused or reset before its answer came is
    sent again on a new connection, up to ``retries`` more times, after ``backoff`` seconds
    (doubling, at most 2 s). Safe because a call is stateless: its answer depends on its inputs
    alone, so any replica may answer it and answering twice changes nothing. An error answer
    (ServerError) is not resent. ``replicas``: the handshake's replica of each answer's server."""

    def __init__(self, address: Any, timeout: Optional[float] = None, retries: int = 5,
                 backoff: float = 0.2):
        self.address = address
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.replicas: List[Optional[str]] = []
        self.resent = 0  # calls sent again after a lost connection
        self._client: Optional[Client] = None

    def _retrying(self, use: Callable[[Client], Any]) -> Any:
        """use(a connected client), on a new connection again while connections are lost."""
        delay = self.backoff
        for attempt in range(self.retries + 1):
            try:
                if self._client is None:
                    self._client = Client(self.address, self.timeout)
                result = use(self._client)
                self.replicas.append(self._client.replica)
                return result
            except ServerRefused as e:  # at its connection limit: try again, maybe elsewhere
                error: Exception = e
            except (ProtocolError, OSError) as e:  # lost, refused, reset, timed out
                error = e
            self.close()
            if attempt == self.retries:
                raise error
            self.resent += 1
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")

    def call_raw(self, payload: bytes) -> bytes:
        """One call from its raw bytes (Client.call_raw), resent while connections are lost."""
        return self._retrying(lambda client: client.call_raw(payload))

    def call(self, *inputs: Any, **named: Any) -> Dict[str, Any]:
        """One call (Client.call), resent on a new connection while connections are lost."""
        return self._retrying(lambda client: client.call(*inputs, **named))

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> "Resending":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
