"""Speed of a neural bandit round: banditsweep.core against the plain baseline (benchmarks/neural_baseline.py).

Prints one JSON line per case:
  {"case", "algorithm", "dataset", "history", "seconds_per_round", "baseline_seconds_per_round",
   "speedup", "gflops", "fraction_of_peak"}
(plus "threads" / "baseline_threads" and "repeats"), after a first line with the machine's fp32 matmul
rate ({"case": "peak", ...}).

Cases (shapes of the classification bandits of SPEC 1.2, width m = 100, J = 100, one hidden layer):
- ``short``: a T = 150 trial from an empty history ("history" = 150), seconds per round of the whole trial;
- ``round``: one round (select + update) at a 1000-row history;
- ``batch10``: 10 trials (seeds 0-9) in one lockstep batch; its baseline is the same 10 trials one after
  another, i.e. 10 x the single-trial time of the ``short`` case measured in the same repeats
  ("seconds_per_round" is the batch's time per round and trial; "speedup" = the throughput ratio).

Timing. The machine may be shared: every repeat measures ours and the baseline back to back, and the
figures are medians over the repeats. The baseline (a plain implementation, as a user would write it)
is measured with 1 thread and with ``--baseline-threads`` (default: all cores) and the faster median is
reported; ours likewise with ``banditsweep.core.neural.training.intra_op_threads``' advice and with all cores
(or only ``--threads``): with several threads, core.neural.training splits GA's K independent optimisations
(or a batch's trials) over them once a step is large enough. The baseline's
round cost is a fixed part plus J identical gradient steps: it is measured with 2 and 6 steps and
extrapolated to J; for the short trial it is averaged over 5 evenly spaced history lengths (its cost is
linear in the history length). Contexts are random disjoint-encoded rows with the dataset's shape and
rewards random 0/1 (the timing does not depend on the values).

FLOPs. Useful FLOPs are counted as in SPEC 1.7: 6 n (d' m + m) per forward + backward pass over n rows,
J K passes over the history for GA (+ the index), J passes for PC / NeuralUCB / NeuralTS (+ 2 K one-row
passes for the per-arm gradients). "fraction_of_peak" = FLOPs / time / the fp32 matmul rate measured at
the start of the run on all cores of the device (the physical limit).

Runs with torch and numpy only: ``python benchmarks/neural_step.py [--quick] [--device cpu|cuda]``.

Per-shape table (``--table``): one round (select + update) at a history of 500, 2000 and 8000 rows on
the shapes of the six datasets of core.neural.datasets' catalogue (d', K), for NeuralRBMLE-GA, -PC, NeuralUCB,
NeuralTS, DeepFPL and BootstrappedNN at their default parameters (m = 100, J = 100), at ``--threads``
(default 1) intra-op threads. A round whose J = 100 steps would take more than ``--full-seconds`` is
measured with 2 and 6 steps and extrapolated to J (its cost is a fixed part plus J equal steps); the
others are timed with all J steps (median of ``--repeats``). Each JSON line has "seconds_per_round"
(wall) and "cpu_seconds_per_round" (the process's CPU time), "gflops" (useful FLOPs as above, per
CPU second: a shared machine inflates the wall time, not the work) and "fraction_of_probe" = that
rate / a 1-thread-per-thread fp32 matmul probe's rate (2048 x 2048 products, also per CPU second),
measured at the same thread count before each dataset's cases; "load" is os.getloadavg()[0] when the
case ended (and "probe_load" when the probe ran). DeepFPL counts as PC without the per-arm gradients;
BootstrappedNN as q = 10 networks each passing over every history row (the masked rows are computed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
import torch

from banditsweep.core.engine import registry, seeding
from banditsweep.core.engine.contracts import Problem
from banditsweep.core.neural.training import intra_op_threads

from neural_baseline import PlainBandit

from banditsweep.core.neural.datasets import DATASETS

#: (K, d') of every dataset of the catalogue (SPEC 1.2).
SHAPES = {name: (info.classes, info.features) for name, info in DATASETS.items()}
NAMES = {"ga": "neural_rbmle_ga", "pc": "neural_rbmle_pc", "ucb": "neural_ucb", "ts": "neural_ts",
         "fpl": "deep_fpl", "boot": "bootstrapped_nn"}


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def matmul_peak(device: str, seconds: float = 1.0, size: int = 2048) -> float:
    """fp32 matmul FLOP/s of the device (all its threads on a CPU)."""
    a, b = torch.randn(size, size, device=device), torch.randn(size, size, device=device)
    torch.matmul(a, b)
    synchronize(device)
    best = 0.0
    for _ in range(3):
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / 3:
            torch.matmul(a, b)
            count += 1
        synchronize(device)
        best = max(best, 2 * size ** 3 * count / (time.perf_counter() - start))
    return best


def matmul_probe(threads: int, seconds: float = 1.0, size: int = 2048) -> float:
    """fp32 matmul FLOPs per second of the process's CPU time, at ``threads`` intra-op threads, divided by
    ``threads``: what one thread does per CPU second (robust to other processes sharing the cores)."""
    with Threads(threads):
        a, b = torch.randn(size, size), torch.randn(size, size)
        torch.matmul(a, b)
        best = 0.0
        for _ in range(3):
            count, start, cpu = 0, time.perf_counter(), time.process_time()
            while time.perf_counter() - start < seconds / 3:
                torch.matmul(a, b)
                count += 1
            best = max(best, 2 * size ** 3 * count / max(time.process_time() - cpu, 1e-9))
    return best


def round_flops(algorithm: str, K: int, d_block: int, rows: int, width: int, steps: int, q: int = 10) -> float:
    """Useful FLOPs of one round at ``rows`` history rows (SPEC 1.7; DeepFPL and BootstrappedNN: module docstring)."""
    per_row = d_block * width + width
    if algorithm == "ga":
        return 6 * steps * K * rows * per_row + 2 * K * (rows + 1) * per_row
    if algorithm == "fpl":
        return 6 * steps * (rows + 1) * per_row + 2 * K * per_row
    if algorithm == "boot":
        return 6 * steps * q * (rows + 1) * per_row + 2 * q * K * per_row
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


def make_policy(algorithm, K, d_block, horizon, seeds, params, device):
    cls = registry.algorithm_class(NAMES[algorithm])
    problem = Problem(num_arms=K, dim=K * d_block, horizon=horizon, disjoint_block=d_block)
    rngs = [seeding.stream(seed, seeding.POLICY_STREAM) for seed in seeds]
    return cls.create_batch([cls.Params(**params)] * len(seeds), problem, rngs, device=device)


class Threads:
    """Run a block with a given intra-op thread count (this process owns its threads)."""

    def __init__(self, count: int):
        self.count = count

    def __enter__(self):
        self.previous = torch.get_num_threads()
        torch.set_num_threads(self.count)

    def __exit__(self, *exc):
        torch.set_num_threads(self.previous)


def ours_trial(algorithm, K, d_block, horizon, params, device, trials=1) -> float:
    """Seconds for ``trials`` lockstep trials of ``horizon`` rounds."""
    policy = make_policy(algorithm, K, d_block, horizon, list(range(trials)), params, device)
    draws = [contexts_stream(K, d_block, seed) for seed in range(trials)]
    start = time.perf_counter()
    for t in range(1, horizon + 1):
        pairs = [draw() for draw in draws]
        contexts = np.stack([c for c, _ in pairs])
        arms = policy.select_batch(t, contexts).arms
        rewards = np.array([float(rng.random() < 0.5) for _, rng in pairs])
        policy.update_batch(t, contexts, arms, rewards)
    synchronize(device)
    return time.perf_counter() - start


def ours_round_policy(algorithm, K, d_block, history, params, device):
    """A policy with ``history`` recorded rows (arms drawn uniformly) and the context stream of its next rounds."""
    policy = make_policy(algorithm, K, d_block, history + 10, [0], params, device)
    draw = contexts_stream(K, d_block, 0)
    rng = np.random.default_rng(1)
    for _ in range(history):
        contexts, _ = draw()
        arm = np.array([rng.integers(K)])
        policy.record(0, policy.active(contexts[None]), arm, np.array([float(rng.random() < 0.5)]))
    return policy, draw


def ours_round(policy, draw, history, device) -> float:
    """One round at ``history`` rows; the history is restored afterwards."""
    contexts, _ = draw()
    t = history + 1
    start = time.perf_counter()
    arms = policy.select_batch(t, contexts[None]).arms
    policy.update_batch(t, contexts[None], arms, np.array([1.0]))
    synchronize(device)
    seconds = time.perf_counter() - start
    policy.history.counts[0, int(arms[0])] -= 1  # keep the history at ``history`` rows
    policy.history.rows -= 1
    policy.history.positions[0].pop()
    return seconds


def baseline_round(algorithm, K, d_block, history, steps, device, width=100) -> float:
    """One baseline round at ``history`` rows, extrapolated from 2 and 6 gradient steps to ``steps``."""
    measured = {}
    for measure_steps in (2, 6):
        bandit = PlainBandit(algorithm, K, K * d_block, width=width, steps=measure_steps, device=device)
        draw = contexts_stream(K, d_block, 0)
        rows = [torch.as_tensor(draw()[0][i % K], dtype=torch.float32) for i in range(history)]
        if rows:
            bandit.X = torch.stack(rows).to(device)
            bandit.r = (torch.rand(history) < 0.5).float().to(device)
        contexts = torch.as_tensor(draw()[0], dtype=torch.float32, device=device)
        synchronize(device)
        start = time.perf_counter()
        arm = bandit.select(history + 1, contexts)
        bandit.update(history + 1, contexts, arm, 1.0)
        synchronize(device)
        measured[measure_steps] = time.perf_counter() - start
    per_step = max(0.0, (measured[6] - measured[2]) / 4)
    return max(measured[2] - 2 * per_step, 0.0) + steps * per_step


def with_steps(policy, steps: int) -> None:
    """Set the gradient steps J of a policy's trials (the history and networks stay)."""
    policy.params_list = [params.model_copy(update={"steps": steps}) for params in policy.params_list]
    policy.params = policy.params_list[0]


def timed_round(policy, draw, history, device) -> tuple[float, float]:
    """(wall, CPU) seconds of one round at ``history`` rows (as :func:`ours_round`)."""
    cpu = time.process_time()
    wall = ours_round(policy, draw, history, device)
    return wall, time.process_time() - cpu


def table(args) -> None:
    """The per-shape table (module docstring): one JSON line per (dataset, algorithm, history)."""
    device, threads, width, steps = args.device, args.threads or 1, 100, 100
    histories = [int(n) for n in args.histories.split(",")]
    torch.set_num_threads(threads)
    for dataset in args.datasets.split(","):
        K, d_block = SHAPES[dataset]
        probe = matmul_probe(threads)
        probe_load = os.getloadavg()[0]
        print(json.dumps({"case": "probe", "dataset": dataset, "threads": threads, "fp32_matmul_gflops_per_cpu_second":
                          probe / 1e9, "load": probe_load}), flush=True)
        for algorithm in args.algorithms.split(","):
            for history in histories:
                flops = round_flops(algorithm, K, d_block, history, width, steps)
                policy, draw = ours_round_policy(algorithm, K, d_block, history, {"width": width, "steps": steps}, device)
                estimate = flops / (args.assumed_gflops * 1e9)
                if estimate > args.full_seconds:
                    measured = {}
                    for few in (2, 6):
                        with_steps(policy, few)
                        timed_round(policy, draw, history, device)  # warm: buffers, caches
                        measured[few] = timed_round(policy, draw, history, device)
                    per_step = [max(0.0, (measured[6][i] - measured[2][i]) / 4) for i in range(2)]
                    wall, cpu = (max(measured[2][i] - 2 * per_step[i], 0.0) + steps * per_step[i] for i in range(2))
                    method = "extrapolated from 2 and 6 steps"
                else:
                    timed_round(policy, draw, history, device)
                    samples = [timed_round(policy, draw, history, device) for _ in range(args.repeats)]
                    wall = statistics.median(sample[0] for sample in samples)
                    cpu = statistics.median(sample[1] for sample in samples)
                    method = f"median of {args.repeats} rounds"
                rate = flops / max(cpu, 1e-12)
                print(json.dumps({"case": "table", "algorithm": NAMES[algorithm], "dataset": dataset, "K": K,
                                  "d_block": d_block, "history": history, "seconds_per_round": wall,
                                  "cpu_seconds_per_round": cpu, "gflops": rate / 1e9,
                                  "fraction_of_probe": rate / probe, "threads": threads, "load": os.getloadavg()[0],
                                  "probe_load": probe_load, "method": method}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", default="ga,pc,ucb,ts")
    parser.add_argument("--datasets", default="covertype,mnist")
    parser.add_argument("--cases", default="short,round,batch10")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--quick", action="store_true", help="1 repeat, T = 30 for the trials (a smoke run)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats per case (median)")
    parser.add_argument("--threads", type=int, default=0,
                        help="intra-op threads for banditsweep (0: core.neural.training.intra_op_threads)")
    parser.add_argument("--baseline-threads", type=int, default=0,
                        help="threads tried for the baseline besides 1 (0: all cores)")
    parser.add_argument("--table", action="store_true", help="the per-shape table instead of the cases above")
    parser.add_argument("--histories", default="500,2000,8000", help="--table: history lengths")
    parser.add_argument("--full-seconds", type=float, default=1.0,
                        help="--table: rounds estimated to take longer are extrapolated from 2 and 6 steps")
    parser.add_argument("--assumed-gflops", type=float, default=20.0,
                        help="--table: the rate that estimate assumes")
    args = parser.parse_args()
    if args.table:
        if args.algorithms == parser.get_default("algorithms"):
            args.algorithms = ",".join(NAMES)
        if args.datasets == parser.get_default("datasets"):
            args.datasets = ",".join(SHAPES)
        table(args)
        return
    device = args.device
    cores = len(os.sched_getaffinity(0))
    repeats = 1 if args.quick else args.repeats
    width, steps, history = 100, 100, 1000
    short = 30 if args.quick else 150
    params = {"width": width, "steps": steps}
    torch.set_num_threads(cores)
    peak = matmul_peak(device)
    print(json.dumps({"case": "peak", "device": device, "fp32_matmul_gflops": peak / 1e9, "threads": cores}),
          flush=True)
    cases = args.cases.split(",")
    baseline_threads = sorted({1, args.baseline_threads or cores})

    def ours_threads(algorithm, K, d_block, rows, groups=1):
        if args.threads:
            return args.threads
        return intra_op_threads(rows, d_block, width, K if algorithm == "ga" else 1, groups, cores)

    def emit(case, algorithm, dataset, rows, ours, baseline, flops, threads, base_threads):
        print(json.dumps({"case": case, "algorithm": NAMES[algorithm], "dataset": dataset, "history": rows,
                          "seconds_per_round": ours, "baseline_seconds_per_round": baseline,
                          "speedup": baseline / ours, "gflops": flops / ours / 1e9,
                          "fraction_of_peak": flops / ours / peak, "threads": threads,
                          "baseline_threads": base_threads, "repeats": repeats}), flush=True)

    def best(samples: dict[int, list[float]]):
        medians = {threads: statistics.median(values) for threads, values in samples.items()}
        threads = min(medians, key=medians.get)
        return medians[threads], threads

    def candidates(advised: int) -> list[int]:
        """Thread counts tried for ours: the advised one and all cores (the faster median is reported)."""
        return [args.threads] if args.threads else sorted({advised, cores})

    for dataset in args.datasets.split(","):
        K, d_block = SHAPES[dataset]
        for algorithm in args.algorithms.split(","):
            short_flops = float(np.mean([round_flops(algorithm, K, d_block, n, width, steps) for n in range(short)]))
            alone_options = candidates(ours_threads(algorithm, K, d_block, short / 2))
            batch_options = candidates(ours_threads(algorithm, K, d_block, short / 2, groups=10))
            if "short" in cases or "batch10" in cases:
                ours = {threads: [] for threads in alone_options}
                batched = {threads: [] for threads in batch_options}
                base = {threads: [] for threads in baseline_threads}
                points = np.linspace(0, short - 1, 5).astype(int)
                for _ in range(repeats):
                    for threads in alone_options:
                        with Threads(threads):
                            ours[threads].append(ours_trial(algorithm, K, d_block, short, params, device) / short)
                    if "batch10" in cases:
                        for threads in batch_options:
                            with Threads(threads):
                                batched[threads].append(
                                    ours_trial(algorithm, K, d_block, short, params, device, 10) / (10 * short))
                    if "short" in cases:
                        for threads in baseline_threads:
                            with Threads(threads):
                                base[threads].append(float(np.mean(
                                    [baseline_round(algorithm, K, d_block, int(n), steps, device) for n in points])))
                alone, alone_threads = best(ours)
                if "short" in cases:
                    baseline, chosen = best(base)
                    emit("short", algorithm, dataset, short, alone, baseline, short_flops, alone_threads, chosen)
                if "batch10" in cases:
                    batch, batch_threads = best(batched)
                    emit("batch10", algorithm, dataset, short, batch, alone, short_flops, batch_threads,
                         alone_threads)
            if "round" in cases:
                options = candidates(ours_threads(algorithm, K, d_block, history))
                with Threads(options[0]):
                    policy, draw = ours_round_policy(algorithm, K, d_block, history, params, device)
                ours, base = {t: [] for t in options}, {t: [] for t in baseline_threads}
                for _ in range(repeats):
                    for threads in options:
                        with Threads(threads):
                            ours[threads].append(ours_round(policy, draw, history, device))
                    for base_threads in baseline_threads:
                        with Threads(base_threads):
                            base[base_threads].append(baseline_round(algorithm, K, d_block, history, steps, device))
                mine, threads = best(ours)
                baseline, chosen = best(base)
                emit("round", algorithm, dataset, history, mine, baseline,
                     round_flops(algorithm, K, d_block, history, width, steps), threads, chosen)


if __name__ == "__main__":
    main()
