#!/usr/bin/env bash
# The long chaos run (issue 20): a 3-broker partita cluster on etcd, each member in a
# network namespace of its own, under every fault kind in turn for N minutes while three
# idempotent acks=all producers and two consumers record everything (and two transactional
# clients with a read_committed consumer, on a topic of their own); then healing, the
# checker, and what a person reads, under var/chaos/<seed>-<time>/:
#   history.jsonl  faults.txt  report.txt  figures.md  summary.json  chaos.png  cluster/*.log
# Needs root (network namespaces, a tmpfs) and .venv (scripts/setup.sh).
#
#   scripts/chaos.sh --minutes 10 --seed 7 [--kinds kill,pause,...] [--rate 120] [--txn-clients 2]
#   scripts/chaos.sh --hosts ...   # a broker and an etcd member (of three) on each host
#   scripts/chaos.sh --phases none:60,kill:60,pause:60   # one kind at a time (benchmarks)
# Exit status 0: no violation; 1: violations (report.txt shows each, shrunk).
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=5
seed=1
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --minutes) minutes="$2"; shift 2 ;;
        --seed) seed="$2"; shift 2 ;;
        --kinds|--rate|--phases|--out|--txn-clients) extra+=("$1" "$2"); shift 2 ;;
        --keep-data|--hosts) extra+=("$1"); shift ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "chaos.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
    esac
done
if [ "$(id -u)" -ne 0 ]; then
    echo "chaos.sh: needs root (network namespaces, tmpfs)" >&2
    exit 2
fi
command -v ip >/dev/null || { echo "chaos.sh: needs iproute2's ip" >&2; exit 2; }
.venv/bin/python -c 'import matplotlib' 2>/dev/null \
    || .venv/bin/python -m pip install -q --disable-pip-version-check 'matplotlib>=3.8'

out="var/chaos/${seed}-$(date +%Y%m%d-%H%M%S)"
case " ${extra[*]-} " in *" --out "*) out="" ;; esac
mkdir -p var/chaos
args=(--minutes "$minutes" --seed "$seed")
if [ -n "$out" ]; then args+=(--out "$out"); fi
echo "chaos: ${minutes} min, seed ${seed}, writing ${out:-the given --out}"
status=0
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" .venv/bin/python -m tests.chaos.runner \
    "${args[@]}" "${extra[@]}" 2> >(grep -v '^%[0-9]|' >&2) || status=$?
exit "$status"
