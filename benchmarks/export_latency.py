"""CPU speed of the deployed encoder in eager PyTorch, TorchScript and ONNX Runtime (paper model),
or of the ONNX graphs of a given package.

    python benchmarks/export_latency.py [--threads 1] [--stream-batch 1 32] [--steps 1000]
                                        [--offline-batch 1 32] [--repeats 20] [--out export.json]
    python benchmarks/export_latency.py --package DIR [...]

Streaming rows time one chunk (B, 12, 8) → z_t with the state carried between calls:
`StreamingEncoder.step` (eager), the traced step (TorchScript, read back with
``torch.jit.load``) and the ONNX step graph (onnxruntime, CPU provider, the state as numpy
arrays fed back each call); ``steps`` timed calls after 100 untimed ones, each timed on its own.
Offline rows time whole 10 s windows (B, 12, 1000) → z (B, 125, 256) (``repeats`` calls after 3
untimed) and give records per second = B / median. The graphs are written by
`cyclejepa.export.export_torchscript` / `export_onnx` from the same randomly initialised model.
With ``--package`` the package's own ``encoder_streaming.onnx`` and ``encoder.onnx`` are timed
(its channels, patch and window from ``config.json``) at each onnxruntime graph optimisation
level, with the state fed back as numpy arrays (``run``) and, for streaming, through an
I/O binding of preallocated buffers swapped each call (``iobinding``); each streaming row also
gives the largest difference of its tokens, one window streamed, from the offline graph's.
Two last rows, batch 1: the step graph dynamically quantised to int8 weights (onnxruntime
``quantize_dynamic``; its tokens against the float32 offline graph's), and the floor of one
step: only its matrix-vector products (one MatMul per weight matrix of the package's encoder
and projector, a convolution's taps flattened), in one onnxruntime graph.
Prints a Markdown table; ``--out`` writes the rows, the machine and the versions as JSON.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from cyclejepa.bench.report import markdown_rows
from cyclejepa.bench.timing import machine_info, summarise, time_calls, versions
from cyclejepa.export import export_onnx, export_torchscript
from cyclejepa.jsonio import write_json
from cyclejepa.models import StreamingEncoder, build_model

TOKEN_PERIOD_MS = 80.0
WINDOW = 1000  # 10 s at 100 Hz
BACKENDS = ("eager", "torchscript", "onnxruntime")


LEVELS = {
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
"""onnxruntime graph optimisation levels timed with ``--package`` (``all`` is onnxruntime's default)."""


def session(path: Path, threads: int, level: str = "all") -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.graph_optimization_level = LEVELS[level]
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def streaming_step(backend: str, model, folder: Path, batch: int, threads: int) -> Callable[[], object]:
    """A call that encodes the next chunk of a stream of ``batch`` records on ``backend``."""
    chunk = torch.randn(batch, 12, 8, generator=torch.Generator().manual_seed(0))
    if backend == "eager":
        streamer = StreamingEncoder(model)
        streamer.reset(batch)
        return lambda: streamer.step(chunk)
    if backend == "torchscript":
        step = torch.jit.load(str(folder / "stream.pt"))
        state = StreamingEncoder(model).initial_state(batch)

        def scripted():
            nonlocal state
            with torch.inference_mode():
                _, *state = step(chunk, *state)

        return scripted
    graph = session(folder / "stream.onnx", threads)
    names = [i.name for i in graph.get_inputs()][1:]
    feed = {
        "chunk": chunk.numpy(),
        **{n: s.numpy() for n, s in zip(names, StreamingEncoder(model).initial_state(batch), strict=True)},
    }

    def onnx():
        _, *after = graph.run(None, feed)
        feed.update(zip(names, after, strict=True))

    return onnx


def offline_call(backend: str, model, folder: Path, batch: int, threads: int) -> Callable[[], object]:
    """A call that encodes ``batch`` whole windows on ``backend``."""
    x = torch.randn(batch, 12, WINDOW, generator=torch.Generator().manual_seed(1))
    if backend in ("eager", "torchscript"):
        module = model if backend == "eager" else torch.jit.load(str(folder / "encoder.pt"))

        def run():
            with torch.inference_mode():
                return module(x)

        return run
    graph, feed = session(folder / "encoder.onnx", threads), {"x": x.numpy()}
    return lambda: graph.run(None, feed)


def measure(threads: int, stream_batches: Sequence[int], steps: int, offline_batches: Sequence[int], repeats: int) -> list[dict]:
    torch.set_num_threads(threads)
    model = build_model("winder", seed=0).eval()
    rows = []
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        export_torchscript(model, folder / "stream.pt")
        export_torchscript(model, folder / "encoder.pt", samples=WINDOW)
        export_onnx(model, folder / "stream.onnx")
        export_onnx(model, folder / "encoder.onnx", samples=WINDOW)
        for batch in stream_batches:
            for backend in BACKENDS:
                stats = summarise(time_calls(streaming_step(backend, model, folder, batch, threads), warmup=100, repeats=steps))
                rows.append({"mode": "streaming", "backend": backend, "threads": threads, "batch": batch, **stats,
                             "realtime_factor": TOKEN_PERIOD_MS / stats["median_ms"]})  # fmt: skip
        for batch in offline_batches:
            for backend in BACKENDS:
                stats = summarise(time_calls(offline_call(backend, model, folder, batch, threads), warmup=3, repeats=repeats))
                rows.append({"mode": "offline", "backend": backend, "threads": threads, "batch": batch, **stats,
                             "records_per_s": 1e3 * batch / stats["median_ms"]})  # fmt: skip
    return rows


def zero_state(graph: ort.InferenceSession, batch: int) -> dict[str, np.ndarray]:
    return {i.name: np.zeros((batch, *i.shape[1:]), np.float32) for i in graph.get_inputs() if i.name != "chunk"}


def package_step(graph: ort.InferenceSession, chunk: np.ndarray, binding: bool) -> Callable[[], object]:
    """A call that encodes the next chunk through the package's step graph: state fed back as
    numpy arrays, or through an I/O binding of two preallocated state buffers swapped each call."""
    feed = {"chunk": chunk, **zero_state(graph, len(chunk))}
    names = list(feed)[1:]
    if not binding:

        def run():
            _, *after = graph.run(None, feed)
            feed.update(zip(names, after, strict=True))

        return run
    io = graph.io_binding()
    value = ort.OrtValue.ortvalue_from_numpy
    buffers = [[value(feed[n]) for n in names], [value(np.zeros_like(feed[n])) for n in names]]
    z = value(np.zeros((len(chunk), graph.get_outputs()[0].shape[-1]), np.float32))
    io.bind_ortvalue_input("chunk", value(chunk))
    io.bind_ortvalue_output("z", z)
    turn = [0]

    def bound():
        now, after = buffers[turn[0]], buffers[1 - turn[0]]
        for name, current, following in zip(names, now, after, strict=True):
            io.bind_ortvalue_input(name, current)
            io.bind_ortvalue_output(f"next_{name}", following)
        graph.run_with_iobinding(io)
        turn[0] = 1 - turn[0]

    return bound


def streamed_error(step: ort.InferenceSession, offline: ort.InferenceSession, x: np.ndarray) -> float:
    """Largest |token difference| between ``x`` (1, C, L) streamed chunk by chunk and the offline graph."""
    patch = step.get_inputs()[0].shape[-1]
    state, tokens = zero_state(step, 1), []
    for start in range(0, x.shape[-1], patch):
        z, *after = step.run(None, {"chunk": x[..., start : start + patch], **state})
        state = dict(zip(state, after, strict=True))
        tokens.append(z)
    (reference,) = offline.run(None, {"x": x})
    return float(np.abs(np.stack(tokens, axis=1) - reference).max())


def floor_graph(folder: Path, path: Path) -> tuple[Path, np.ndarray]:
    """An ONNX graph of one MatMul (1, in) @ (in, out) per weight matrix of the package (a
    convolution's (out, in, k) as (in·k, out)), each fed a slice of one input; and that input."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from safetensors.numpy import load_file

    weights = [w for k, w in load_file(folder / "model.safetensors").items()
               if k.split(".")[0] in ("encoder", "projector") and w.ndim >= 2]  # fmt: skip
    matrices = [w.reshape(w.shape[0], -1).T.copy() for w in weights]
    widest = max(m.shape[0] for m in matrices)
    nodes, initial, outputs = [], [], []
    for i, m in enumerate(matrices):
        initial += [numpy_helper.from_array(m, f"w{i}"), numpy_helper.from_array(np.array([m.shape[0]]), f"n{i}")]
        nodes += [helper.make_node("Slice", ["x", "zero", f"n{i}", "one"], [f"x{i}"]),
                  helper.make_node("MatMul", [f"x{i}", f"w{i}"], [f"y{i}"])]  # fmt: skip
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, m.shape[1]]))
    initial += [numpy_helper.from_array(np.array([0]), "zero"), numpy_helper.from_array(np.array([1]), "one")]
    graph = helper.make_graph(nodes, "floor", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, widest])],
                              outputs, initial)  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path, np.random.default_rng(2).standard_normal((1, widest), dtype=np.float32)


def measure_package(folder: Path, threads: int, stream_batches: Sequence[int], steps: int,
                    offline_batches: Sequence[int], repeats: int) -> list[dict]:  # fmt: skip
    """Rows of the package's own ONNX graphs at each optimisation level."""
    from cyclejepa.export import read_package_config

    prep = read_package_config(folder)["preprocessing"]
    leads, patch, samples = len(prep["channels"]), prep["token_patch"], prep["window"] // prep["decimation"]
    x = np.random.default_rng(1).standard_normal((1, leads, samples), dtype=np.float32)
    rows = []
    for level in LEVELS:
        step, offline = (
            session(folder / "encoder_streaming.onnx", threads, level),
            session(folder / "encoder.onnx", threads, level),
        )
        error = streamed_error(step, offline, x)
        for batch in stream_batches:
            chunk = np.random.default_rng(0).standard_normal((batch, leads, patch), dtype=np.float32)
            for binding in (False, True):
                stats = summarise(time_calls(package_step(step, chunk, binding), warmup=100, repeats=steps))
                rows.append({"mode": "streaming", "backend": f"onnxruntime {level} {'iobinding' if binding else 'run'}",
                             "threads": threads, "batch": batch, **stats, "max_abs_vs_offline": error,
                             "realtime_factor": 1e3 * patch / prep["model_fs"] / stats["median_ms"]})  # fmt: skip
        for batch in offline_batches:
            feed = {"x": np.repeat(x, batch, axis=0)}
            stats = summarise(time_calls(lambda offline=offline, feed=feed: offline.run(None, feed), warmup=3, repeats=repeats))
            rows.append({"mode": "offline", "backend": f"onnxruntime {level}", "threads": threads, "batch": batch,
                         **stats, "records_per_s": 1e3 * batch / stats["median_ms"]})  # fmt: skip
    with tempfile.TemporaryDirectory() as scratch:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(folder / "encoder_streaming.onnx", Path(scratch) / "int8.onnx", weight_type=QuantType.QInt8)
        step = session(Path(scratch) / "int8.onnx", threads)
        chunk = np.random.default_rng(0).standard_normal((1, leads, patch), dtype=np.float32)
        stats = summarise(time_calls(package_step(step, chunk, False), warmup=100, repeats=steps))
        rows.append({"mode": "streaming", "backend": "onnxruntime int8 weights, run", "threads": threads, "batch": 1, **stats,
                     "max_abs_vs_offline": streamed_error(step, offline, x),
                     "realtime_factor": 1e3 * patch / prep["model_fs"] / stats["median_ms"]})  # fmt: skip
        path, x = floor_graph(folder, Path(scratch) / "floor.onnx")
        graph = session(path, threads)
        stats = summarise(time_calls(lambda: graph.run(None, {"x": x}), warmup=100, repeats=steps))
    rows.append({"mode": "streaming", "backend": "onnxruntime matrix products only (floor)", "threads": threads,
                 "batch": 1, **stats, "realtime_factor": 1e3 * patch / prep["model_fs"] / stats["median_ms"]})  # fmt: skip
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1], help="torch and onnxruntime intra-op threads")
    parser.add_argument("--stream-batch", type=int, nargs="+", default=[1, 32], help="streams encoded at once")
    parser.add_argument("--steps", type=int, default=1000, help="timed chunks per streaming row")
    parser.add_argument("--offline-batch", type=int, nargs="+", default=[1, 32], help="windows per offline call")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per offline row")
    parser.add_argument("--out", help="write the rows, the machine and the versions as JSON here")
    parser.add_argument("--package", type=Path, help="time this package's ONNX graphs (cyclejepa export --onnx)")
    args = parser.parse_args(argv)
    if args.package:
        rows = [row for t in args.threads for row in
                measure_package(args.package, t, args.stream_batch, args.steps, args.offline_batch, args.repeats)]  # fmt: skip
    else:
        rows = [row for t in args.threads for row in measure(t, args.stream_batch, args.steps, args.offline_batch, args.repeats)]
    host, found = machine_info(torch.device("cpu")), {**versions(), "onnxruntime": ort.__version__}
    what = f"package {args.package}" if args.package else "paper model (1,232,384 deployed parameters)"
    print(
        f"{what}, {host['cpu_model']}, {host['cpu_count']} CPUs, "
        f"load average {host['load_average']}, torch {found['torch']}, onnxruntime {found['onnxruntime']}"
    )
    header = ["mode", "backend", "threads", "batch", "median ms", "p10–p90 ms", "real-time factor / records per s"]
    print("", *markdown_rows(header, [_cells(row) for row in rows], align="l" * 7), sep="\n")
    if args.out:
        write_json(args.out, {"machine": host, "versions": found, "rows": rows})


def _cells(row: dict) -> list:
    """A row of the printed table."""
    rate = f"{row['realtime_factor']:.0f}× real time" if row["mode"] == "streaming" else f"{row['records_per_s']:.1f} records/s"
    error = f" (tokens within {row['max_abs_vs_offline']:.1e} of offline)" if "max_abs_vs_offline" in row else ""
    median, spread = f"{row['median_ms']:.3f}", f"{row['p10_ms']:.3f}–{row['p90_ms']:.3f}"
    return [row["mode"], row["backend"], row["threads"], row["batch"], median, spread, rate + error]


if __name__ == "__main__":
    main()
