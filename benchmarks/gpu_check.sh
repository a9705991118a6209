#!/usr/bin/env bash
# The throughput benchmark on a GPU in one command, for a machine that has torch and numpy but
# not the rest of cyclejepa's dependencies (Python 3.12, no network).
#
#   benchmarks/gpu_check.sh --fetch-wheels   here, with network: download the missing wheels
#                                            into .whl/ (ignored through .git/info/exclude)
#   benchmarks/gpu_check.sh                  there: install .whl/ into /tmp if needed, then run
#                                            every section and variant on CUDA, including the
#                                            bf16-vs-float32 equality of the first 20 steps
#
# Results go to $OUT (default runs/gpu_check): throughput.json, throughput.md, log.txt, device.txt.
# PREPARE_RECORDS (default 2000) sizes the synthetic prepare corpus; DEADLINE_S (default 420)
# skips what has not started by then, so that a 600 s limit still returns the JSON.
set -euo pipefail
cd "$(dirname "$0")/.."

WHEELS=.whl
REQUIREMENTS=(
    pydantic==2.14.3 pydantic-core==2.50.4 annotated-types==0.8.0 typing-inspection==0.4.5
    typing-extensions==4.16.0                            # the config schema
    wfdb==4.3.1 soundfile==0.14.0 cffi==2.1.1 pycparser==3.12   # the prepare section only
)

if [[ "${1:-}" == "--fetch-wheels" ]]; then
    grep -qxF "/$WHEELS/" .git/info/exclude 2>/dev/null || echo "/$WHEELS/" >> .git/info/exclude
    python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$WHEELS" \
        --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "${REQUIREMENTS[@]}"
    ls "$WHEELS"
    exit 0
fi

OUT=${OUT:-runs/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ! python3 -c "import pydantic, wfdb" 2>/dev/null && compgen -G "$WHEELS/*.whl" >/dev/null; then
    python3 -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/cyclejepa-site "$WHEELS"/*.whl
    export PYTHONPATH=/tmp/cyclejepa-site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

{ nvidia-smi; python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"; } \
    > "$OUT/device.txt" 2>&1 || true
python3 benchmarks/throughput.py --device cuda --out "$OUT/throughput.json" \
    --prepare-records "${PREPARE_RECORDS:-2000}" --deadline-s "${DEADLINE_S:-420}" "$@" 2>&1 | tee "$OUT/log.txt"
