"""Published PTB-XL macro-AUROC figures (test fold 10, all of PTB-XL) with their sources.

Each figure was checked against the source named beside it; figures that could not be checked
are left out (see docs/benchmark-ptbxl.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["PUBLISHED", "SOURCES", "Published"]

SOURCES = {
    "strodthoff2021": (
        "Strodthoff, Wagner, Schaeffter & Samek (2021), Deep learning for ECG analysis: benchmarks and insights "
        "from PTB-XL, IEEE J. Biomed. Health Inform. 25(5):1519-1528, doi:10.1109/JBHI.2020.3022989. The best "
        "model of each task, as in the leaderboard of the authors' repository github.com/helme/ecg_ptbxl_benchmarking"
    ),
    "mehari2022": (
        "Mehari & Strodthoff (2022), Self-supervised representation learning from 12-lead ECG data, Comput. Biol. "
        "Med. 141:105114, doi:10.1016/j.compbiomed.2021.105114; pre-trained on their 'All' collection. Figures as "
        "tabulated with this attribution in the results table of github.com/kweimann/ECG-JEPA (the paper's own "
        "table was not checked)"
    ),
    "weimann2024": (
        "Weimann & Conrad (2024), Self-supervised pre-training with joint-embedding predictive architecture boosts "
        "ECG classification performance, arXiv:2410.13867 (Comput. Biol. Med. 196, 2025); ViT-S pre-trained on "
        "their 'All' collection, mean of 10 runs, results table of the authors' repository github.com/kweimann/ECG-JEPA"
    ),
}


@dataclass(frozen=True)
class Published:
    """One published row: ``method`` under ``protocol`` (supervised, linear or finetune), task → AUROC."""

    method: str
    protocol: str
    source: str
    auroc: dict[str, float]
    models: dict[str, str] = field(default_factory=dict)


PUBLISHED = (
    Published(
        "supervised, best of the benchmark",
        "supervised",
        "strodthoff2021",
        {"all": 0.925, "diagnostic": 0.937, "subdiagnostic": 0.930, "superdiagnostic": 0.930, "form": 0.899, "rhythm": 0.957},
        {
            "all": "inception1d, xresnet1d101",
            "diagnostic": "xresnet1d101",
            "subdiagnostic": "inception1d",
            "superdiagnostic": "resnet1d_wang",
            "form": "inception1d",
            "rhythm": "xresnet1d101",
        },
    ),
    Published("SimCLR (xresnet1d50)", "linear", "mehari2022", {"all": 0.883}),
    Published("SimCLR (xresnet1d50)", "finetune", "mehari2022", {"all": 0.927}),
    Published("BYOL (xresnet1d50)", "linear", "mehari2022", {"all": 0.878}),
    Published("BYOL (xresnet1d50)", "finetune", "mehari2022", {"all": 0.929}),
    Published("CPC (4FC+2LSTM+2FC)", "linear", "mehari2022", {"all": 0.927}),
    Published("CPC (4FC+2LSTM+2FC)", "finetune", "mehari2022", {"all": 0.942}),
    Published("JEPA (ViT-S)", "linear", "weimann2024", {"all": 0.938}),
    Published("JEPA (ViT-S)", "finetune", "weimann2024", {"all": 0.945}),
)
