"""Markdown rendering of a throughput report (the JSON written by `run_throughput`)."""

from __future__ import annotations

from typing import Any

__all__ = ["markdown_report"]


def markdown_report(report: dict[str, Any]) -> str:
    """The results as Markdown tables (one per section)."""
    machine, settings = report["machine"], report["settings"]
    gpu = machine.get("gpu")
    where = f"{gpu['name']} ({gpu['memory_bytes'] / 2**30:.0f} GiB)" if gpu else (
        f"{machine['cpu_model']}, {machine['cpu_affinity']} cores, {machine['torch_threads']} torch threads")
    lines = [
        f"# Throughput on {settings['device']}: {where}",
        "",
        f"torch {report['versions']['torch']}, batch {settings['batch']}, {settings['tokens']} tokens, "
        f"quick={settings['quick']}, load average {_load(machine.get('load_average'))}, "
        f"config hash {settings['config_hash']}",
    ]
    for title, render in (
        ("Training step", _md_training),
        ("Step split (instrumented, synchronised per phase)", _md_split),
        ("Transport loss", _md_transport),
        ("SIGReg", _md_sigreg),
        ("Inference (deployed path, no grad)", _md_inference),
        ("prepare (synthetic corpus)", _md_prepare),
        ("Equality with strict float32", _md_equality),
        ("Host synchronisations per step (CUDA sync debug mode)", _md_syncs),
    ):
        body = render(report)
        if body:
            lines += ["", f"## {title}", "", *body]
    return "\n".join(lines) + "\n"


def _md_training(report) -> list[str]:
    entries = report.get("training")
    if not isinstance(entries, list):
        return _md_status(entries)
    rows = ["| variant | steps/s (median) | ms/step median [p10, p90] | sustained steps/s | peak memory | warm-up s |",
            "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for e in entries:
        if e["status"] != "ok":
            rows.append(f"| {e['variant']} | {e['status']}: {e.get('reason') or e.get('error', '')[:80]} | | | | |")
            continue
        s = e["step"]
        window = f"{e['window']['steps_per_s']:.1f}" if "window" in e else "–"
        rows.append(f"| {e['variant']} | {e['steps_per_s']:.2f} | {s['median_ms']:.1f} [{s['p10_ms']:.1f}, "
                    f"{s['p90_ms']:.1f}] | {window} | {_bytes(e['peak_memory'])} | {e['warmup_s']:.1f} |")
    return rows


def _md_split(report) -> list[str]:
    entries = [e for e in report.get("training") or [] if isinstance(e, dict) and "split" in e]
    rows = []
    for e in entries:
        split = e["split"]
        rows += [f"**{e['variant']}**: {split['steps']} steps, {split['step_mean_ms']:.1f} ms instrumented vs "
                 f"{e['step']['mean_ms']:.1f} ms plain", "", "| phase | mean ms | share |", "| --- | ---: | ---: |"]
        rows += [f"| {n} | {p['mean_ms']:.2f} | {100 * p['fraction']:.1f} % |" for n, p in split["phases"].items()]
        rows += [f"| **{n}** | **{g['mean_ms']:.2f}** | **{100 * g['fraction']:.1f} %** |"
                 for n, g in split["groups"].items()]
        rows.append("")
    return rows[:-1]


def _md_transport(report) -> list[str]:
    section = report.get("transport", {})
    if section.get("status") != "ok":
        return _md_status(section)
    rows = ["| T | method | records timed | forward ms (B) | fwd+bwd ms (B) | speed-up fwd / fwd+bwd | abs diff |",
            "| ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in section["rows"]:
        speed = (f"{r['speedup_forward']:.0f}× / {r['speedup_forward_backward']:.0f}×"
                 if "speedup_forward" in r else "")
        mark = " (extrapolated)" if r["extrapolated"] else ""
        rows.append(f"| {r['tokens']} | {r['method']} | {r['records_measured']} | {r['forward_ms']:.2f}{mark} | "
                    f"{r['forward_backward_ms']:.2f}{mark} | {speed} | {r['abs_difference']:.1e} |")
    return rows


def _md_sigreg(report) -> list[str]:
    s = report.get("sigreg", {})
    if s.get("status") != "ok":
        return _md_status(s)
    return ["| N | K | M | J | forward ms | fwd+bwd ms |", "| ---: | ---: | ---: | ---: | ---: | ---: |",
            f"| {s['N']} | {s['K']} | {s['M']} | {s['J']} | {s['forward']['median_ms']:.2f} | "
            f"{s['forward_backward']['median_ms']:.2f} |"]


def _md_inference(report) -> list[str]:
    s = report.get("inference", {})
    if s.get("status") != "ok":
        return _md_status(s)
    return ["| precision | batch | ms/batch | records/s |", "| --- | ---: | ---: | ---: |"] + [
        f"| {r['precision']} | {r['batch']} | {r['batch_ms']['median_ms']:.1f} | {r['records_per_s']:.0f} |"
        for r in s["rows"]]


def _md_prepare(report) -> list[str]:
    s = report.get("prepare", {})
    if s.get("status") != "ok":
        return _md_status(s)
    return [f"{s['records']} records; writing the synthetic corpus took {s['synthetic_write_s']:.1f} s", "",
            "| workers | seconds | records/s | records/s per worker |", "| ---: | ---: | ---: | ---: |"] + [
        f"| {r['workers']} | {r['seconds']:.1f} | {r['records_per_s']:.1f} | {r['records_per_s_per_worker']:.1f} |"
        for r in s["rows"]]


def _md_equality(report) -> list[str]:
    s = report.get("equality", {})
    if s.get("status") != "ok":
        return _md_status(s)
    terms, rtol = report["settings"]["equality"]["terms"], report["settings"]["equality"]["rtol"]
    header = " | ".join(f"{t} max rel diff" for t in terms)
    rows = [f"{s['steps']} steps vs {s['reference']}", "", f"| variant | steps | {header} | within "
            f"{rtol:g} |", "| --- | ---: |" + " ---: |" * len(terms) + " --- |"]
    for name, c in s["variants"].items():
        cells = " | ".join(f"{c['terms'][t]['max_rel_diff']:.1e}" for t in terms)
        rows.append(f"| {name} | {c['steps']} | {cells} | {'yes' if c['passed'] else 'NO'} |")
    return rows


def _md_syncs(report) -> list[str]:
    rows = []
    for e in report.get("training") or []:
        if isinstance(e, dict) and "host_syncs" in e:
            rows += [f"**{e['variant']}**", "", "| op line | cyclejepa caller | per step | message |",
                     "| --- | --- | ---: | --- |"]
            rows += [f"| {s['op']} | {s['caller']} | {s['per_step']:g} | {s['message']} |" for s in e["host_syncs"]]
            rows.append("")
    return rows[:-1]


def _md_status(section: Any) -> list[str]:
    if not isinstance(section, dict) or section.get("status") in (None, "ok"):
        return []
    return [f"{section['status']}: {section.get('reason') or section.get('error', '')}"]




def _bytes(memory: dict[str, Any]) -> str:
    label = "RSS" if memory["kind"] == "process_max_rss" else "alloc"
    return f"{memory['bytes'] / 2**30:.2f} GiB {label}"


def _load(load: Any) -> str:
    return ", ".join(f"{value:.1f}" for value in load) if load else "n/a"
