"""How a trial actor sets up the device and the threads its trials compute with: part of every
trial's code (workers.provenance.code_identity), since both can change its numbers (another device, another
summation order)."""

from __future__ import annotations

import sys


def trial_device(gpu_ids: list, node: str) -> tuple[str, str, str | None]:
    """(torch device, device label for the record, warning) for an actor Ray gave ``gpu_ids``: a
    GPU torch can use, else the CPU (saying why when Ray gave a GPU that torch cannot use: no CUDA
    build, no driver; failing every trial would help nobody)."""
    if not gpu_ids:
        return "cpu", "cpu", None
    import torch

    if torch.cuda.is_available():
        return "cuda", torch.cuda.get_device_name(), None
    return "cpu", "cpu", (f"node {node}: Ray assigned GPU {gpu_ids} but torch sees no CUDA device "
                          f"(torch {torch.__version__}); trials there run on the CPU (device=cpu)")


def configure_threads(threads: int) -> None:
    """Torch's intra-op threads follow the actor's CPUs; called once the algorithm's module (and
    torch, if it uses it) is imported, so that actors of torch-free algorithms never load torch."""
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(max(1, threads))
