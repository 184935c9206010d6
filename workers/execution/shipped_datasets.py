"""Dataset files that travel with a run: a node without a file its trials read gets the driver's copy
through Ray's object store.

The driver has made sure of every dataset its trials read (sweeps.planning.datasets, before anything runs) in
its data folder. It puts each file's bytes in the object store once (:func:`ship_datasets`) and every
trial actor gets the references. Before its trials read a dataset, an actor looks in its data folder
(the driver's ``--data-dir`` / ``$BANDITSWEEP_DATA`` when the driver has one, else its own
environment's, as before): a node that has every file reads its own, and fetches nothing. A node that
lacks one fetches the driver's bytes, once per node (kept in the node's temporary folder, named by
their SHA-256), and its actors read from a folder of links: the node's file where it has one, the
driver's copy where it has not. Nothing is written into a node's data folder.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray


@dataclass(frozen=True)
class ShippedDataset:
    name: str
    digest: str    # SHA-256 of the file's bytes
    data: Any      # the object ref of those bytes

    @property
    def file_name(self) -> str:
        return f"{self.name}.parquet"


def datasets_of(specs) -> list[str]:
    """The datasets trials (``TrialSpec``s) read, in first-use order."""
    return list(dict.fromkeys(spec.environment["dataset"] for spec in specs
                              if spec.environment.get("kind") == "classification"))


def ship_datasets(jobs, options, address: str | None) -> tuple[ShippedDataset, ...]:
    """The driver's dataset files (in ``options.data_dir``) the ``jobs`` read, put in the object store
    (the driver owns them: they live while the run does); none on an embedded Ray (no ``address``),
    whose one node is the driver's machine. A file the driver lacks is left out: the trials then say
    it is missing, as they would without this."""
    names = datasets_of(job.spec for job in jobs) if address else []
    if not names:
        return ()
    from banditsweep.core.neural.datasets import dataset_path

    shipped = []
    for name in names:
        try:
            content = dataset_path(name, options.data_dir).read_bytes()
        except OSError:
            continue
        shipped.append(ShippedDataset(name, hashlib.sha256(content).hexdigest(), ray.put(content)))
    return tuple(shipped)


def _node_copy(dataset: ShippedDataset) -> Path:
    """The driver's bytes of ``dataset`` as a file of this node, fetched once per node (a copy whose
    content is not the driver's, a write cut short, is fetched again)."""
    folder = Path(tempfile.gettempdir()) / f"banditsweep-{os.getuid()}-datasets" / dataset.digest[:32]
    path = folder / dataset.file_name
    try:
        if hashlib.sha256(path.read_bytes()).hexdigest() == dataset.digest:
            return path
    except OSError:
        pass
    content = ray.get(dataset.data)
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{dataset.file_name}.{os.getpid()}.tmp"
    partial.write_bytes(content)
    os.replace(partial, path)
    return path


def _links(directory: Path, shipped: tuple[ShippedDataset, ...]) -> Path:
    """A folder of links, one per shipped dataset, to the file in ``directory`` where there is one,
    else to the driver's copy; shared by the actors of this node that see the same files."""
    targets = {d.file_name: directory / d.file_name if (directory / d.file_name).is_file() else _node_copy(d)
               for d in shipped}
    key = hashlib.sha256(repr(sorted((name, str(path)) for name, path in targets.items())).encode()).hexdigest()
    folder = Path(tempfile.gettempdir()) / f"banditsweep-{os.getuid()}-datasets" / f"links-{key[:32]}"
    if not folder.is_dir():
        folder.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=".links-", dir=folder.parent))
        for name, path in targets.items():
            (partial / name).symlink_to(path)
        try:
            os.rename(partial, folder)
        except OSError:   # another actor of this node made it first
            for link in partial.iterdir():
                link.unlink()
            partial.rmdir()
    return folder


def provide_datasets(specs, shipped: tuple[ShippedDataset, ...]) -> None:
    """In a trial actor, before ``specs`` run: where its data folder lacks a file they read that the
    driver shipped, point the data folder of this process at the links (core.neural.datasets reads
    ``$BANDITSWEEP_DATA``)."""
    needed = set(datasets_of(specs))
    if not needed or not shipped:
        return
    from banditsweep.core.neural.datasets import DATA_ENV_VAR, data_directory

    directory = data_directory()
    if all((directory / d.file_name).is_file() for d in shipped if d.name in needed):
        return
    os.environ[DATA_ENV_VAR] = str(_links(directory, shipped))
