#!/usr/bin/env bash
# Every GPU figure of the library in three commands of at most 10 minutes each, for a GPU machine
# without network whose Python has the scientific stack (IMAGE_MODULES below) but not the rest of
# cyclejepa's dependencies (Python 3.12).
#
#   benchmarks/gpu_check.sh --fetch-wheels   here, with network: download the missing wheels into
#                                            .whl/ and copy the real PTB-XL archive into .data/
#                                            (both ignored through .git/info/exclude)
#   benchmarks/gpu_check.sh JOB ...          there, with .whl/ and .data/ copied along: install
#                                            .whl/ into /tmp if needed, check every module the
#                                            jobs import, then run each JOB in turn:
#     tests       the training, device, streaming, evaluation, augmentation and objective tests
#                 on CUDA (training.device: auto picks the GPU)
#     throughput  benchmarks/throughput.py on CUDA: every precision/compile variant of the product
#                 path (`cyclejepa train`'s Trainer), CUDA graphs first (the ≥ 300 steps/s
#                 target), sections, host syncs, bf16-vs-float32 equality; before the variants,
#                 the stacked ensemble of 1, 2 and 4 runs against the same runs in turn
#     prepare     benchmarks/throughput.py's prepare section: `prepare_cache` with 1, 2, 4, 8 and
#                 16 workers on 2,000 synthetic records and on the 434 real ones (scaling to 16 cores)
#     ptbxl-dev   examples/ptbxl_dev.yaml on the 434 real PTB-XL records: both arms side by side,
#                 5,000 steps, evaluation and report (the paper's development pattern)
#     benchmark-ptbxl  `cyclejepa benchmark ptbxl examples/ptbxl_dev.yaml` on the same records: the
#                 six statement tasks, linear / fine-tuned / from scratch, the cells that train a
#                 network BENCHMARK_AT_ONCE (8) at once in worker processes, two cores each
#                 (docs/benchmark-ptbxl.md); a rerun keeps the finished cells, and the finished cells
#                 come back as benchmark-cells.tar.gz also when the job stops at its limit
#     experiment  examples/winder_ptbxl.yaml --unseal on a 21,799-record synthetic corpus, the wall
#                 time of every stage (benchmarks/experiment_time.py; its prepare stage is the
#                 PTB-XL-size prepare on 16 workers); EXPERIMENT_SETS adds --set overrides
#
# The three commands, each within 10 minutes (every job stops at its own limit, *_S below, and
# its results are still collected):
#   benchmarks/gpu_check.sh tests throughput
#   benchmarks/gpu_check.sh prepare ptbxl-dev
#   benchmarks/gpu_check.sh experiment
# and, for the PTB-XL benchmark's figures (docs/benchmark-ptbxl.md), a fourth:
#   benchmarks/gpu_check.sh benchmark-ptbxl
# Results go to $OUT (default runs/gpu_check), at most seven files per command: device.txt, and per
# job its log and results (an experiment as NAME.tar.gz and NAME-report.md).
set -euo pipefail
cd "$(dirname "$0")/.."

WHEELS=.whl
DATA=.data
ARCHIVE=${PTBXL_DEV_ARCHIVE:-../shared/data/ptbxl-dev/ptbxl-dev-434.tar.xz}
REQUIREMENTS=(
    pydantic==2.14.3 pydantic-core==2.50.4 annotated-types==0.8.0 typing-inspection==0.4.5
    typing-extensions==4.16.0                            # the config schema
    wfdb==4.3.1 soundfile==0.14.0 cffi==2.1.1 pycparser==3.12   # reading WFDB records
    geoopt==0.5.1                                        # the stiefel basis's Riemannian Adam
)
# What the jobs import beyond the standard library (tests/test_gpu_check.py derives it from the
# imports of the tests, benchmarks and the library, and keeps these lists complete):
IMAGE_MODULES=(torch numpy scipy sklearn pandas matplotlib yaml typer rich requests aiohttp fsspec threadpoolctl triton pytest xdist)
WHEEL_MODULES=(pydantic pydantic_core wfdb geoopt)       # from REQUIREMENTS
# imported only on paths the jobs do not take: umap (evaluation.umap=false below), neurokit2
# (its R-peak detectors; the configs use ecg-rpeak), pyarrow (`cyclejepa embed --format parquet`),
# safetensors, onnx and onnxruntime (`cyclejepa export`), tensorboard (training.tensorboard: true),
# litdata (a training set above training.memory_budget_gb; the jobs' sets fit in memory)
UNUSED_MODULES=(umap neurokit2 pyarrow safetensors onnx onnxruntime tensorboard litdata)

if [[ "${1:-}" == "--fetch-wheels" ]]; then
    exclude=$(git rev-parse --git-path info/exclude)
    mkdir -p "$(dirname "$exclude")"
    for folder in "$WHEELS" "$DATA"; do
        grep -qxF "/$folder/" "$exclude" 2>/dev/null || echo "/$folder/" >> "$exclude"
    done
    python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$WHEELS" \
        --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "${REQUIREMENTS[@]}"
    mkdir -p "$DATA" && cp "$ARCHIVE" "$DATA/"
    ls "$WHEELS" "$DATA"
    exit 0
fi

OUT=${OUT:-runs/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ! python3 -c "import pydantic, wfdb, geoopt" 2>/dev/null && compgen -G "$WHEELS/*.whl" >/dev/null; then
    python3 -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/cyclejepa-site "$WHEELS"/*.whl
    export PYTHONPATH=/tmp/cyclejepa-site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
missing=$(python3 -c 'import importlib.util as u, sys; print(*[m for m in sys.argv[1:] if u.find_spec(m) is None])' \
    "${IMAGE_MODULES[@]}" "${WHEEL_MODULES[@]}")
if [[ -n "$missing" ]]; then
    echo "gpu_check.sh: missing Python modules: $missing (WHEEL_MODULES come from $WHEELS/: run --fetch-wheels" \
        "where there is network; IMAGE_MODULES must be on the machine)" >&2
    exit 3
fi
{ nvidia-smi; python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"; } \
    > "$OUT/device.txt" 2>&1 || true
NO_UMAP="evaluation.umap=false"   # umap-learn is not on the GPU machine

# Run a job's command for at most $1 seconds (then SIGINT; SIGKILL 20 s later). Its status is
# printed, not fatal, so that what the job wrote until then is still collected.
limited() {
    local seconds=$1
    shift
    timeout --signal=INT --kill-after=20 "$seconds" "$@" || echo "[gpu_check] $1 ... ended with status $? (124: stopped after $seconds s)"
}

# A finished experiment folder as $OUT/NAME.tar.gz (report with figures, evaluation JSONs, every
# run's metrics.jsonl and train.log), its report.md also as $OUT/NAME-report.md.
collect() {
    tar -czf "$OUT/$2.tar.gz" --exclude="*.npz" -C "$1" report evaluation $(cd "$1" && ls runs/*/metrics.jsonl runs/*/train.log 2>/dev/null) || true
    cp "$1/report/report.md" "$OUT/$2-report.md" 2>/dev/null || true
}

for job in "${@:-throughput}"; do
    case "$job" in
        tests)
            limited "${TESTS_S:-180}" python3 -m pytest -q -p no:cacheprovider -n "${TEST_WORKERS:-4}" \
                tests/test_training.py tests/test_devices.py tests/test_streaming.py tests/test_eval_mechanism.py \
                tests/test_eval_probe.py tests/test_augment.py tests/test_objectives.py 2>&1 | tee "$OUT/tests.log"
            ;;
        throughput)
            limited "${THROUGHPUT_S:-360}" python3 benchmarks/throughput.py --device cuda --out "$OUT/throughput.json" \
                --sections transport,sigreg,inference,ensemble,training,equality --deadline-s "${DEADLINE_S:-240}" \
                --variants bf16-compile-cudagraphs,bf16,float32,bf16-compile,bf16-compile-max-autotune 2>&1 \
                | tee "$OUT/throughput.log"
            ;;
        prepare)
            [[ -f runs/ptbxl-dev/ptbxl-dev/ptbxl_database.csv ]] || { mkdir -p runs/ptbxl-dev && tar -xJf "$DATA/$(basename "$ARCHIVE")" -C runs/ptbxl-dev; }
            limited "${PREPARE_S:-150}" python3 benchmarks/throughput.py --device cuda --out "$OUT/prepare.json" \
                --sections prepare --prepare-records "${PREPARE_RECORDS:-2000}" 2>&1 | tee "$OUT/prepare.log"
            ;;
        ptbxl-dev)
            root=runs/ptbxl_dev/data
            [[ -f $root/ptbxl-dev/ptbxl_database.csv ]] || { mkdir -p $root && tar -xJf "$DATA/$(basename "$ARCHIVE")" -C $root; }
            limited "${PTBXL_DEV_S:-420}" python3 -m cyclejepa run examples/ptbxl_dev.yaml --set "$NO_UMAP" \
                --set data.workers=16 2>&1 | tee "$OUT/ptbxl-dev.log"
            collect runs/ptbxl_dev ptbxl-dev
            ;;
        benchmark-ptbxl)
            root=runs/ptbxl_dev/data
            [[ -f $root/ptbxl-dev/ptbxl_database.csv ]] || { mkdir -p $root && tar -xJf "$DATA/$(basename "$ARCHIVE")" -C $root; }
            limited "${BENCHMARK_PTBXL_S:-540}" python3 -m cyclejepa benchmark ptbxl examples/ptbxl_dev.yaml \
                --set data.workers=16 --at-once "${BENCHMARK_AT_ONCE:-8}" 2>&1 | tee "$OUT/benchmark-ptbxl.log"
            cp runs/ptbxl_dev/benchmark/ptbxl/benchmark.md runs/ptbxl_dev/benchmark/ptbxl/benchmark.json "$OUT/" || true
            # the finished cells, also of a job stopped at its limit (a rerun with them in place keeps them)
            tar -czf "$OUT/benchmark-cells.tar.gz" -C runs/ptbxl_dev/benchmark/ptbxl cells 2>/dev/null || true
            ;;
        experiment)
            sets=(--set "$NO_UMAP" --set data.workers=16)
            for item in ${EXPERIMENT_SETS:-}; do sets+=(--set "$item"); done
            limited "${EXPERIMENT_S:-560}" python3 benchmarks/experiment_time.py --config examples/winder_ptbxl.yaml \
                --unseal --workers 16 --out runs/experiment_time "${sets[@]}" 2>&1 | tee "$OUT/experiment.log"
            cp runs/experiment_time/stages.json runs/experiment_time/stages.md "$OUT/" 2>/dev/null || true
            collect runs/experiment_time/run experiment
            ;;
        *)
            echo "unknown job $job: tests, throughput, prepare, ptbxl-dev, benchmark-ptbxl or experiment" >&2
            exit 2
            ;;
    esac
done
