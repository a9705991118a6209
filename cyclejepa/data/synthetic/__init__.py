"""Synthetic 12-lead ECG corpus written in the exact PTB-XL 1.0.3 layout.

PTB-XL's reader cannot tell it from the PhysioNet release: both CSV files and WFDB format-16
records at 500 and 100 Hz, 12 leads in mV, gain 1000, with checksums. Waveforms come from a
dipole model: P, Q, R, S, ST and T waves are Gaussians in time, each carrying a 3-D heart
vector projected onto nine electrodes (RA, LA, LL, V1–V6); the 12 leads are their standard
differences, so Einthoven's and Goldberger's identities hold exactly. A record's diagnostic
statements (PTB-XL's 44, real class mapping) edit the wave vectors (infarct Q waves, ischaemic
ST/T, wide QRS, hypertrophy). Every beat's exact R-peak sample goes to ``synthetic_rpeaks.json``.

Everything is a deterministic function of ``(records, seed)``: the cohort from one random
stream, the waveforms of records ``64k … 64k+63`` from stream ``k`` (independent of workers).

Modules in data-flow order: `statements`, `heart`, `pathology`, `cohort`, `waveforms`,
`generate` (in memory), `corpus` (on disk), `dataset` (the registered ``synthetic``).
"""

from cyclejepa.data.synthetic.corpus import (
    DATABASE_COLUMNS,
    DATABASE_CSV,
    HEADER_LEADS,
    RPEAKS_FILENAME,
    read_rpeaks,
    write_synthetic_corpus,
)
from cyclejepa.data.synthetic.dataset import SyntheticPTBXL
from cyclejepa.data.synthetic.generate import SyntheticRecords, generate_metadata, generate_records
from cyclejepa.data.synthetic.statements import scp_statements

__all__ = [
    "DATABASE_COLUMNS",
    "DATABASE_CSV",
    "HEADER_LEADS",
    "RPEAKS_FILENAME",
    "SyntheticPTBXL",
    "SyntheticRecords",
    "generate_metadata",
    "generate_records",
    "read_rpeaks",
    "scp_statements",
    "write_synthetic_corpus",
]
