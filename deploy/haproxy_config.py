#!/usr/bin/python3
"""Writes deploy/haproxy.cfg for other addresses and any number of replicas.

    deploy/haproxy_config.py --http 127.0.0.1:8080 --frames 127.0.0.1:7070 \\
        --replica r1=127.0.0.1:8081,127.0.0.1:7071 --replica r2=127.0.0.1:8082,127.0.0.1:7072 \\
        [--stats-socket PATH] [--template deploy/haproxy.cfg] [-o haproxy.cfg]

Each --replica is NAME=HTTP,FRAMES: the replica's `serve --http` and `serve --listen` addresses.
Only the bind lines of the two frontends and the server lines of the three backends change (and
a `stats socket` line is added to `global` with --stats-socket); every other line is the
template's, so docs/SCALING.md's explanation of deploy/haproxy.cfg holds for the output. The
output is written whole or not at all (a temporary file renamed over -o). Standard library only.
"""

import argparse
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# frontend -> the flag naming its bind address; backend -> which address of a replica it uses.
FRONTENDS = {"lockstep_http": "http", "lockstep_frames": "frames"}
BACKENDS = {"lockstep_http_replicas": "http", "lockstep_http_affinity": "http", "lockstep_frame_replicas": "frames"}
SECTIONS = ("global", "defaults", "frontend", "backend", "listen", "resolvers", "peers", "userlist")
ADDRESS = re.compile(r"^(\d{1,3}(\.\d{1,3}){3}|\[[0-9A-Fa-f:.]+\]|localhost):(\d{1,5})$")
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class Refusal(Exception):
    pass


def address(text, what):
    m = ADDRESS.match(text)
    if not m or not 0 < int(m.group(3)) < 65536:
        raise Refusal(f"{what}: '{text}' is not HOST:PORT (a numeric IPv4 address, [IPv6] or localhost, "
                      "port 1..65535)")
    return text


def replica(text):
    name, sep, rest = text.partition("=")
    addresses = rest.split(",")
    if not sep or not NAME.match(name) or len(addresses) != 2:
        raise Refusal(f"--replica '{text}': expected NAME=HTTP_HOST:PORT,FRAMES_HOST:PORT "
                      "(NAME of letters, digits, '_', '.', '-')")
    return name, {"http": address(addresses[0], f"--replica {name} (HTTP)"),
                  "frames": address(addresses[1], f"--replica {name} (frames)")}


def render(template, binds, replicas, stats_socket=None):
    """The template's lines with the frontends' binds, the backends' servers and the stats socket
    replaced; raises Refusal when the template lacks a section or line it needs."""
    out, section, seen = [], None, set()
    lines = template.splitlines()
    for i, line in enumerate(lines):
        words = line.split()
        if line[:1].strip() and words and words[0] in SECTIONS:
            section = (words[0], words[1] if len(words) > 1 else "")
            out.append(line)
            if section[0] == "global" and stats_socket:
                out.append(f"    stats socket {stats_socket} mode 600 level admin")
            continue
        if not section or not words:
            out.append(line)
            continue
        kind, name = section
        if kind == "global" and words[0] == "stats" and words[1:2] == ["socket"] and stats_socket:
            continue  # replaced by the line added above
        if kind == "frontend" and name in FRONTENDS and words[0] == "bind":
            flag = FRONTENDS[name]
            seen.add(("bind", name))
            out.append(f"    bind {binds[flag]}" if binds.get(flag) else line)
            continue
        if kind == "backend" and name in BACKENDS and words[0] == "server":
            if ("server", name) not in seen:
                seen.add(("server", name))
                use = BACKENDS[name]
                out.extend(f"    server {r} {a[use]}" for r, a in replicas)
            continue
        out.append(line)
    missing = [f"a bind line in frontend {n}" for n in FRONTENDS if ("bind", n) not in seen]
    missing += [f"server lines in backend {n}" for n in BACKENDS if ("server", n) not in seen]
    if missing:
        raise Refusal("the template lacks " + ", ".join(missing))
    return "\n".join(out) + "\n"


def write_whole(path, text):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".haproxy-", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--template", default=os.path.join(HERE, "haproxy.cfg"))
    ap.add_argument("--http", help="the HTTP frontend's HOST:PORT (default: the template's)")
    ap.add_argument("--frames", help="the frame protocol frontend's HOST:PORT (default: the template's)")
    ap.add_argument("--replica", action="append", default=[], help="NAME=HTTP_HOST:PORT,FRAMES_HOST:PORT; repeatable")
    ap.add_argument("--stats-socket", help="a Unix socket for HAProxy's runtime API (show stat, set server)")
    ap.add_argument("-o", "--output", help="the file to write (default: standard output)")
    a = ap.parse_args(argv)
    try:
        if not a.replica:
            raise Refusal("give at least one --replica NAME=HTTP_HOST:PORT,FRAMES_HOST:PORT")
        replicas = [replica(r) for r in a.replica]
        names = [n for n, _ in replicas]
        if len(set(names)) != len(names):
            raise Refusal(f"replica names repeat: {', '.join(names)}")
        binds = {"http": a.http and address(a.http, "--http"), "frames": a.frames and address(a.frames, "--frames")}
        try:
            with open(a.template) as f:
                template = f.read()
        except OSError as e:
            raise Refusal(f"--template {a.template}: {e.strerror}") from None
        text = render(template, binds, replicas, a.stats_socket)
    except Refusal as e:
        print(f"haproxy_config.py: {e}", file=sys.stderr)
        return 2
    if a.output:
        write_whole(a.output, text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
