"""One client process that streams the same long completion through lockstep.http_client back to
back until its stdin closes, pinned to a replica with X-Lockstep-Affinity, and reports on stdout
one JSON line per event:

  ["start", n]                                   stream n began
  ["piece", n, pieces, time, replica, attempts]   its pieces so far, at time.monotonic()
  ["done", n, text, attempts, replicas]           it ended
  ["error", message]                              the client failed (the process then exits 1)

A process of its own, not a thread beside the test's 32 load clients: sharing their interpreter
lock, a reader fell whole seconds behind its stream, so the server could have finished a stream
that the test still saw in its middle.

Usage: long_stream_reader.py URL AFFINITY_KEY JSON_BODY"""
import json
import select
import sys
import time

from lockstep.http_client import HttpClient


def emit(*event):
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def stopping():
    """Whether stdin is closed (or has a line): the test asks for no further stream."""
    return bool(select.select([sys.stdin], [], [], 0)[0])


def main():
    url, key, body = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    n = 0
    try:
        while not stopping():
            c = HttpClient(url, timeout=30, retries=8, backoff=0.2, headers={"X-Lockstep-Affinity": key})
            emit("start", n)
            pieces = []
            for piece in c.stream_completion(**body):
                pieces.append(piece)
                emit("piece", n, len(pieces), time.monotonic(), c.replicas[-1], c.attempts)
            emit("done", n, "".join(pieces), c.attempts, c.replicas)
            n += 1
    except Exception as e:  # noqa: BLE001 (reported to the test)
        emit("error", repr(e))
        sys.exit(1)


if __name__ == "__main__":
    main()
