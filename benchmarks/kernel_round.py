"""Per-round cost of exact Kernelized Exp3 vs RLS-Kernelized Exp3 (SPEC 3.1, 3.4) as |X| grows.

For each n the domain is n equally spaced points of [0, 1] (settings 1 and 3 are n = 400 and 10^4),
T = 1000 and the paper's constants for the kernel. A policy is prepared on the domain (kernel
matrix / MVR design: timed separately as ``prepare_seconds``) and then plays ``--rounds`` rounds
against a fixed smooth reward function from the candidate family of SPEC 2.3, with the warm-up round
excluded. The exact algorithm runs only up to n = 10^4 (its n x n work arrays would not fit beyond).

Output: one JSON line per (algorithm, n, kernel)

    {"case", "algorithm", "n", "kernel", "seconds_per_round", "s_mean", "prepare_seconds", "rounds", "device"}

then one line per n where both run with ``"algorithm": "ratio"`` and ``seconds_per_round`` the ratio
exact / RLS.

``--batch B`` instead measures lockstep trial batching of exact Kernelized Exp3 (core.engine.trial
``run_trials``): B trials (seeds 0..B-1) of the adversarial environment on the same n-point grid, run
once as one lockstep batch (one batched Cholesky of the B weighted systems per round) and once one
after another with ``run_trial``, through the same code the sweeps use. Round 1 (preparation) is
excluded; ``seconds_per_trial_round`` is the wall time of a round divided by the trials it advances.
One line per (mode, n) and a ``"mode": "ratio"`` line with the throughput ratio sequential / batched:

    python benchmarks/kernel_round.py --batch 8 --sizes 400 2000 --exact-rounds 3

    python benchmarks/kernel_round.py                      # n in 400, 2000, 10000, 100000; SE kernel
    python benchmarks/kernel_round.py --sizes 400 2000 --kernels se matern32 --rounds 5

Threads: torch (the exact algorithm's Cholesky) uses ``--threads`` cores; numpy/scipy (all of the
RLS algorithm's small dense algebra) run single-threaded, because a multi-threaded OpenBLAS slows
s x s factorisations by up to 100x on a machine whose cores are shared with other work. RLS-Kernelized
Exp3 is therefore measured on one core and the exact algorithm on ``--threads`` cores.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported (see above)

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from banditsweep.core.kernel import domains  # noqa: E402
from banditsweep.core.engine import seeding
from banditsweep.core.kernel.algorithms.kernel_exp3 import KernelExp3, KernelExp3Params  # noqa: E402
from banditsweep.core.kernel.algorithms.rls_kernel_exp3 import RLSKernelExp3, RLSKernelExp3Params  # noqa: E402
from banditsweep.core.engine.contracts import ADVERSARIAL_DOMAIN, Problem  # noqa: E402
from banditsweep.core.kernel.kernels import Kernel  # noqa: E402
from banditsweep.core.engine.trial import TrialSpec, run_trial, run_trials  # noqa: E402

# The paper's selected (c3, c4, lambda) per kernel (SPEC 3.1).
PAPER_CONSTANTS = {"se": (5.0, 0.1, 1.0), "matern52": (10.0, 0.1, 10.0), "matern32": (5.0, 0.1, 5.0)}
EXACT_LIMIT = 10_000


def reward_function(kernel: Kernel, domain: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One candidate of SPEC 2.3: 100 random centres, coefficients in (-1, 1), RKHS norm scaled to <= 2."""
    centres = rng.integers(0, len(domain), size=100)
    coefficients = rng.uniform(-1, 1, size=100)
    norm = math.sqrt(max(coefficients @ kernel(domain[centres], domain[centres]) @ coefficients, 1e-300))
    values = np.zeros(len(domain))
    for rows, block in kernel.tiles(domain, domain[centres]):
        values[rows] = block @ coefficients
    return min(1.0, 2.0 / norm) * values


def measure(policy_cls, params, kernel: Kernel, n: int, horizon: int, rounds: int, device: str) -> dict:
    domain = domains.grid([n])
    problem = Problem(num_arms=n, dim=1, horizon=horizon, interaction=ADVERSARIAL_DOMAIN,
                      kernel=kernel, norm_bound=2.0)
    policy = policy_cls(params, problem, seeding.stream(0, seeding.POLICY_STREAM), device=device)
    rewards = reward_function(kernel, domain, np.random.default_rng(1))
    start = time.perf_counter()
    policy.weights = policy.prepare(domain)
    policy._domain = domain
    prepare_seconds = time.perf_counter() - start
    durations = []
    for t in range(1, rounds + 2):  # round 1 is the warm-up
        start = time.perf_counter()
        decision = policy.select(t, domain)
        policy.update(t, domain, decision.arm, float(rewards[decision.arm]))
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        durations.append(time.perf_counter() - start)
    counts = getattr(policy, "landmark_counts", [])
    return {"seconds_per_round": float(np.mean(durations[1:])),
            "s_mean": float(np.mean(counts[1:])) if counts else float(n),
            "prepare_seconds": prepare_seconds, "rounds": rounds}


def measure_batch(kernel_name: str, n: int, batch: int, rounds: int, device: str) -> dict[str, float]:
    """Seconds per trial-round of B exact Kernelized Exp3 trials, batched and sequential."""
    c3, c4, lam = PAPER_CONSTANTS[kernel_name]
    environment = {"kind": "adversarial_kernel", "domain": {"grid": [n]}, "kernel": kernel_name}
    specs = [TrialSpec.create("kernel_exp3", {"c3": c3, "c4": c4, "lam": lam}, environment, seed, rounds + 1)
             for seed in range(batch)]
    batched = run_trials(specs, device=device)
    sequential = [run_trial(spec, device) for spec in specs]
    for together, alone in zip(batched, sequential):   # the batch plays each trial as alone
        assert np.array_equal(together.arm, alone.arm)
    return {"batched": float(np.mean([r.seconds[1:].mean() for r in batched])),
            "sequential": float(np.mean([r.seconds[1:].mean() for r in sequential]))}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[400, 2000, 10_000, 100_000])
    parser.add_argument("--kernels", nargs="+", default=["se"], choices=sorted(PAPER_CONSTANTS))
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds of RLS-Kernelized Exp3")
    parser.add_argument("--exact-rounds", type=int, default=2, help="timed rounds of exact Kernelized Exp3")
    parser.add_argument("--horizon", type=int, default=1000)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (exact algorithm on CPU)")
    parser.add_argument("--batch", type=int, default=None,
                        help="measure a lockstep batch of this many exact Kernelized Exp3 trials instead")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.batch:
        for kernel_name in args.kernels:
            for n in args.sizes:
                timings = measure_batch(kernel_name, n, args.batch, args.exact_rounds, args.device)
                common = {"case": f"{kernel_name}-n{n}-batch{args.batch}", "algorithm": "kernel_exp3", "n": n,
                          "kernel": kernel_name, "batch": args.batch, "rounds": args.exact_rounds,
                          "device": args.device, "threads": args.threads}
                for mode in ("sequential", "batched"):
                    print(json.dumps({**common, "mode": mode, "seconds_per_trial_round": timings[mode]}), flush=True)
                print(json.dumps({**common, "mode": "ratio",
                                  "throughput_ratio": timings["sequential"] / timings["batched"]}), flush=True)
        return
    for kernel_name in args.kernels:
        c3, c4, lam = PAPER_CONSTANTS[kernel_name]
        kernel = Kernel.create(kernel_name, 1)
        for n in args.sizes:
            timings = {}
            runs = [("rls_kernel_exp3", RLSKernelExp3, RLSKernelExp3Params(c3=c3, c4=c4, lam=lam), args.rounds)]
            if n <= EXACT_LIMIT:
                runs.insert(0, ("kernel_exp3", KernelExp3, KernelExp3Params(c3=c3, c4=c4, lam=lam), args.exact_rounds))
            for name, cls, params, rounds in runs:
                result = measure(cls, params, kernel, n, args.horizon, rounds, args.device)
                timings[name] = result["seconds_per_round"]
                print(json.dumps({"case": f"{kernel_name}-n{n}", "algorithm": name, "n": n, "kernel": kernel_name,
                                  **result, "device": args.device, "threads": args.threads}), flush=True)
            if len(timings) == 2:
                print(json.dumps({"case": f"{kernel_name}-n{n}", "algorithm": "ratio", "n": n, "kernel": kernel_name,
                                  "seconds_per_round": timings["kernel_exp3"] / timings["rls_kernel_exp3"],
                                  "s_mean": None}), flush=True)


if __name__ == "__main__":
    main()
