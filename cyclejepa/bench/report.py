"""Markdown: the lines of a table (`markdown_rows`, every benchmark's and script's), and the
throughput report (the JSON written by `measure_throughput`) rendered."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["markdown_report", "markdown_rows"]


def markdown_report(report: dict[str, Any]) -> str:
    """The results as Markdown: a heading with the machine, then one table per section."""
    machine, settings = report["machine"], report["settings"]
    gpu = machine.get("gpu")
    if gpu:
        where = f"{gpu['name']} ({gpu['memory_bytes'] / 2**30:.0f} GiB)"
    else:
        where = f"{machine['cpu_model']}, {machine['cpu_affinity']} cores, {machine['torch_threads']} torch threads"
    load = ", ".join(f"{value:.1f}" for value in machine["load_average"]) if machine.get("load_average") else "n/a"
    lines = [
        f"# Throughput on {settings['device']}: {where}",
        "",
        (
            f"torch {report['versions']['torch']}, batch {settings['batch']}, {settings['tokens']} tokens, "
            f"quick={settings['quick']}, load average at start {load}, config hash {settings['config_hash']}"
        ),
    ]
    for title, render in (
        ("Training step", _training),
        ("Step split (instrumented: synchronised at every phase boundary)", _split),
        ("Transport loss", _transport),
        ("SIGReg", _sigreg),
        ("Inference (deployed path, no grad)", _inference),
        ("prepare (synthetic corpus)", _prepare),
        ("Stacked ensemble against runs in turn (eager)", _ensemble),
        ("torch.compile", _compile),
        ("Equality with strict float32", _equality),
        ("Host synchronisations per step (CUDA sync debug mode)", _syncs),
    ):
        body = render(report)
        if body:
            lines += ["", f"## {title}", "", *body]
    return "\n".join(lines) + "\n"


def markdown_rows(header: Sequence[str], rows: Sequence[Sequence[Any]], align: str = "") -> list[str]:
    """The lines of a Markdown table: ``| a | b |``, its rule, a line per row; ``align`` holds one of
    "l"/"r" per column (default: first left, rest right)."""
    align = align or "l" + "r" * (len(header) - 1)
    rule = ["---" if a == "l" else "---:" for a in align]
    return [f"| {' | '.join(map(str, row))} |" for row in (header, rule, *rows)]


def _ok(section: Any) -> bool:
    return isinstance(section, dict) and section.get("status") == "ok"


def _status(section: Any) -> list[str]:
    """One line for a skipped or failed section; nothing for one that is missing or ok."""
    if not isinstance(section, dict) or section.get("status") in (None, "ok"):
        return []
    return [f"{section['status']}: {section.get('reason') or section.get('error', '')}"]


def _training(report) -> list[str]:
    entries = report.get("training")
    if not isinstance(entries, list):
        return _status(entries)
    rows = []
    for e in entries:
        if e["status"] != "ok":
            rows.append([e["variant"], f"{e['status']}: {(e.get('reason') or e.get('error', ''))[:100]}", "", "", "", ""])
            continue
        s, memory = e["step"], e["peak_memory"]
        rows.append(
            [
                e["variant"],
                f"{e['steps_per_s']:.2f}",
                f"{s['median_ms']:.1f} [{s['p10_ms']:.1f}, {s['p90_ms']:.1f}]",
                f"{e['window']['steps_per_s']:.1f}" if "window" in e else "–",
                f"{memory['bytes'] / 2**30:.2f} GiB {'RSS' if memory['kind'] == 'process_max_rss' else 'allocated'}",
                f"{e['warmup_s']:.1f}",
            ]
        )
    header = [
        "variant",
        "steps/s (median)",
        "ms/step median [p10, p90]",
        "sustained steps/s",
        "peak memory",
        "warm-up s",
    ]
    return markdown_rows(header, rows)


def _split(report) -> list[str]:
    lines: list[str] = []
    for e in report.get("training") if isinstance(report.get("training"), list) else []:
        if "split" not in e:
            continue
        split = e["split"]
        rows = [[name, f"{p['mean_ms']:.2f}", f"{100 * p['fraction']:.1f} %"] for name, p in split["phases"].items()]
        rows += [
            [f"**{name}**", f"**{g['mean_ms']:.2f}**", f"**{100 * g['fraction']:.1f} %**"]
            for name, g in split.get("groups", {}).items()
        ]
        lines += [
            (
                f"**{e['variant']}**: {split['steps']} steps, {split['step_mean_ms']:.1f} ms instrumented "
                f"vs {e['step']['mean_ms']:.1f} ms plain (mean)"
            ),
            "",
            *markdown_rows(["phase", "mean ms", "share"], rows),
            "",
        ]
    return lines[:-1]


def _transport(report) -> list[str]:
    section = report.get("transport")
    if not _ok(section):
        return _status(section)
    rows = []
    for r in section["rows"]:
        mark = " (extrapolated)" if r["extrapolated"] else ""
        speedup = f"{r['speedup_forward']:.0f}× / {r['speedup_forward_backward']:.0f}×" if "speedup_forward" in r else ""
        rows.append(
            [
                r["tokens"],
                r["method"],
                r["records_measured"],
                f"{r['forward_ms']:.2f}{mark}",
                f"{r['forward_backward_ms']:.2f}{mark}",
                speedup,
                f"{r['abs_difference']:.1e}",
            ]
        )
    header = [
        "T",
        "method",
        "records timed",
        f"forward ms (B = {section['rows'][0]['batch']})",
        "fwd+bwd ms",
        "all-pairs / O(T), fwd / fwd+bwd",
        "abs diff",
    ]
    return markdown_rows(header, rows, align="rlrrrrr")


def _sigreg(report) -> list[str]:
    s = report.get("sigreg")
    if not _ok(s):
        return _status(s)
    row = [
        s["N"],
        s["K"],
        s["M"],
        s["J"],
        f"{s['forward']['median_ms']:.2f}",
        f"{s['forward_backward']['median_ms']:.2f}",
    ]
    return markdown_rows(["N", "K", "M", "J", "forward ms", "fwd+bwd ms"], [row], align="rrrrrr")


def _inference(report) -> list[str]:
    s = report.get("inference")
    if not _ok(s):
        return _status(s)
    rows = [[r["precision"], r["batch"], f"{r['batch_ms']['median_ms']:.1f}", f"{r['records_per_s']:.0f}"] for r in s["rows"]]
    return markdown_rows(["precision", "batch", "ms/batch", "records/s"], rows)


def _prepare(report) -> list[str]:
    s = report.get("prepare")
    if not _ok(s):
        return _status(s)
    caption = f"{s['records']} synthetic records; writing the corpus took {s['synthetic_write_s']:.1f} s"
    lines = [caption, "", *_prepare_table(s)]
    if s.get("real"):
        lines += ["", f"Real PTB-XL records ({s['real']['root']}):", "", *_prepare_table(s["real"])]
    return lines


def _ensemble(report) -> list[str]:
    s = report.get("ensemble")
    if not _ok(s):
        return _status(s)
    rows = [
        [
            r["runs"],
            f"{r['in turn']['steps_per_s']:.1f}",
            f"{r['stacked']['steps_per_s']:.1f}",
            f"{r['stacked / in turn']:.2f}",
            f"{r['stacked']['peak_memory']['bytes'] / 2**30:.2f}",
        ]
        for r in s["rows"]
    ]
    header = ["runs", "in turn: run-steps/s", "stacked: run-steps/s", "stacked / in turn", "stacked peak GiB"]
    return [f"{s['precision']}, {s['window_steps']} steps per window", "", *markdown_rows(header, rows, align="rrrrr")]


def _prepare_table(s) -> list[str]:
    rows = [
        [
            r["workers"],
            f"{r['seconds']:.1f}",
            f"{r['records_per_s']:.1f}",
            f"{r['records_per_s_per_worker']:.1f}",
            f"{r['records_per_cpu_s']:.1f}" if "records_per_cpu_s" in r else "–",
        ]
        for r in s["rows"]
    ]
    header = ["workers", "seconds", "records/s", "records/s per worker", "records per CPU-second"]
    lines = markdown_rows(header, rows, align="rrrrr")
    split = s.get("split")
    if split:
        stages = " / ".join(f"{name} {ms:.2f}" for name, ms in split["ms"].items())
        lines += [
            "",
            f"CPU time per record, one process ({split['records']} records): {stages} ms, "
            f"total {split['total_ms']:.2f} ms = {split['records_per_cpu_s']:.0f} records per CPU-second.",
        ]
    return lines


def _equality(report) -> list[str]:
    s = report.get("equality")
    if not _ok(s):
        return _status(s)
    terms, rtol = report["settings"]["equality"]["terms"], report["settings"]["equality"]["rtol"]
    rows = [
        [name, c["steps"], *(f"{c['terms'][t]['max_rel_diff']:.1e}" for t in terms), "yes" if c["passed"] else "NO"]
        for name, c in s["variants"].items()
    ]
    header = ["variant", "steps", *(f"{t}: max rel diff" for t in terms), f"all ≤ {rtol:g}"]
    return [f"Reference: {s['reference']}.", "", *markdown_rows(header, rows, align="lr" + "r" * len(terms) + "l")]


def _compile(report) -> list[str]:
    entries = report.get("training") if isinstance(report.get("training"), list) else []
    rows = [
        [
            e["variant"],
            e["dynamo"]["unique_graphs"],
            sum(e["dynamo"]["graph_breaks"].values()),
            "; ".join(f"{reason[:80]} ×{count}" for reason, count in e["dynamo"]["graph_breaks"].items()) or "–",
            ", ".join(f"{key} {value}" for key, value in e["dynamo"]["inductor"].items()) or "–",
        ]
        for e in entries
        if "dynamo" in e
    ]
    return (
        markdown_rows(["variant", "graphs", "graph breaks", "break reasons", "CUDA graphs"], rows, align="lrrll") if rows else []
    )


def _syncs(report) -> list[str]:
    lines: list[str] = []
    for e in report.get("training") if isinstance(report.get("training"), list) else []:
        if "host_syncs" not in e:
            continue
        rows = [[s["op"], s["caller"], f"{s['per_step']:g}", s["message"]] for s in e["host_syncs"]]
        table = markdown_rows(["op line", "cyclejepa caller", "per step", "message"], rows, align="llrl") if rows else ["none"]
        lines += [f"**{e['variant']}**", "", *table, ""]
    return lines[:-1]
