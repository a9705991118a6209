"""Synthetic 12-lead ECG corpus written in the exact PTB-XL 1.0.3 layout.

A newcomer without PTB-XL gets a corpus that the library's PTB-XL reader cannot tell from the
PhysioNet release: ``ptbxl_database.csv``, ``scp_statements.csv`` and WFDB format-16 records at
500 Hz (``records500/``) and 100 Hz (``records100/``), 12 leads I … V6 in mV, gain 1000, with
checksums. Waveforms come from a dipole (vectorcardiogram) model: P, Q, R, S, ST and T waves are
Gaussians in time around each beat, each carrying a 3-D heart vector; nine electrode potentials
(RA, LA, LL, V1–V6) are projections of the heart vector plus electrode noise, and the 12 leads
are the standard electrode differences, so Einthoven's and Goldberger's identities hold exactly.
A record's diagnostic statements (PTB-XL's 44, with their real class/subclass mapping) edit the
wave vectors: Q waves and lost R forces toward an infarct territory, ST/T vectors turned away
from an ischaemic one, wide re-shaped QRS complexes for conduction defects, larger QRS vectors
for hypertrophy. The exact R-peak sample of every beat goes to a sidecar at the corpus root,
``synthetic_rpeaks.json``.

Everything is a deterministic function of ``(records, seed)``: the cohort (patients, labels,
folds, per-record physiology) comes from one random stream and the waveforms of records
``64k … 64k+63`` from stream ``k``, so the output does not depend on the number of workers.

Modules, in the order of the data flow: `statements` (PTB-XL's catalogue and cohort statistics),
`heart` (the ECG model), `pathology` (what each statement does to the beat), `cohort` (patients,
labels, folds, metadata), `waveforms` (synthesis), `generate` (records in memory), `corpus`
(writing the PTB-XL layout) and `dataset` (the registered ``synthetic`` dataset).
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
