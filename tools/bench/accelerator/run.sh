#!/usr/bin/env bash
# The accelerator bench in one call of at most 8 minutes: rlx engine vs HF generate, decode's
# share of the HBM roofline, the train step's MFU (bf16). rlx comes from this source tree.
#
#   bash tools/bench/accelerator/run.sh [--small] [bench.py flags]
#
# Python: $RLX_PYTHON, else python3 if it imports jax, else the uv workspace's .venv. Results:
# the table on stdout, and $OUT/accelerator.json when OUT is set. RLX_BENCH_TIMEOUT (s, default
# 460) bounds the whole run: at that point the bench is interrupted, prints what it measured and
# marks the rest "skipped: time"; bench.py's own guard (--budget-s, 420) skips items before that.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"

if [[ -n "${RLX_PYTHON:-}" ]]; then
    python="$RLX_PYTHON"
elif command -v python3 >/dev/null && python3 -c "import jax" 2>/dev/null; then
    python="python3"
elif [[ -x "$root/.venv/bin/python" ]]; then
    python="$root/.venv/bin/python"
else
    echo "no python with jax: set RLX_PYTHON" >&2
    exit 2
fi

src=""
for dir in "$root"/packages/*/src "$root/cli/src"; do
    if [[ -d "$dir" ]]; then
        src="${src:+$src:}$dir"
    fi
done
export PYTHONPATH="$src${PYTHONPATH:+:$PYTHONPATH}"
# JAX takes GPU memory as it needs it instead of 75% up front: HF runs beside it on the same GPU
export XLA_PYTHON_CLIENT_PREALLOCATE="${XLA_PYTHON_CLIENT_PREALLOCATE:-false}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-1}"
RLX_BENCH_T0="$(date +%s.%N)"
export RLX_BENCH_T0

echo "python: $python ($("$python" --version 2>&1)); PYTHONPATH from $root" >&2
"$python" - <<'EOF' >&2 || true
import importlib.util
need = ["jax", "numpy", "ml_dtypes", "grpc", "google.protobuf", "google_crc32c", "tomli_w",
        "optax", "orbax.checkpoint", "torch", "transformers"]
def have(name):
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False
missing = [n for n in need if not have(n)]
print("modules missing in this python: " + (", ".join(missing) if missing else "none"))
EOF

# SIGINT first (the bench reports what it has), SIGKILL 15 s later; the HF process is in the
# same process group and stops with it.
timeout --preserve-status -s INT -k 15 "${RLX_BENCH_TIMEOUT:-460}" "$python" "$here/bench.py" "$@"
