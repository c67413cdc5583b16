"""deploy/haproxy.cfg and deploy/haproxy_config.py: the shipped file is valid for haproxy, keeps
the settings docs/SCALING.md explains, and the generator changes only the bind and server lines
(and refuses bad input by name); deploy/cluster.sh refuses bad arguments."""
import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CLUSTER = os.path.join(REPO, "deploy", "cluster.sh")
TEMPLATE = os.path.join(REPO, "deploy", "haproxy.cfg")
GENERATE = os.path.join(REPO, "deploy", "haproxy_config.py")


def haproxy_check(path):
    return subprocess.run(["haproxy", "-c", "-q", "-f", str(path)], capture_output=True, text=True)


def generate(*args, **kw):
    return subprocess.run(["/usr/bin/python3", GENERATE, *args], capture_output=True, text=True, **kw)


def sections(text):
    """{section header: [its lines, stripped, without comments and blanks]}."""
    out, current = {}, None
    for line in text.splitlines():
        if not line.strip() or line.strip().startswith("#"):
            continue
        if not line[0].isspace():
            current = line.strip()
            out[current] = []
        else:
            out[current].append(line.strip())
    return out


def test_the_shipped_file_is_valid_and_keeps_what_the_docs_explain():
    r = haproxy_check(TEMPLATE)
    assert r.returncode == 0, r.stdout + r.stderr
    s = sections(open(TEMPLATE).read())
    for backend in ("backend lockstep_http_replicas", "backend lockstep_http_affinity"):
        for line in ("mode http", "option httpchk GET /health", "http-check expect status 200",
                     "option http-buffer-request", "retry-on conn-failure empty-response response-timeout 503",
                     "option redispatch 1", "default-server check inter 500ms fall 2 rise 2"):
            assert line in s[backend], (backend, line)
    assert "balance leastconn" in s["backend lockstep_http_replicas"]
    assert {"balance hdr(X-Lockstep-Affinity)", "hash-type consistent"} <= set(s["backend lockstep_http_affinity"])
    assert ("use_backend lockstep_http_affinity if { req.hdr(X-Lockstep-Affinity) -m found }"
            in s["frontend lockstep_http"])
    assert {"mode tcp", "balance leastconn", "option tcp-check"} <= set(s["backend lockstep_frame_replicas"])
    # A whole request up to cluster.sh's --max-body and 16 KiB of headers fits in one buffer, so
    # HAProxy can resend it (docs/SCALING.md, "Request bodies and HAProxy's buffers").
    bufsize = int(next(line.split()[1] for line in s["global"] if line.startswith("tune.bufsize ")))
    max_body = int(next(l.split("=")[1] for l in open(CLUSTER).read().splitlines() if l.startswith("MAX_BODY=")).split()[0])
    assert bufsize >= max_body + 16384, (bufsize, max_body)


def test_the_generator_changes_only_binds_and_servers(tmp_path):
    out = tmp_path / "haproxy.cfg"
    r = generate("--http", "127.0.0.1:9000", "--frames", "[::1]:9001", "--stats-socket", str(tmp_path / "s.sock"),
                 "--replica", "a=127.0.0.1:1001,127.0.0.1:2001", "--replica", "b=127.0.0.1:1002,127.0.0.1:2002",
                 "--replica", "c=localhost:1003,localhost:2003", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert haproxy_check(out).returncode == 0, haproxy_check(out).stderr
    assert [p.name for p in tmp_path.iterdir()] == ["haproxy.cfg"]  # written whole, nothing else left
    got, want = sections(out.read_text()), sections(open(TEMPLATE).read())
    assert list(got) == list(want)
    http_servers = ["server a 127.0.0.1:1001", "server b 127.0.0.1:1002", "server c localhost:1003"]
    for name, lines in got.items():
        kept = [x for x in want[name] if not x.startswith(("server ", "bind ", "stats socket"))]
        assert [x for x in lines if not x.startswith(("server ", "bind ", "stats socket"))] == kept, name
        servers = [x for x in lines if x.startswith("server ")]
        if name in ("backend lockstep_http_replicas", "backend lockstep_http_affinity"):
            assert servers == http_servers
        elif name == "backend lockstep_frame_replicas":
            assert servers == ["server a 127.0.0.1:2001", "server b 127.0.0.1:2002", "server c localhost:2003"]
        else:
            assert servers == []
    assert "bind 127.0.0.1:9000" in got["frontend lockstep_http"]
    assert "bind [::1]:9001" in got["frontend lockstep_frames"]
    assert f"stats socket {tmp_path / 's.sock'} mode 600 level admin" in got["global"]


@pytest.mark.parametrize("args,message", [
    ([], "at least one --replica"),
    (["--replica", "a=127.0.0.1:1"], "NAME=HTTP_HOST:PORT,FRAMES_HOST:PORT"),
    (["--replica", "a b=127.0.0.1:1,127.0.0.1:2"], "NAME=HTTP_HOST:PORT"),
    (["--replica", "a=example.com:1,127.0.0.1:2"], "--replica a (HTTP): 'example.com:1' is not HOST:PORT"),
    (["--replica", "a=127.0.0.1:1,127.0.0.1:0"], "--replica a (frames): '127.0.0.1:0'"),
    (["--replica", "a=127.0.0.1:1,127.0.0.1:2", "--replica", "a=127.0.0.1:3,127.0.0.1:4"], "replica names repeat"),
    (["--http", "127.0.0.1", "--replica", "a=127.0.0.1:1,127.0.0.1:2"], "--http: '127.0.0.1' is not HOST:PORT"),
    (["--template", "/nonexistent", "--replica", "a=127.0.0.1:1,127.0.0.1:2"], "--template /nonexistent"),
])
def test_the_generator_refuses_bad_input_by_name(args, message, tmp_path):
    out = tmp_path / "never.cfg"
    r = generate(*args, "-o", str(out))
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not out.exists()


def test_the_generator_refuses_a_template_without_the_sections_it_rewrites(tmp_path):
    template = tmp_path / "t.cfg"
    template.write_text("global\n    maxconn 10\n")
    r = generate("--template", str(template), "--replica", "a=127.0.0.1:1,127.0.0.1:2")
    assert r.returncode == 2
    assert "lacks a bind line in frontend lockstep_http" in r.stderr
    assert "server lines in backend lockstep_frame_replicas" in r.stderr


@pytest.mark.parametrize("args,message", [
    (["--replicas", "0"], "--replicas must be 1..99"),
    (["--model", "/nonexistent"], "--model /nonexistent is not a folder"),
    (["--binary", "/nonexistent"], "no lockstep binary at /nonexistent"),
    (["--bogus"], "unknown argument '--bogus'"),
])
def test_cluster_sh_refuses_bad_arguments(args, message):
    r = subprocess.run([CLUSTER, *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and message in r.stderr, r.stderr
