"""Wall time of every stage of a whole experiment on a synthetic PTB-XL-size corpus.

python benchmarks/experiment_time.py --config examples/winder_ptbxl.yaml --unseal --out runs/experiment_time
"""

from cyclejepa.bench.commands import experiment_time_main as main

if __name__ == "__main__":
    main()
