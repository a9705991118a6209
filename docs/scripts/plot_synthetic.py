"""Figure for docs/synthetic.md: a few leads of one NORM and one MI record of the synthetic corpus.

Run from the repository root: ``python docs/scripts/plot_synthetic.py`` (writes
docs/img/synthetic_norm_mi.png).
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from cyclejepa.data.synthetic import HEADER_LEADS, generate_records  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "img" / "synthetic_norm_mi.png"
LEADS = ("I", "II", "V1", "V5")
SECONDS = 4.0
FS = 500


def first_record(records, wanted: set[str]) -> int:
    """Index of the first record whose diagnostic statements are exactly ``wanted``."""
    for i, meta in enumerate(records.metadata):
        codes = set(meta["scp_codes"]) - {"SR", "SBRAD", "STACH", "SARRH", "ABQRS", "QWAVE"}
        if codes == wanted:
            return i
    raise LookupError(f"no record with statements {sorted(wanted)}")


def main() -> None:
    records = generate_records(200, seed=0)
    picks = [("NORM", first_record(records, {"NORM"})), ("IMI (inferior MI)", first_record(records, {"IMI"}))]
    t = np.arange(int(SECONDS * FS)) / FS
    fig, axes = plt.subplots(len(LEADS), 2, figsize=(10, 5.2), sharex=True, sharey="row")
    for column, (title, index) in enumerate(picks):
        signal, peaks = records.signals[index], records.rpeaks[index]
        meta = records.metadata[index]
        axes[0, column].set_title(f"{title}: ecg_id {meta['ecg_id']}, {meta['scp_codes']}", fontsize=8)
        for row, lead in enumerate(LEADS):
            ax = axes[row, column]
            ax.plot(t, signal[HEADER_LEADS.index(lead), : len(t)], lw=0.8, color="k")
            for p in peaks[peaks < len(t)]:
                ax.axvline(p / FS, color="tab:red", lw=0.5, alpha=0.6)
            ax.grid(alpha=0.3)
            if column == 0:
                ax.set_ylabel(f"{lead} (mV)")
    for ax in axes[-1]:
        ax.set_xlabel("time (s); red: ground-truth R peaks")
    fig.tight_layout()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=90)
    print(f"wrote {OUT} ({OUT.stat().st_size / 1024:.0f} kB)")


if __name__ == "__main__":
    main()
