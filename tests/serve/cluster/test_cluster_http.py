"""HTTP through HAProxy to 3 replicas under load while replicas die, drain and come back, and
HAProxy itself restarts (docs/SCALING.md, "What happens on each fault").

32 clients x 50 requests with fixed seeds (a third streamed), beside long streams pinned with
X-Lockstep-Affinity to the replicas the faults hit: one replica is SIGKILLed while a long stream
runs on it (the stream breaks; lockstep.http_client resumes it elsewhere), another is SIGTERMed
while a long stream runs on it (it drains: the stream finishes there, new requests go elsewhere),
then HAProxy is SIGKILLed. deploy/cluster.sh starts each again on its ports. Every request must
complete, every text must equal the same request's answer from a server alone, and the
X-Lockstep-Replica headers must show every replica answering."""
import http.client
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from lockstep.http_client import HttpClient

CLIENTS = int(os.environ.get("LOCKSTEP_CLUSTER_CLIENTS", 32))
REQUESTS = int(os.environ.get("LOCKSTEP_CLUSTER_REQUESTS", 50))
VARIANTS = 5  # distinct requests per client, asked in turn
LONG_TOKENS = 3000  # a long stream: long enough that a fault lands in its middle
# A bound of lockstep_request_generation_tokens' buckets below LONG_TOKENS and above every load
# request's max_tokens: generations that ended past it were long streams.
LONG_OVER = 2000
AFFINITY = "X-Lockstep-Affinity"
READER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "long_stream_reader.py")


def body(client, variant):
    return dict(prompt=f"cluster {client}.{variant}", max_tokens=6 + (client * 7 + variant * 3) % 20,
                temperature=0.9, top_k=40, seed=20_000 + 100 * client + variant)


def streamed(client, variant):
    return (client + variant) % 3 == 0


def long_body(key):
    return dict(prompt=f"long {key}", max_tokens=LONG_TOKENS, temperature=0.8, seed=7_000 + len(key))


def client_for(url, **kw):
    return HttpClient(url, timeout=30, retries=8, backoff=0.2, **kw)


def affinity_keys(url, wanted):
    """{replica: a key X-Lockstep-Affinity sends to it} for the wanted replicas, from probes; also
    checks that a key keeps its replica."""
    found = {}
    for i in range(200):
        key = f"conversation-{i}"
        c = client_for(url, headers={AFFINITY: key})
        for _ in range(2):
            c.completion(prompt="probe", max_tokens=1, seed=1)
        assert len(set(c.replicas)) == 1, f"{key} went to {c.replicas}"
        found.setdefault(c.replicas[0], key)
        if all(w in found for w in wanted):
            return found
    raise AssertionError(f"no affinity key reached each of {wanted}: {found}")


class LongStreams:
    """Long streams to one replica (by affinity) back to back until stopped, read by a client
    process of their own (long_stream_reader.py); each one's text, attempts and replicas, and
    where the one under way is."""

    def __init__(self, url, key):
        self.url, self.key = url, key
        self.results = []  # (text, attempts, replicas, stream number)
        self.current = None  # the number of the stream under way
        self.current_attempts = 0  # its attempts so far
        self.last_piece = (0.0, None, 0)  # (time, X-Lockstep-Replica of its attempt, pieces so far)
        self.errors = []
        self.proc = subprocess.Popen([sys.executable, READER, url, key, json.dumps(long_body(key))],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self.follow)
        self.thread.start()

    def follow(self):
        for line in self.proc.stdout:
            event = json.loads(line)
            if event[0] == "start":
                self.current, self.current_attempts = event[1], 0
            elif event[0] == "piece":
                self.current_attempts = event[5]
                self.last_piece = (event[3], event[4], event[2])
            elif event[0] == "done":
                self.results.append((event[2], event[3], event[4], event[1]))
            else:
                self.errors.append(event[1])
        if self.proc.wait() != 0 and not self.errors:
            self.errors.append(f"the reader exited with status {self.proc.returncode}")

    def in_middle_from(self, name):
        """Whether the stream under way has delivered between 50 and LONG_TOKENS // 2 pieces, the
        last from `name` within 50 ms."""
        at, replica, pieces = self.last_piece
        return 50 <= pieces < LONG_TOKENS // 2 and replica == name and time.monotonic() - at < 0.05

    def stop(self):
        """Lets the stream under way end, then stops the reader."""
        self.proc.stdin.close()
        self.thread.join(120)
        assert not self.thread.is_alive()

    def kill(self):
        """Ends the reader at once (a test that failed before stop())."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.thread.join(10)


@pytest.fixture
def long_streams():
    """LongStreams(url, key) whose reader processes are killed when the test ends, however."""
    made = []

    def make(url, key):
        made.append(LongStreams(url, key))
        return made[-1]

    yield make
    for streams in made:
        streams.kill()


def wait_generating(c, streams, name, exact=True, timeout=30):
    """Waits until a long stream is in its middle on the client's side, coming from the replica,
    and (exact) the replica has not finished it: it has ended as many long generations as the
    reader had streams before this one, so a signal now lands while the server still generates
    it. Exact only while every long generation on the replica was one whole stream (no fault
    has cut one: a cut attempt, ended there, counts too)."""
    deadline = time.monotonic() + timeout
    while True:
        if streams.in_middle_from(name):
            number = streams.current
            if ((not exact or c.generations_over(name, LONG_OVER) == number) and streams.current == number
                    and streams.in_middle_from(name)):
                return
        assert time.monotonic() < deadline, f"no long stream in its middle on {name}"
        time.sleep(0.005)


def test_load_through_haproxy_survives_kill_drain_and_haproxy_restart(cluster, alone, long_streams):
    began = time.monotonic()
    c = cluster(replicas=3)
    keys = affinity_keys(c.url, ["r1", "r2"])
    bodies = [[body(k, v) for v in range(VARIANTS)] for k in range(CLIENTS)]
    expected = [[alone.completion(b) for b in row] for row in bodies]
    expected_long = {key: alone.completion(long_body(key)) for key in keys.values()}

    results = [[None] * REQUESTS for _ in range(CLIENTS)]
    replicas = [[] for _ in range(CLIENTS)]
    errors = []
    done = [0]
    lock = threading.Lock()

    def load(k):
        try:
            client = client_for(c.url)
            for i in range(REQUESTS):
                v = i % VARIANTS
                if streamed(k, v):
                    results[k][i] = "".join(client.stream_completion(**bodies[k][v]))
                else:
                    results[k][i] = client.completion(**bodies[k][v])["choices"][0]["text"]
                with lock:
                    done[0] += 1
            replicas[k] = client.replicas
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(f"client {k}: {e!r}")

    on_r1 = long_streams(c.url, keys["r1"])
    on_r2 = long_streams(c.url, keys["r2"])
    threads = [threading.Thread(target=load, args=(k,)) for k in range(CLIENTS)]
    for t in threads:
        t.start()

    # The faults, in the middle of the load.
    while done[0] < CLIENTS * REQUESTS // 10 and not errors and any(t.is_alive() for t in threads):
        time.sleep(0.01)
    wait_generating(c, on_r1, "r1")
    killed = c.signal("r1", 9)  # SIGKILL: its streams break, its requests in flight are lost
    done_at_kill = done[0]
    c.wait_up("r1", killed)
    haproxy = c.signal("haproxy", 9)  # every connection through it breaks
    done_at_haproxy = done[0]
    deadline = time.monotonic() + 30
    while c.pid("haproxy") == haproxy and time.monotonic() < deadline:
        time.sleep(0.05)
    wait_generating(c, on_r2, "r2", exact=False)  # HAProxy's restart may have cut one of them
    draining, draining_attempts = on_r2.current, on_r2.current_attempts
    drained = c.signal("r2", 15)  # SIGTERM: drains
    c.wait_up("r2", drained)

    for t in threads:
        t.join(150)
    on_r1.stop()
    on_r2.stop()
    assert not any(t.is_alive() for t in threads), "load clients still running"
    assert not errors, errors[:5]
    assert not on_r1.errors and not on_r2.errors, on_r1.errors + on_r2.errors

    # Every answer is the answer alone, whoever gave it.
    wrong = [(k, i) for k in range(CLIENTS) for i in range(REQUESTS)
             if results[k][i] != expected[k][i % VARIANTS]]
    assert not wrong, f"{len(wrong)} answers differ from the answer alone, e.g. {wrong[:5]}"
    for streams in (on_r1, on_r2):
        assert streams.results
        for text, _, _, _ in streams.results:
            assert text == expected_long[streams.key]

    # The stream cut by the SIGKILL resumed (its text, checked above, is the answer alone). Its
    # retry goes to another replica, or to r1's new process when that is up before HAProxy's
    # checks mark r1 down (both seen under ctest -j2), so the test asks for the resume, not where.
    # The one on the draining replica finished there.
    assert any(attempts > 1 and r[0] == "r1" for _, attempts, r, _ in on_r1.results), \
        [(a, r) for _, a, r, _ in on_r1.results]
    finished_there = [(attempts, r) for _, attempts, r, number in on_r2.results if number == draining]
    assert finished_there and finished_there[0][0] == draining_attempts and finished_there[0][1][-1] == "r2", \
        (finished_there, draining_attempts)

    seen = {r for row in replicas for r in row}
    assert seen == {"r1", "r2", "r3"}, seen
    out = c.output()
    assert "r1 (pid %d) exited with status 137" % killed in out, out
    assert "r2 (pid %d) exited with status 143" % drained in out, out
    assert "haproxy (pid %d) exited" % haproxy in out, out
    assert 0 < done_at_kill < CLIENTS * REQUESTS, "the load ended before the faults"
    print(f"\n{CLIENTS * REQUESTS} requests + {len(on_r1.results) + len(on_r2.results)} long streams "
          f"through HAProxy in {time.monotonic() - began:.1f} s; SIGKILL r1 after {done_at_kill}, "
          f"HAProxy after {done_at_haproxy}")


def test_affinity_keeps_a_key_on_one_replica_and_answers_stay_the_same(cluster, alone):
    c = cluster(replicas=3)
    b = dict(prompt="affinity", max_tokens=12, temperature=0.9, seed=5)
    want = alone.completion(b)
    where = {}
    for i in range(24):
        key = f"user-{i}"
        client = client_for(c.url, headers={AFFINITY: key})
        for _ in range(3):
            assert client.completion(**b)["choices"][0]["text"] == want
        assert len(set(client.replicas)) == 1, (key, client.replicas)
        where[key] = client.replicas[0]
    assert len(set(where.values())) >= 2, where  # the keys spread over the replicas
    # Without the header, leastconn spreads the same request: same text from every replica.
    client = client_for(c.url)
    for _ in range(12):
        assert client.completion(**b)["choices"][0]["text"] == want


def test_ctrl_c_stops_every_process(cluster):
    c = cluster(replicas=2)
    pids = [c.pid(n) for n in ("r1", "r2", "haproxy")]
    os.killpg(c.proc.pid, 2)  # SIGINT to the process group, as Ctrl-C in a terminal
    assert c.proc.wait(30) == 0
    assert "cluster: stopped" in c.output()
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    assert not c.left_running()


def test_pid_and_ports_files_are_replaced_whole_when_processes_restart(cluster):
    """deploy/cluster.sh rewrites NAME.pid and NAME.ports at each restart while readers (these
    tests, an operator's script) poll them. Written in place, a reader could catch the file empty
    between the truncation and the write (CI saw `int('')` here once); written to a temporary name
    and renamed, every read sees a whole file. A rename gives the path a new inode; a rewrite in
    place keeps the old one, so the inodes tell the two apart without winning a race."""
    c = cluster(replicas=1)
    files = [c.dir / n for n in ("r1.pid", "r1.ports", "haproxy.pid")]
    before = {f.name: f.stat().st_ino for f in files}
    bad, stop = [], threading.Event()

    def read_all():  # every read during the restarts must parse
        while not stop.is_set():
            for f in files:
                try:
                    text = f.read_text()
                except FileNotFoundError:
                    bad.append(f"{f.name} missing")
                    continue
                fields = text.split()
                if f.name.endswith(".pid") and not (len(fields) == 1 and fields[0].isdigit()):
                    bad.append(f"{f.name}: {text!r}")
                elif f.name.endswith(".ports") and len(fields) != 2:
                    bad.append(f"{f.name}: {text!r}")

    reader = threading.Thread(target=read_all)
    reader.start()
    try:
        c.wait_up("r1", c.signal("r1", 9))
        haproxy = c.signal("haproxy", 9)
        deadline = time.monotonic() + 30
        while c.pid("haproxy") == haproxy and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.pid("haproxy") != haproxy, c.output()
    finally:
        stop.set()
        reader.join(10)
    assert not bad, bad[:5]
    after = {f.name: f.stat().st_ino for f in files}
    assert all(after[n] != before[n] for n in before), (before, after)
    assert not list(c.dir.glob("*.tmp"))


def plain_completion(http_address, b):
    """One request with http.client alone (no retry, new connection): (status, replica, text)."""
    conn = http.client.HTTPConnection(*http_address, timeout=30)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(b))
        r = conn.getresponse()
        data = r.read()
        text = json.loads(data)["choices"][0]["text"] if r.status == 200 else data
        return r.status, r.getheader("X-Lockstep-Replica"), text
    finally:
        conn.close()


def test_haproxy_alone_hides_a_dead_and_a_draining_replica_from_a_plain_client(cluster, alone, long_streams):
    """deploy/haproxy.cfg's retry-on + redispatch: a client without any retry of its own sees no
    error when a replica is dead before HAProxy's checks notice (connection refused), nor when
    one drains (it answers 503 to new requests until the checks take it out)."""
    c = cluster(replicas=3, restart_delay="30")  # a replica that exits stays down here
    b = dict(prompt="plain", max_tokens=8, temperature=0.9, seed=11)
    want = alone.completion(b)

    def redispatches():
        return int(c.haproxy_stat()[("lockstep_http_replicas", "BACKEND")]["wredis"] or 0)

    killed = c.signal("r1", 9)
    c.wait_exited("r1", killed)
    before = redispatches()
    answers = [plain_completion(c.http, b) for _ in range(12)]  # within the checks' 1 s
    assert all(a == (200, a[1], want) for a in answers), answers
    assert {a[1] for a in answers} == {"r2", "r3"}
    assert redispatches() > before, "no request met the dead replica; HAProxy redispatched none"

    # One fault at a time: once the checks have taken r1 out (with two bad replicas in the pool
    # at once, 3 retries can all land on them). Then r2 drains while a long stream holds it up:
    # it answers new requests 503, and HAProxy sends them to r3 instead (which needs option
    # http-buffer-request: without it HAProxy 2.6 passed some of those 503 on to the client).
    c.wait_down("r1")
    streams = long_streams(c.url, affinity_keys(c.url, ["r2"])["r2"])
    wait_generating(c, streams, "r2")
    c.signal("r2", 15)
    c.wait_draining("r2")
    before = redispatches()
    answers = [plain_completion(c.http, b) for _ in range(12)]
    streams.stop()
    assert all(a == (200, "r3", want) for a in answers), answers
    assert redispatches() > before, "no request met the draining replica's 503"
    assert not streams.errors and streams.results[0][1:3] == (1, ["r2"]), (streams.errors, streams.results)


# The replicas' --max-body behind the balancer (deploy/cluster.sh) and what HAProxy can resend
# (deploy/haproxy.cfg, tune.bufsize): docs/SCALING.md, "Request bodies and HAProxy's buffers".
MAX_BODY = 262144


def test_a_body_near_the_limit_is_resent_when_a_replica_dies(cluster, alone):
    """HAProxy resends a request only if it holds the whole of it (tune.bufsize): with its
    default 16 KB buffer, 100 KB prompts in flight to a replica that was SIGKILLed came back 502
    (issue 35). Bodies just under the replicas' --max-body, sent in a loop by plain clients (no
    retry of their own) while a replica is killed under them, all get their answer; a body over
    it is refused by the replica with 413, not lost."""
    c = cluster(replicas=3, restart_delay="30")  # a replica that exits stays down here
    filler = "the quick brown fox jumps over the lazy dog. " * (MAX_BODY // 45 + 1)
    bodies = []
    for k in range(4):
        b = dict(prompt="", max_tokens=48, temperature=0.9, seed=40 + k)
        b["prompt"] = filler[k: k + MAX_BODY - 1024 - len(json.dumps(b))]
        assert MAX_BODY - 1024 <= len(json.dumps(b)) <= MAX_BODY
        bodies.append(b)
    want = [alone.completion(b) for b in bodies]
    answers, stop = [], threading.Event()

    def loop(k):
        while not stop.is_set():
            answers.append((k,) + plain_completion(c.http, bodies[k]))

    threads = [threading.Thread(target=loop, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)
        c.signal("r1", 9)  # with requests in flight on it: leastconn spreads the 4 loops
        time.sleep(2.0)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    bad = [(k, status, replica) for k, status, replica, text in answers if (status, text) != (200, want[k])]
    assert not bad and len(answers) > 8, (bad, len(answers))
    over = dict(bodies[0], prompt=filler[: MAX_BODY + 16])
    status, _, data = plain_completion(c.http, over)
    assert status == 413, (status, data)


def test_a_schema_answer_is_the_same_from_every_replica(cluster, alone):
    # Structured output (docs/HTTP.md): the masked draw has the same bits on every replica.
    schema = {"type": "object", "properties": {"word": {"type": "string", "maxLength": 6}, "n": {"type": "integer"}},
              "required": ["word", "n"], "additionalProperties": False}
    c = cluster(replicas=2)
    b = dict(prompt="json", max_tokens=200, temperature=1, seed=8,
             response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema}})
    want = alone.completion(b)
    assert set(json.loads(want)) == {"word", "n"}, want
    client = client_for(c.url)
    for _ in range(8):  # leastconn spreads them over the replicas
        assert client.completion(**b)["choices"][0]["text"] == want


def test_the_openai_client_gets_the_same_schema_answer_from_every_replica(cluster, alone):
    """Issue 38: the official OpenAI JavaScript client (tests/text/chat_client, pinned) asks for a
    JSON Schema answer through HAProxy, whole and streamed, three times; every answer is valid JSON
    of the schema and the same bytes as the lone server's, whichever replica gave it."""
    import jsonschema
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "text"))
    from npm_oracle import install_or_skip

    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "text", "chat_client")
    install_or_skip(folder, "openai", "the OpenAI client's structured output through HAProxy")
    schema = {"type": "object", "properties": {"word": {"type": "string", "maxLength": 6}, "n": {"type": "integer"},
                                               "ok": {"type": "boolean"}},
              "required": ["word", "n", "ok"], "additionalProperties": False}
    chat = dict(model="tiny", messages=[{"role": "user", "content": "json, please"}], max_tokens=300,
                temperature=1, seed=12, response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema}})

    def answers(base_url):
        r = subprocess.run(["node", "chat.mjs"], cwd=folder, capture_output=True, timeout=60,
                           env={"BASE_URL": base_url + "/v1", "BODY": json.dumps(chat), "PATH": "/usr/bin:/bin"})
        assert r.returncode == 0, r.stderr.decode()
        return json.loads(r.stdout)

    want = answers("http://%s:%d" % alone.http)
    assert want["whole"] == want["streamed"] and want["finish"] == "stop", want
    jsonschema.validate(json.loads(want["whole"]), schema)
    c = cluster(replicas=2)
    for _ in range(3):  # leastconn spreads the six requests over the replicas
        assert answers(c.url) == want
