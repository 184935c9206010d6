"""banditsweep: distributed sweeps of bandit experiments.

Three layers, imports one way: ``banditsweep.core`` (the science) <- ``banditsweep.workers``
(Ray execution and result sinks) <- ``banditsweep.sweeps`` (specs, CLI, aggregation).

``banditsweep.run(spec, ...)``, ``plan`` and ``status`` are the commands from Python (sweeps.api.functions), with
typed results; ``register_algorithm(name, cls)`` / ``register_environment`` make a class defined in a
notebook or script part of the specs run from it (it travels to every Ray worker).
``banditsweep.load(results_root, sweep)`` reads a sweep's Parquet results as ``(trials, curves)``;
``banditsweep.compare(results_root, sweep)`` gives the report's statistics of them (intervals, paired
comparisons, the aggregates across environments).
"""

import os as _os

__version__ = "0.1.0"
__all__ = ["compare", "load", "plan", "register_algorithm", "register_environment", "report", "run", "status",
           "verify"]


def _submitted_tree() -> str | None:
    """The checkout of this project that a Ray job was submitted with, when this process is that
    job's entrypoint: ``ray job submit --working-dir <checkout> -- banditsweep run ...`` runs the
    entrypoint in a copy of the checkout (its working directory). None anywhere else."""
    if "RAY_JOB_CONFIG_JSON_ENV_VAR" not in _os.environ:   # set by Ray for a job's entrypoint only
        return None
    tree = _os.getcwd()
    try:
        with open(_os.path.join(tree, "pyproject.toml"), encoding="utf-8") as file:
            named = 'name = "banditsweep"' in file.read()
    except OSError:
        return None
    if not (named and _os.path.isfile(_os.path.join(tree, "__init__.py"))):
        return None
    return _os.path.realpath(tree)


# The submitted code is the code that runs: a job's entrypoint imports the submitted copy's modules,
# not the installed package's (the job's workers get the same copy as the runtime env's py_modules,
# workers.execution.ray_connection.RayConnection).
SUBMITTED_TREE = _submitted_tree()
if SUBMITTED_TREE and SUBMITTED_TREE != _os.path.dirname(_os.path.realpath(__file__)):
    __path__ = [SUBMITTED_TREE]
    __file__ = _os.path.join(SUBMITTED_TREE, "__init__.py")
else:
    SUBMITTED_TREE = None


def load(results_root, sweep=None, *, algorithms=None, environments=None, rounds=None, columns=None):
    """The results of a sweep as pandas DataFrames ``(trials, curves)``, or a part of them
    (``algorithms``, ``environments``, ``rounds``, ``columns``); see
    :func:`banditsweep.workers.storage.store.load`."""
    from banditsweep.workers import load as load_results

    return load_results(results_root, sweep, algorithms=algorithms, environments=environments, rounds=rounds,
                        columns=columns)


def compare(results_root, sweep=None, choose_on_seeds=None, same_seeds=False):
    """The report's statistics of a sweep's finished trials (grid points chosen on half the seeds and
    judged on the others where there are seeds to spare); see :func:`banditsweep.sweeps.results.compare.compare`."""
    from banditsweep.sweeps.results.compare import compare as compare_results

    return compare_results(results_root, sweep, choose_on_seeds, same_seeds)


def run(spec, **options):
    """Run every trial of ``spec`` (a path, YAML text or a dict) not yet finished, as ``banditsweep
    run`` does; the options are the command line's. See :func:`banditsweep.sweeps.api.functions.run`."""
    from banditsweep.sweeps.api.functions import run as run_sweep

    return run_sweep(spec, **options)


def plan(spec, **options):
    """What running ``spec`` will cost, as ``banditsweep plan`` says;
    see :func:`banditsweep.sweeps.api.functions.plan`."""
    from banditsweep.sweeps.api.functions import plan as plan_sweep

    return plan_sweep(spec, **options)


def status(spec, **options):
    """Where ``spec``'s trials stand, as ``banditsweep status`` says;
    see :func:`banditsweep.sweeps.api.functions.status`."""
    from banditsweep.sweeps.api.functions import status as sweep_status

    return sweep_status(spec, **options)


def report(spec, **options):
    """The tables and figures of ``spec``'s results, as ``banditsweep report`` writes them; see
    :func:`banditsweep.sweeps.api.functions.report`."""
    from banditsweep.sweeps.api.functions import report as report_sweep

    return report_sweep(spec, **options)


def verify(spec, **options):
    """A sample of ``spec``'s finished trials re-run and compared, as ``banditsweep verify`` does; see
    :func:`banditsweep.sweeps.api.functions.verify`."""
    from banditsweep.sweeps.api.functions import verify as verify_sweep

    return verify_sweep(spec, **options)


def register_algorithm(name, cls):
    """Make ``cls`` (a policy class, e.g. defined in a notebook) the algorithm ``name`` of the specs
    run from this process, on every Ray worker too; see :func:`banditsweep.sweeps.api.functions.register_algorithm`."""
    from banditsweep.sweeps.api.functions import register_algorithm as register

    register(name, cls)


def register_environment(name, cls):
    """Make ``cls`` (an environment class) the environment kind ``name``; see
    :func:`banditsweep.sweeps.api.functions.register_environment`."""
    from banditsweep.sweeps.api.functions import register_environment as register

    register(name, cls)
