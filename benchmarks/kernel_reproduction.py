"""The kernel paper's Table 3 and its other experiments through ``banditsweep.core`` alone (no Ray, no
MLflow): the trials of ``sweeps/kernel_exp3/*.yaml`` for chosen domains, kernels, algorithm variants,
seeds and horizons, aggregated to mean +- std of the final regret (realised and expected forms,
SPEC 2.1) and the mean seconds per round, printed as a Markdown table. One JSON line per finished
trial goes to stderr.

    python benchmarks/kernel_reproduction.py --settings 1 2 --seeds 5 --horizon 1000
    python benchmarks/kernel_reproduction.py --settings 3 4 --algorithms random apg_exp3 rls_kernel_exp3 \\
        --seeds 3 --horizon 200

An algorithm may carry parameters beyond the paper's selected constants, ``name:key=value,...``
(values read as YAML), e.g. the exploration variants of App. 16, exact Kernelized Exp3 with RLS's
beta, and Musco & Musco's sampler:

    python benchmarks/kernel_reproduction.py --settings 1 2 --seeds 5 --horizon 1000 --algorithms \\
        kernel_exp3:exploration=g_optimal kernel_exp3:exploration=uniform kernel_exp3:beta_rule=theorem3 \\
        rls_kernel_exp3:sampler=theory

``--kind kernel_lower_bound`` runs the lower-bound instance of Sec. 5 / App. 13 instead of the adaptive
adversary (its table adds the pseudo-regret sum_t max f - f(x_t) and Theorem 4's rate), and
``--continuous 1 2`` plays [0, 1]^d on its 1/sqrt(T)-net (Cor. 2) instead of the settings; ``--horizon``
takes several values:

    python benchmarks/kernel_reproduction.py --kind kernel_lower_bound --continuous 1 2 \\
        --kernels se matern32 --horizon 100 300 1000 --seeds 5

Each trial runs on one core (as ``cpus_per_trial: 1`` in the sweeps): torch and OpenBLAS are limited
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
import yaml  # noqa: E402

from banditsweep.core.engine.trial import TrialSpec, run_trial  # noqa: E402

# The paper's selected constants (App. 17; SPEC 3.1, 3.5), as in sweeps/kernel_exp3/table3.yaml.
EXP3_CONSTANTS = {"se": {"c3": 5.0, "c4": 0.1, "lam": 1.0}, "matern52": {"c3": 10.0, "c4": 0.1, "lam": 10.0},
                  "matern32": {"c3": 5.0, "c4": 0.1, "lam": 5.0}}
EXP3_ALGORITHMS = ("kernel_exp3", "rls_kernel_exp3", "rls_kernel_exp3_amvr")
LABELS = {"random": "Random", "apg_exp3": "APG-Exp3", "kernel_exp3": "Kernelized Exp3",
          "rls_kernel_exp3": "RLS-Kernelized Exp3", "rls_kernel_exp3_amvr": "RLS-Kernelized Exp3 (AMVR)"}
DEFAULT_ALGORITHMS = ("random", "apg_exp3", "kernel_exp3", "rls_kernel_exp3")


def parse_algorithm(text: str) -> tuple[str, dict]:
    """``name`` or ``name:key=value,key=value`` (values parsed as YAML scalars)."""
    name, _, rest = text.partition(":")
    extra = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        extra[key.strip()] = yaml.safe_load(value)
    return name, extra


def label_for(name: str, extra: dict) -> str:
    base = LABELS.get(name, name)
    return base if not extra else f"{base} ({', '.join(f'{k}={v}' for k, v in extra.items())})"


def params_for(algorithm: str, kernel: str, extra: dict | None = None) -> dict:
    if algorithm in EXP3_ALGORITHMS:
        base = dict(EXP3_CONSTANTS.get(kernel, {}))
    elif algorithm == "apg_exp3":
        base = {"c1": 0.5, "c2": 0.1}
    else:
        base = {}
    return {**base, **(extra or {})}


def environments(args) -> list[tuple[str, dict]]:
    """(domain name, environment config) for every domain and kernel asked for."""
    domains = ([(f"[0,1]^{d} net", {"domain": {"continuous": d}}) for d in args.continuous] if args.continuous
               else [(str(s), {"setting": s}) for s in args.settings])
    return [(name, {"kind": args.kind, **domain, "kernel": kernel}) for name, domain in domains
            for kernel in args.kernels]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", default="adversarial_kernel", choices=["adversarial_kernel", "kernel_lower_bound"])
    parser.add_argument("--settings", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--continuous", type=int, nargs="+", default=None,
                        help="dimensions d: play [0, 1]^d on its 1/sqrt(T)-net instead of --settings")
    parser.add_argument("--kernels", nargs="+", default=["se", "matern52", "matern32"])
    parser.add_argument("--algorithms", nargs="+", default=list(DEFAULT_ALGORITHMS),
                        help="name or name:key=value,... (extra parameters, YAML values)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--horizon", type=int, nargs="+", default=[1000])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    algorithms = [parse_algorithm(text) for text in args.algorithms]
    lower_bound = args.kind == "kernel_lower_bound"
    rows = defaultdict(list)
    for domain, environment in environments(args):
        kernel = environment["kernel"]
        for horizon in args.horizon:
            for text, (algorithm, extra) in zip(args.algorithms, algorithms):
                for seed in range(args.seeds):
                    spec = TrialSpec.create(algorithm, params_for(algorithm, kernel, extra), environment, seed, horizon)
                    result = run_trial(spec)
                    record = {"domain": domain, "kernel": kernel, "algorithm": text, "seed": seed,
                              "horizon": horizon, "final_regret": result.final_regret,
                              "expected_regret": float(result.extras["expected_regret"][-1]),
                              "seconds_per_round": result.seconds_per_round,
                              "diagnostics": result.diagnostics}
                    if lower_bound:
                        record["pseudo_regret"] = float(result.extras["pseudo_regret"][-1])
                    print(json.dumps(record), file=sys.stderr, flush=True)
                    rows[(domain, kernel, horizon, label_for(algorithm, extra))].append(record)
    print(f"{args.kind}; T = {', '.join(map(str, args.horizon))}; seeds 0..{args.seeds - 1}; "
          f"regret: mean ± std over seeds\n")
    columns = ["domain", "kernel", "T", "algorithm", "realised regret R_T", "expected regret"]
    columns += ["pseudo regret", "|X|", "Thm. 4 rate"] if lower_bound else []
    columns += ["s / round", "s_t (mean)"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for (domain, kernel, horizon, label), records in rows.items():
        final = np.array([r["final_regret"] for r in records])
        expected = np.array([r["expected_regret"] for r in records])
        seconds = np.mean([r["seconds_per_round"] for r in records])
        landmarks = [r["diagnostics"].get("s_t_mean") for r in records]
        s_text = f"{np.mean(landmarks):.0f}" if landmarks[0] is not None else ""
        cells = [domain, kernel, str(horizon), label, f"{final.mean():.1f} ± {final.std():.1f}",
                 f"{expected.mean():.1f} ± {expected.std():.1f}"]
        if lower_bound:
            pseudo = np.array([r["pseudo_regret"] for r in records])
            diagnostics = records[0]["diagnostics"]
            cells += [f"{pseudo.mean():.1f} ± {pseudo.std():.1f}", f"{diagnostics['domain_size']:.0f}",
                      f"{diagnostics['lower_bound_rate']:.1f}"]
        cells += [f"{seconds:.4f}", s_text]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
