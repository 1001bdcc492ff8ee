#!/usr/bin/env bash
# The README's first command: set everything up, then run partita's main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/partita pipeline "$@"
