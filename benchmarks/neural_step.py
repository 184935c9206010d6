"""Speed of a neural bandit round: banditsweep.core against the plain baseline (benchmarks/neural_baseline.py).

Prints one JSON line per case:
  {"case", "algorithm", "dataset", "history", "seconds_per_round", "baseline_seconds_per_round",
   "speedup", "gflops", "fraction_of_peak"}

Cases (shapes of the classification bandits of SPEC 1.2, width 100, J = 100, one hidden layer):
- ``short``: a T = 150 trial from an empty history ("history" = 150);
- ``round``: one round at a 1000-row history;
- ``batch10``: GA, 10 trials in one lockstep batch against the same 10 trials one after another
  (baseline = the sequential trials of banditsweep itself; "speedup" = throughput ratio).
Useful FLOPs are counted as in SPEC 1.7 (6 n (d' m + m) per forward+backward pass over n rows) and
divided by the time and by the fp32 matmul rate measured at the start of the run (the physical limit).
The baseline's round cost is a fixed part plus J identical gradient steps; it is measured with 2 and
6 steps and extrapolated to J, and for the short trial averaged over 5 evenly spaced history lengths
(its cost is linear in the history length). Contexts are random disjoint-encoded rows with the
dataset's shape; rewards are random 0/1 (the timing does not depend on the values).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from banditsweep.core import registry, seeding
from banditsweep.core.contracts import Problem

from neural_baseline import PlainBandit

SHAPES = {"covertype": (7, 54), "mnist": (10, 784)}
NAMES = {"ga": "neural_rbmle_ga", "pc": "neural_rbmle_pc", "ucb": "neural_ucb", "ts": "neural_ts"}


def matmul_peak(seconds: float = 1.0, size: int = 1024) -> float:
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.matmul(a, b)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        torch.matmul(a, b)
        count += 1
    return 2 * size ** 3 * count / (time.perf_counter() - start)


def round_flops(algorithm: str, K: int, d_block: int, rows: int, width: int, steps: int) -> float:
    """Useful FLOPs of one round at ``rows`` history rows (SPEC 1.7)."""
    per_row = d_block * width + width
    if algorithm == "ga":
        return 6 * steps * K * rows * per_row + 2 * K * (rows + 1) * per_row
    return 6 * steps * (rows + 1) * per_row + 6 * 2 * K * per_row


def contexts_stream(K: int, d_block: int, seed: int):
    rng = np.random.default_rng(seed)

    def draw():
        features = rng.standard_normal(d_block)
        features /= np.linalg.norm(features)
        contexts = np.zeros((K, K * d_block))
        for arm in range(K):
            contexts[arm, arm * d_block:(arm + 1) * d_block] = features
        return contexts, rng
    return draw


def make_policy(algorithm, K, d_block, horizon, seeds, params):
    cls = registry.algorithm_class(NAMES[algorithm])
    problem = Problem(num_arms=K, dim=K * d_block, horizon=horizon, disjoint_block=d_block)
    rngs = [seeding.stream(seed, seeding.POLICY_STREAM) for seed in seeds]
    return cls.batched([cls.Params(**params)] * len(seeds), problem, rngs)


def ours_trial(algorithm, K, d_block, horizon, params, trials=1) -> float:
    """Seconds for ``trials`` lockstep trials of ``horizon`` rounds."""
    policy = make_policy(algorithm, K, d_block, horizon, list(range(trials)), params)
    draws = [contexts_stream(K, d_block, seed) for seed in range(trials)]
    start = time.perf_counter()
    for t in range(1, horizon + 1):
        pairs = [draw() for draw in draws]
        contexts = np.stack([c for c, _ in pairs])
        arms = policy.select_batch(t, contexts)
        rewards = np.array([float(rng.random() < 0.5) for _, rng in pairs])
        policy.update_batch(t, contexts, arms, rewards)
    return time.perf_counter() - start


def ours_round(algorithm, K, d_block, history, params, repeats=2) -> float:
    policy = make_policy(algorithm, K, d_block, history + 10, [0], params)
    draw = contexts_stream(K, d_block, 0)
    rng = np.random.default_rng(1)
    for _ in range(history):
        contexts, _ = draw()
        arm = np.array([rng.integers(K)])
        policy.record(0, policy.active(contexts[None]), arm, np.array([float(rng.random() < 0.5)]))
    times = []
    for repeat in range(repeats):
        contexts, _ = draw()
        t = history + 1
        start = time.perf_counter()
        arms = policy.select_batch(t, contexts[None])
        policy.update_batch(t, contexts[None], arms, np.array([1.0]))
        times.append(time.perf_counter() - start)
        policy.history.counts[0, int(arms[0])] -= 1  # keep the history at ``history`` rows
        policy.history.rows -= 1
        policy.history.positions[0].pop()
    return min(times)


def baseline_round(algorithm, K, d_block, history, steps, width=100) -> float:
    """One baseline round at ``history`` rows, extrapolated from 2 and 6 gradient steps to ``steps``."""
    measured = {}
    for measure_steps in (2, 6):
        bandit = PlainBandit(algorithm, K, K * d_block, width=width, steps=measure_steps)
        draw = contexts_stream(K, d_block, 0)
        rows = [torch.as_tensor(draw()[0][i % K], dtype=torch.float32) for i in range(history)]
        if rows:
            bandit.X = torch.stack(rows)
            bandit.r = (torch.rand(history) < 0.5).float()
        contexts = torch.as_tensor(draw()[0], dtype=torch.float32)
        start = time.perf_counter()
        arm = bandit.select(history + 1, contexts)
        bandit.update(history + 1, contexts, arm, 1.0)
        measured[measure_steps] = time.perf_counter() - start
    per_step = max(0.0, (measured[6] - measured[2]) / 4)
    return max(measured[2] - 2 * per_step, 0.0) + steps * per_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", default="ga,pc,ucb,ts")
    parser.add_argument("--datasets", default="covertype,mnist")
    parser.add_argument("--cases", default="short,round,batch10")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    width, steps, short, history = 100, 100, 150, 1000
    params = {"width": width, "steps": steps}
    peak = matmul_peak()
    print(json.dumps({"case": "peak", "fp32_matmul_gflops": peak / 1e9, "threads": args.threads}), flush=True)
    cases = args.cases.split(",")

    def emit(case, algorithm, dataset, rows, ours, baseline, flops):
        print(json.dumps({"case": case, "algorithm": NAMES[algorithm], "dataset": dataset, "history": rows,
                          "seconds_per_round": ours, "baseline_seconds_per_round": baseline,
                          "speedup": baseline / ours, "gflops": flops / ours / 1e9,
                          "fraction_of_peak": flops / ours / peak}), flush=True)

    for dataset in args.datasets.split(","):
        K, d_block = SHAPES[dataset]
        for algorithm in args.algorithms.split(","):
            if "short" in cases:
                ours = ours_trial(algorithm, K, d_block, short, params) / short
                points = np.linspace(0, short - 1, 5).astype(int)
                baseline = float(np.mean([baseline_round(algorithm, K, d_block, int(n), steps) for n in points]))
                flops = np.mean([round_flops(algorithm, K, d_block, n, width, steps) for n in range(short)])
                emit("short", algorithm, dataset, short, ours, baseline, flops)
            if "round" in cases:
                ours = ours_round(algorithm, K, d_block, history, params)
                baseline = baseline_round(algorithm, K, d_block, history, steps)
                emit("round", algorithm, dataset, history, ours, baseline,
                     round_flops(algorithm, K, d_block, history, width, steps))
        if "batch10" in cases and "ga" in args.algorithms.split(","):
            sequential = sum(ours_trial("ga", K, d_block, short, params) for _ in range(10)) / (10 * short)
            batched = ours_trial("ga", K, d_block, short, params, trials=10) / (10 * short)
            flops = np.mean([round_flops("ga", K, d_block, n, width, steps) for n in range(short)])
            emit("batch10", "ga", dataset, short, batched, sequential, flops)


if __name__ == "__main__":
    main()
