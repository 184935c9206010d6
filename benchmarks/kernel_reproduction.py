"""The kernel paper's Table 3 through ``banditsweep.core`` alone (no Ray, no MLflow): the trials of
``sweeps/kernel_exp3/table3.yaml`` for chosen settings, kernels, algorithms, seeds and horizon,
aggregated to mean +- std of the final regret (realised and expected forms, SPEC 2.1) and the mean
seconds per round, printed as a Markdown table. One JSON line per finished trial goes to stderr.

    python benchmarks/kernel_reproduction.py --settings 1 2 --seeds 5 --horizon 1000
    python benchmarks/kernel_reproduction.py --settings 3 4 --algorithms random apg_exp3 rls_kernel_exp3 \
        --seeds 3 --horizon 200

Each trial runs on one core (as ``cpus_per_trial: 1`` in the sweep): torch and OpenBLAS are limited
to one thread, which also keeps small factorisations fast on a machine shared with other work.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from collections import defaultdict  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from banditsweep.core.trial import TrialSpec, run_trial  # noqa: E402

# The paper's selected constants (App. 17; SPEC 3.1, 3.5), as in sweeps/kernel_exp3/table3.yaml.
EXP3_CONSTANTS = {"se": {"c3": 5.0, "c4": 0.1, "lam": 1.0}, "matern52": {"c3": 10.0, "c4": 0.1, "lam": 10.0},
                  "matern32": {"c3": 5.0, "c4": 0.1, "lam": 5.0}}
LABELS = {"random": "Random", "apg_exp3": "APG-Exp3", "kernel_exp3": "Kernelized Exp3",
          "rls_kernel_exp3": "RLS-Kernelized Exp3"}


def params_for(algorithm: str, kernel: str) -> dict:
    if algorithm in ("kernel_exp3", "rls_kernel_exp3"):
        return dict(EXP3_CONSTANTS[kernel])
    if algorithm == "apg_exp3":
        return {"c1": 0.5, "c2": 0.1}
    return {}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--kernels", nargs="+", default=["se", "matern52", "matern32"])
    parser.add_argument("--algorithms", nargs="+", default=list(LABELS))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--horizon", type=int, default=1000)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = defaultdict(list)
    for setting in args.settings:
        for kernel in args.kernels:
            environment = {"kind": "adversarial_kernel", "setting": setting, "kernel": kernel}
            for algorithm in args.algorithms:
                for seed in range(args.seeds):
                    spec = TrialSpec.create(algorithm, params_for(algorithm, kernel), environment, seed, args.horizon)
                    result = run_trial(spec)
                    record = {"setting": setting, "kernel": kernel, "algorithm": algorithm, "seed": seed,
                              "horizon": args.horizon, "final_regret": result.final_regret,
                              "expected_regret": float(result.extras["expected_regret"][-1]),
                              "seconds_per_round": result.seconds_per_round,
                              "diagnostics": result.diagnostics}
                    print(json.dumps(record), file=sys.stderr, flush=True)
                    rows[(setting, kernel, algorithm)].append(record)
    print(f"T = {args.horizon}, seeds 0..{args.seeds - 1}; regret: mean ± std over seeds\n")
    print("| setting | kernel | algorithm | realised regret R_T | expected regret | s / round | s_t (mean) |")
    print("|---|---|---|---|---|---|---|")
    for (setting, kernel, algorithm), records in rows.items():
        final = np.array([r["final_regret"] for r in records])
        expected = np.array([r["expected_regret"] for r in records])
        seconds = np.mean([r["seconds_per_round"] for r in records])
        landmarks = [r["diagnostics"].get("s_t_mean") for r in records]
        s_text = f"{np.mean(landmarks):.0f}" if landmarks[0] is not None else ""
        print(f"| {setting} | {kernel} | {LABELS.get(algorithm, algorithm)} | {final.mean():.1f} ± {final.std():.1f} "
              f"| {expected.mean():.1f} ± {expected.std():.1f} | {seconds:.4f} | {s_text} |")


if __name__ == "__main__":
    main()
