#!/usr/bin/env bash
# Every GPU measurement of the library, one command each, for a machine that has torch and
# numpy but not the rest of cyclejepa's dependencies (Python 3.12, no network).
#
#   benchmarks/gpu_check.sh --fetch-wheels   here, with network: download the missing wheels into
#                                            .whl/ and copy the real PTB-XL archive into .data/
#                                            (both ignored through .git/info/exclude)
#   benchmarks/gpu_check.sh JOB ...          there: install .whl/ into /tmp if needed, then run
#                                            each JOB in turn:
#     tests       the training, evaluation, streaming and device tests on CUDA (about 2 min)
#     throughput  benchmarks/throughput.py on CUDA: every precision/compile variant of the product
#                 path (`cyclejepa train`'s Trainer), sections, bf16-vs-float32 equality (~6 min)
#     ptbxl-dev   examples/ptbxl_dev.yaml on the 434 real PTB-XL records: both arms side by side,
#                 5,000 steps, evaluation and report (the paper's development pattern)
#     benchmark-ptbxl  `cyclejepa benchmark ptbxl examples/ptbxl_dev.yaml` on the same records: the
#                 six statement tasks, linear / fine-tuned / from scratch (docs/benchmark-ptbxl.md)
#     experiment  examples/winder_ptbxl.yaml --unseal on a 21,799-record synthetic corpus, the wall
#                 time of every stage (benchmarks/experiment_time.py); EXPERIMENT_SETS adds --set
#
# From a session with the device tool, e.g.:
#   run(command="bash benchmarks/gpu_check.sh tests throughput", carry=[".whl"], timeout_s=600)
#   run(command="bash benchmarks/gpu_check.sh ptbxl-dev", carry=[".whl", ".data"], timeout_s=600)
#   run(command="bash benchmarks/gpu_check.sh experiment", carry=[".whl"], timeout_s=600)
# Results go to $OUT (default runs/gpu_check; the device tool brings back 8 files): device.txt, and
# per job its log and results (an experiment as NAME.tar.gz and NAME-report.md).
set -euo pipefail
cd "$(dirname "$0")/.."

WHEELS=.whl
DATA=.data
ARCHIVE=../shared/data/ptbxl-dev/ptbxl-dev-434.tar.xz
REQUIREMENTS=(
    pydantic==2.14.3 pydantic-core==2.50.4 annotated-types==0.8.0 typing-inspection==0.4.5
    typing-extensions==4.16.0                            # the config schema
    wfdb==4.3.1 soundfile==0.14.0 cffi==2.1.1 pycparser==3.12   # reading WFDB records
)

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
if ! python3 -c "import pydantic, wfdb" 2>/dev/null && compgen -G "$WHEELS/*.whl" >/dev/null; then
    python3 -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/cyclejepa-site "$WHEELS"/*.whl
    export PYTHONPATH=/tmp/cyclejepa-site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{ nvidia-smi; python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"; } \
    > "$OUT/device.txt" 2>&1 || true
NO_UMAP="evaluation.umap=false"   # umap-learn is not on the GPU image

# A finished experiment folder as $OUT/NAME.tar.gz (report with figures, evaluation JSONs, every
# run's metrics.jsonl and train.log), its report.md also as $OUT/NAME-report.md.
collect() {
    tar -czf "$OUT/$2.tar.gz" --exclude="*.npz" -C "$1" report evaluation $(cd "$1" && ls runs/*/metrics.jsonl runs/*/train.log 2>/dev/null) || true
    cp "$1/report/report.md" "$OUT/$2-report.md" 2>/dev/null || true
}

for job in "${@:-throughput}"; do
    case "$job" in
        tests)
            python3 -m pytest -q -p no:cacheprovider tests/test_training.py tests/test_devices.py \
                tests/test_streaming.py tests/test_eval_mechanism.py tests/test_eval_probe.py \
                tests/test_augment.py tests/test_objectives.py 2>&1 | tee "$OUT/tests.log"
            ;;
        throughput)
            python3 benchmarks/throughput.py --device cuda --out "$OUT/throughput.json" \
                --prepare-records "${PREPARE_RECORDS:-2000}" --deadline-s "${DEADLINE_S:-420}" 2>&1 \
                | tee "$OUT/throughput.log"
            ;;
        ptbxl-dev)
            root=runs/ptbxl_dev/data
            [[ -f $root/ptbxl-dev/ptbxl_database.csv ]] || { mkdir -p $root && tar -xJf "$DATA/$(basename "$ARCHIVE")" -C $root; }
            python3 -m cyclejepa run examples/ptbxl_dev.yaml --set "$NO_UMAP" --set data.workers=16 2>&1 \
                | tee "$OUT/ptbxl-dev.log"
            collect runs/ptbxl_dev ptbxl-dev
            ;;
        benchmark-ptbxl)
            root=runs/ptbxl_dev/data
            [[ -f $root/ptbxl-dev/ptbxl_database.csv ]] || { mkdir -p $root && tar -xJf "$DATA/$(basename "$ARCHIVE")" -C $root; }
            python3 -m cyclejepa benchmark ptbxl examples/ptbxl_dev.yaml --set data.workers=16 2>&1 \
                | tee "$OUT/benchmark-ptbxl.log"
            cp runs/ptbxl_dev/benchmark/ptbxl/benchmark.md runs/ptbxl_dev/benchmark/ptbxl/benchmark.json "$OUT/" || true
            ;;
        experiment)
            sets=(--set "$NO_UMAP" --set data.workers=16)
            for item in ${EXPERIMENT_SETS:-}; do sets+=(--set "$item"); done
            python3 benchmarks/experiment_time.py --config examples/winder_ptbxl.yaml --unseal --workers 16 \
                --out runs/experiment_time "${sets[@]}" 2>&1 | tee "$OUT/experiment.log"
            cp runs/experiment_time/stages.json runs/experiment_time/stages.md "$OUT/"
            collect runs/experiment_time/run experiment
            ;;
        *)
            echo "unknown job $job: tests, throughput, ptbxl-dev, benchmark-ptbxl or experiment" >&2
            exit 2
            ;;
    esac
done
