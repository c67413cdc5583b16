#!/usr/bin/env bash
# A lockstep cluster on this host (docs/SCALING.md): N replicas of `lockstep serve` behind
# HAProxy (deploy/haproxy.cfg), all on loopback, supervised until SIGINT/SIGTERM (Ctrl-C).
#
#   deploy/cluster.sh [--replicas N] [--model DIR] [--binary PATH] [--cpu-cores N]
#                     [--http HOST:PORT] [--frames HOST:PORT] [--dir DIR]
#                     [--restart-delay SECONDS] [--drain-seconds SECONDS] [-- SERVE_FLAGS...]
#
# Replicas are named r1..rN (`serve --name`); each serves `--http` and `--listen` on loopback
# ports chosen at its first start and kept across restarts, with `--cpu-cores` (default 1) and
# SERVE_FLAGS. HAProxy's HTTP and frame frontends take --http and --frames (default: free
# loopback ports). A replica or HAProxy that exits is started again on the same ports after
# --restart-delay (default 0.5 s), as a process supervisor would: SIGKILL or SIGTERM one to see
# the cluster survive it. SIGINT/SIGTERM to this script stops everything: replicas drain (at most
# --drain-seconds, default 10), HAProxy stops, and nothing is left running.
#
# Replicas take `--max-body 262144` unless SERVE_FLAGS gives one: deploy/haproxy.cfg's buffers
# (tune.bufsize) hold a body that large, so HAProxy can resend any request a replica accepts. Their
# frame protocol takes the call docs/SCALING.md and `./run demo` send, ids and a position,
# answering its logits (`--at --output logits`), unless SERVE_FLAGS gives --at or --output.
#
# --dir (default: a temporary folder, removed at the end) holds haproxy.cfg, each process's log
# (NAME.log), pid (NAME.pid, replaced at each start) and ports (NAME.ports: HTTP then frames),
# haproxy.sock (HAProxy's runtime API) and, once everything is up, cluster.env (HTTP_URL=,
# FRAMES=). The line "cluster: ready" on standard output says the same.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPLICAS=2 MODEL="$HERE/../examples/models/fortunes" BINARY=${LOCKSTEP_BINARY:-} CORES=1
HTTP_BIND= FRAMES_BIND= DIR= RESTART_DELAY=0.5 DRAIN=10
SERVE_FLAGS=()
MAX_BODY=262144  # what deploy/haproxy.cfg's tune.bufsize (278528) holds, headers aside
usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
need() { [ $# -ge 2 ] || { echo "cluster.sh: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
  case "$1" in
    --replicas) need "$@"; REPLICAS=$2; shift 2 ;;
    --model) need "$@"; MODEL=$2; shift 2 ;;
    --binary) need "$@"; BINARY=$2; shift 2 ;;
    --cpu-cores) need "$@"; CORES=$2; shift 2 ;;
    --http) need "$@"; HTTP_BIND=$2; shift 2 ;;
    --frames) need "$@"; FRAMES_BIND=$2; shift 2 ;;
    --dir) need "$@"; DIR=$2; shift 2 ;;
    --restart-delay) need "$@"; RESTART_DELAY=$2; shift 2 ;;
    --drain-seconds) need "$@"; DRAIN=$2; shift 2 ;;
    --) shift; SERVE_FLAGS=("$@"); break ;;
    -h|--help) usage ;;
    *) echo "cluster.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
[[ "$REPLICAS" =~ ^[1-9][0-9]?$ ]] || { echo "cluster.sh: --replicas must be 1..99, got '$REPLICAS'" >&2; exit 2; }
[ -n "$BINARY" ] || BINARY="$HERE/../build/src/lockstep"
[ -x "$BINARY" ] || { echo "cluster.sh: no lockstep binary at $BINARY (./run build, or --binary PATH)" >&2; exit 2; }
[ -d "$MODEL" ] || { echo "cluster.sh: --model $MODEL is not a folder" >&2; exit 2; }
command -v haproxy >/dev/null || { echo "cluster.sh: haproxy is not installed (apt-get install haproxy; ./run deps)" >&2; exit 2; }

OWN_DIR=
if [ -z "$DIR" ]; then DIR=$(mktemp -d "${TMPDIR:-/tmp}/lockstep-cluster.XXXXXX"); OWN_DIR=1; fi
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
rm -f "$DIR"/cluster.env

declare -A PID=()     # name -> pid of its running process
declare -A ARGS=()    # replica name -> its --http and --listen addresses once bound
declare -A FAILS=()   # name -> starts in a row that ended within 2 s
declare -A STARTED=() # name -> $SECONDS at its last start
STOPPING=0
SLEEPER=  # the restart delay's sleep, in the background so that a signal's trap runs at once

free_port() {  # a loopback port nothing listens on now (the kernel's choice)
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

stop_all() {
  STOPPING=1
  if [ -n "$SLEEPER" ]; then kill "$SLEEPER" 2>/dev/null || true; fi
  local name pids=()
  for name in "${!PID[@]}"; do pids+=("${PID[$name]}"); done
  [ ${#pids[@]} -gt 0 ] && kill -TERM "${pids[@]}" 2>/dev/null || true
  # Replicas finish their active generations (--drain-seconds); past that and 5 s more, SIGKILL.
  local deadline=$((SECONDS + ${DRAIN%.*} + 5)) left
  while :; do
    left=()
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && left+=("$p"); done
    [ ${#left[@]} -eq 0 ] && break
    if [ $SECONDS -ge $deadline ]; then kill -KILL "${left[@]}" 2>/dev/null || true; break; fi
    sleep 0.1
  done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  PID=()
  [ -n "$OWN_DIR" ] && rm -rf "$DIR"
  return 0
}
on_signal() { echo "cluster: stopping (replicas drain, at most ${DRAIN} s)"; stop_all; echo "cluster: stopped"; exit 0; }
trap on_signal INT TERM
trap 'status=$?; [ $STOPPING -eq 1 ] || { stop_all; }; exit $status' EXIT

# A pid, ports or env file is written under a temporary name and renamed, so a reader (the tests
# poll NAME.pid while a process restarts) sees the old contents or the new ones, never an empty
# file.
write_file() {  # path, contents
  printf '%s\n' "$2" >"$1.tmp" && mv -f "$1.tmp" "$1"
}

start_replica() {  # name; first start on free ports, later ones on the same ports
  local name=$1 http=127.0.0.1:0 frames=127.0.0.1:0
  if [ -n "${ARGS[$name]:-}" ]; then read -r http frames <<<"${ARGS[$name]}"; fi
  : >"$DIR/$name.log"
  local body=(--max-body "$MAX_BODY") call=(--at --output logits) flag
  for flag in "${SERVE_FLAGS[@]}"; do
    case "$flag" in
      --max-body|--max-body=*) body=() ;;
      --at|--output|--output=*) call=() ;;
    esac
  done
  "$BINARY" serve "$MODEL" --http "$http" --listen "$frames" --name "$name" --cpu-cores "$CORES" \
    --drain-seconds "$DRAIN" "${body[@]}" "${call[@]}" "${SERVE_FLAGS[@]}" >"$DIR/$name.log" 2>&1 &
  PID[$name]=$!
  STARTED[$name]=$SECONDS
  write_file "$DIR/$name.pid" "${PID[$name]}"
}

wait_replica() {  # name; waits for its start line, records its ports; 1 if it failed
  local name=$1 line= http frames
  for _ in $(seq 600); do
    # The start line (stderr, in the same log, first says the HTTP port answers 503 while loading).
    line=$(grep -m 1 '^serving ' "$DIR/$name.log" 2>/dev/null || true)
    case "$line" in serving*) break ;; esac
    kill -0 "${PID[$name]}" 2>/dev/null || break
    sleep 0.05
  done
  http=$(grep -o 'http://[0-9.]*:[0-9]*' <<<"$line" | head -n 1 | sed 's|http://||')
  frames=$(grep -o 'tcp:[0-9.]*:[0-9]*' <<<"$line" | head -n 1 | sed 's|tcp:||')
  if [ -z "$http" ] || [ -z "$frames" ]; then
    echo "cluster: replica $name did not start:" >&2; tail -n 20 "$DIR/$name.log" >&2; return 1
  fi
  ARGS[$name]="$http $frames"
  write_file "$DIR/$name.ports" "$http $frames"
}

start_haproxy() {
  haproxy -db -f "$DIR/haproxy.cfg" >"$DIR/haproxy.log" 2>&1 &
  PID[haproxy]=$!
  STARTED[haproxy]=$SECONDS
  write_file "$DIR/haproxy.pid" "${PID[haproxy]}"
}

# The replicas, all started at once, then their ports.
names=()
for i in $(seq "$REPLICAS"); do names+=("r$i"); start_replica "r$i"; done
for name in "${names[@]}"; do wait_replica "$name" || exit 1; done

[ -n "$HTTP_BIND" ] || HTTP_BIND=127.0.0.1:$(free_port)
if [ -z "$FRAMES_BIND" ]; then
  FRAMES_BIND=127.0.0.1:$(free_port)
  while [ "$FRAMES_BIND" = "$HTTP_BIND" ]; do FRAMES_BIND=127.0.0.1:$(free_port); done
fi
config=(--http "$HTTP_BIND" --frames "$FRAMES_BIND" --stats-socket "$DIR/haproxy.sock" -o "$DIR/haproxy.cfg")
for name in "${names[@]}"; do
  read -r http frames <<<"${ARGS[$name]}"
  config+=(--replica "$name=$http,$frames")
  echo "cluster: replica $name (pid ${PID[$name]}): http://$http and tcp:$frames"
done
/usr/bin/python3 "$HERE/haproxy_config.py" "${config[@]}"
haproxy -c -q -f "$DIR/haproxy.cfg" || { echo "cluster: haproxy refused $DIR/haproxy.cfg" >&2; exit 1; }
start_haproxy

# Ready once HAProxy answers /health through a replica.
ready=0
for _ in $(seq 200); do
  if /usr/bin/python3 - "$HTTP_BIND" <<'EOF' 2>/dev/null; then ready=1; break; fi
import http.client, sys
host, port = sys.argv[1].rsplit(":", 1)
c = http.client.HTTPConnection(host, int(port), timeout=2)
c.request("GET", "/health")
sys.exit(0 if c.getresponse().status == 200 else 1)
EOF
  kill -0 "${PID[haproxy]}" 2>/dev/null || break
  sleep 0.05
done
if [ $ready -ne 1 ]; then echo "cluster: HAProxy did not come up:" >&2; tail -n 20 "$DIR/haproxy.log" >&2; exit 1; fi
write_file "$DIR/cluster.env" "$(printf 'HTTP_URL=http://%s\nFRAMES=tcp:%s\nDIR=%s' "$HTTP_BIND" "$FRAMES_BIND" "$DIR")"
echo "cluster: HTTP   http://$HTTP_BIND  (curl http://$HTTP_BIND/v1/completions -d '{\"prompt\": \"The \", \"max_tokens\": 40, \"seed\": 1}')"
echo "cluster: frames tcp:$FRAMES_BIND  (python: lockstep.client.Resending(\"tcp:$FRAMES_BIND\"))"
echo "cluster: logs in $DIR"
echo "cluster: ready; Ctrl-C stops everything"

# Supervise: a process that exits is started again (same ports) after --restart-delay. Polled
# (10 times a second) rather than `wait -n`, which misses a child that bash has already reported.
EXIT_STATUS=
has_exited() {  # pid; true once it has exited, with its status in EXIT_STATUS (reaped)
  local pid=$1 state
  if kill -0 "$pid" 2>/dev/null; then
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
    [ "$state" = Z ] || return 1  # running
  fi
  EXIT_STATUS=0
  wait "$pid" 2>/dev/null || EXIT_STATUS=$?
}
pause() {  # seconds; a sleep that a signal's trap interrupts at once
  sleep "$1" &
  SLEEPER=$!
  wait "$SLEEPER" || true
  SLEEPER=
}
while :; do
  pause 0.1
  [ $STOPPING -eq 0 ] || break
  for name in "${!PID[@]}"; do
    has_exited "${PID[$name]}" || continue
    echo "cluster: $name (pid ${PID[$name]}) exited with status $EXIT_STATUS; starting it again in ${RESTART_DELAY} s"
    if [ $((SECONDS - ${STARTED[$name]})) -lt 2 ]; then FAILS[$name]=$((${FAILS[$name]:-0} + 1)); else FAILS[$name]=0; fi
    if [ "${FAILS[$name]}" -ge 5 ]; then
      echo "cluster: $name failed 5 times in a row within 2 s of starting; stopping (log: $DIR/$name.log)" >&2
      tail -n 20 "$DIR/$name.log" >&2
      exit 1
    fi
    unset "PID[$name]"
    pause "$RESTART_DELAY"
    [ $STOPPING -eq 0 ] || break 2
    if [ "$name" = haproxy ]; then
      start_haproxy
    else
      start_replica "$name"
      wait_replica "$name" || true  # failed: the next round sees it exit
      echo "cluster: $name started again (pid ${PID[$name]})"
    fi
  done
done
