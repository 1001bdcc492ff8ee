#!/usr/bin/env bash
# Prepare a fresh Debian machine (or refresh an existing checkout): system packages via
# apt-get, then a virtualenv in .venv with partita and its development tools.
# Safe to run again; it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
command -v python3 >/dev/null 2>&1 || missing+=(python3 python3-venv python3-dev)
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    missing+=(python3-venv)
fi
command -v gcc >/dev/null 2>&1 || missing+=(build-essential)
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v javac >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
# etcd holds a multi-broker cluster's metadata; tests start it as a real process.
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
# libfaketime steps one broker's wall clock in the clock-jump tests.
dpkg -s libfaketime >/dev/null 2>&1 || missing+=(libfaketime)
# the console's browser tests drive Debian's headless chromium through its driver.
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
java_major=$( (java -version 2>&1 || true) | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
if [ -z "${java_major}" ] || [ "${java_major}" -lt 17 ]; then missing+=(openjdk-17-jre-headless); fi

if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing system packages: ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]' 2>&1 | grep -v '^WARNING: Location' || true
.venv/bin/python -c 'import partita' || { echo "setup: partita did not install" >&2; exit 1; }
bash scripts/kafka_jars.sh || echo "setup: Apache Kafka's jars are missing (above); tests/kafka will fail" >&2
echo "setup: ready (.venv/bin/partita)"
