#!/usr/bin/env bash
# Create the Tunix peer bench's virtual environment (never rlx's): Python 3.11 and the pinned
# requirements.txt beside this script. The venv goes to $1, else $RLX_TUNIX_VENV, else
# ~/.cache/rlx-peers/tunix.
#
#   bash tools/bench/peers/tunix/setup.sh [VENV_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${1:-${RLX_TUNIX_VENV:-$HOME/.cache/rlx-peers/tunix}}"
uv venv --python 3.11 "$venv"
VIRTUAL_ENV="$venv" uv pip install --python "$venv/bin/python" -r "$here/requirements.txt"
"$venv/bin/python" -c "import tunix.rl.grpo.grpo_learner, jax; print('tunix venv ready:', jax.__version__)"
