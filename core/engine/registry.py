"""Name -> class registry for algorithms, environments and result sinks (lazy imports, as Ray Tune's
search registry).

A sweep spec names algorithms, environments and sinks only by these keys; a spec never carries code.
Adding an algorithm is one module plus one line here. Out-of-tree code registers through plugins:
modules named in ``BANDITSWEEP_PLUGINS`` (comma-separated) are imported on first lookup and may call
:func:`register_algorithm` / :func:`register_environment` / :func:`register_sink`; one that cannot be
imported raises :class:`PluginError`, one line naming the module and what went wrong. Sinks live in the
workers layer, which registers its own (``banditsweep.workers.mirrors.sinks``); this layer knows none of
them, only the table plugins add theirs to.
"""

from __future__ import annotations

import importlib
import os
import re

from banditsweep.core.engine.contracts import Environment, Policy

_ALGORITHMS: dict[str, str] = {
    "random": "banditsweep.core.kernel.algorithms.random_policy:RandomPolicy",
    "linucb": "banditsweep.core.baselines.linear:LinUCB",
    "lints": "banditsweep.core.baselines.linear:LinTS",
    "linrbmle": "banditsweep.core.baselines.linear:LinRBMLE",
    # NeuralRBMLE paper (SPEC 1.3-1.5)
    "neural_rbmle_ga": "banditsweep.core.neural.algorithms.neural_rbmle_ga:NeuralRBMLEGA",
    "neural_rbmle_pc": "banditsweep.core.neural.algorithms.neural_rbmle_pc:NeuralRBMLEPC",
    "neural_ucb": "banditsweep.core.neural.algorithms.neural_ucb:NeuralUCB",
    "neural_ts": "banditsweep.core.neural.algorithms.neural_ts:NeuralTS",
    "deep_fpl": "banditsweep.core.neural.algorithms.deep_fpl:DeepFPL",
    "bootstrapped_nn": "banditsweep.core.neural.algorithms.bootstrapped_nn:BootstrappedNN",
    "neural_eps_greedy": "banditsweep.core.neural.algorithms.neural_eps_greedy:NeuralEpsGreedy",
    # Adversarial kernelized bandits (SPEC 3), in the order the kernel paper reports them (SPEC 3.7)
    "apg_exp3": "banditsweep.core.kernel.algorithms.apg_exp3:APGExp3",
    "kernel_exp3": "banditsweep.core.kernel.algorithms.kernel_exp3:KernelExp3",
    "rls_kernel_exp3": "banditsweep.core.kernel.algorithms.rls_kernel_exp3:RLSKernelExp3",
    "rls_kernel_exp3_amvr": "banditsweep.core.kernel.algorithms.rls_kernel_exp3:RLSKernelExp3AMVR",
}

_ENVIRONMENTS: dict[str, str] = {
    "synthetic": "banditsweep.core.baselines.synthetic:SyntheticBandit",
    "classification": "banditsweep.core.neural.classification:ClassificationBandit",
    "adversarial_kernel": "banditsweep.core.kernel.adversarial_kernel:AdversarialKernelBandit",
    "kernel_lower_bound": "banditsweep.core.kernel.kernel_lower_bound:KernelLowerBound",
}

# The names this package itself gives: a class registered later may not take them.
_BUILTIN = {"algorithm": frozenset(_ALGORITHMS), "environment": frozenset(_ENVIRONMENTS)}

# Mirrors of a sweep's Parquet record of truth: filled by the workers layer and by plugins.
_SINKS: dict[str, str | type] = {}

_plugins_loaded: set[str] = set()


def register_algorithm(name: str, target: str | type[Policy]) -> None:
    """Register ``name`` -> ``"module:Class"`` (or the class itself)."""
    _ALGORITHMS[name] = target  # type: ignore[assignment]


def register_environment(name: str, target: str | type[Environment]) -> None:
    _ENVIRONMENTS[name] = target  # type: ignore[assignment]


def is_builtin(kind: str, name: str) -> bool:
    """Whether ``name`` is one of this package's own algorithms (``kind`` "algorithm") or environment kinds."""
    return name in _BUILTIN[kind]


def register_sink(name: str, target: str | type) -> None:
    """Register a result sink ``name`` -> ``"module:Class"`` (or the class itself)."""
    _SINKS[name] = target  # type: ignore[assignment]


_plugins_seen: list[str | None] = [None]   # the value of $BANDITSWEEP_PLUGINS last loaded

PLUGINS_ENV_VAR = "BANDITSWEEP_PLUGINS"
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


class PluginError(Exception):
    """A module named in ``$BANDITSWEEP_PLUGINS`` cannot be imported: it is not a module name, no
    module of that name is found, or importing it raised. ``str(error)`` is one line naming the
    variable, the module and the problem (the CLI maps it to bad input, exit 2)."""

    def __init__(self, module: str, problem: str):
        self.variable, self.module, self.problem = PLUGINS_ENV_VAR, module, problem
        shown = repr(module if len(module) <= 100 else module[:99] + "…")
        super().__init__(f"${PLUGINS_ENV_VAR}: {shown}: {problem}")


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _import_plugin(module: str) -> None:
    if not _MODULE_NAME.fullmatch(module):
        raise PluginError(module, "not a module name; the variable names importable modules (on PYTHONPATH), "
                                  "separated by commas, e.g. my_plugins,pkg.more_plugins")
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        if missing and (module == missing or module.startswith(missing + ".")):
            raise PluginError(module, f"no module of that name can be imported (ModuleNotFoundError: "
                                      f"{_one_line(error)}); put its folder on PYTHONPATH or fix the name") from error
        raise PluginError(module, f"the plugin module failed on import: ModuleNotFoundError: "
                                  f"{_one_line(error)}") from error
    except (Exception, SystemExit) as error:   # whatever a plugin's import raises is its own error
        detail = f"{type(error).__name__}: {_one_line(error)}" if str(error) else type(error).__name__
        raise PluginError(module, f"the plugin module failed on import: {detail}") from error


def _load_plugins() -> None:
    wanted = os.environ.get(PLUGINS_ENV_VAR, "")
    if wanted == _plugins_seen[0]:
        return   # asked once per trial of a sweep expanded: the same value needs no second look
    for module in filter(None, (m.strip() for m in wanted.split(","))):
        if module not in _plugins_loaded:
            _import_plugin(module)   # PluginError: the next lookup tries again (and fails the same way)
            _plugins_loaded.add(module)
    _plugins_seen[0] = wanted


def _resolve(table: dict, name: str, what: str):
    _load_plugins()
    if name not in table:
        raise KeyError(f"unknown {what} {name!r}; known: {', '.join(sorted(table))}")
    target = table[name]
    if isinstance(target, str):
        module, _, attr = target.partition(":")
        target = getattr(importlib.import_module(module), attr)
        table[name] = target
    return target


def algorithm_class(name: str) -> type[Policy]:
    return _resolve(_ALGORITHMS, name, "algorithm")


def environment_class(name: str) -> type[Environment]:
    return _resolve(_ENVIRONMENTS, name, "environment kind")


def algorithm_names() -> list[str]:
    _load_plugins()
    return sorted(_ALGORITHMS)


def registered_algorithms() -> list[str]:
    """The algorithms' names in the order they were registered: the table above, then the plugins'."""
    _load_plugins()
    return list(_ALGORITHMS)


def environment_names() -> list[str]:
    _load_plugins()
    return sorted(_ENVIRONMENTS)


# The package's library modules whose classes a state holds (core.engine.state_codec): the round loops, the
# trials, their environments, policies, networks and kernels all live in banditsweep.core. The rest of
# the installed package root (tests/, benchmarks/ with their import-time side effects, sweeps/,
# workers/) is never named by a state.
_LIBRARY = "banditsweep.core"


def trusted_module(module: str) -> bool:
    """Whether a stored state may name classes of ``module`` (core.engine.state_codec): banditsweep's library
    (``banditsweep.core`` and below), the plugins named in ``BANDITSWEEP_PLUGINS`` and the modules of
    registered algorithms and environments: code this installation runs anyway. Nothing is imported
    here but those plugins."""
    if not isinstance(module, str):
        return False
    if module == _LIBRARY or module.startswith(_LIBRARY + "."):
        return True
    _load_plugins()
    if module in _plugins_loaded:
        return True
    for target in (*_ALGORITHMS.values(), *_ENVIRONMENTS.values()):
        if (target.partition(":")[0] if isinstance(target, str) else target.__module__) == module:
            return True
    return False


def registered_class(module: str, qualname: str) -> type | None:
    """The class ``module``'s ``qualname`` as the registered algorithms and environments know it: one
    of them (registered as a class, or already resolved), or a class their own code names (their
    ``Params`` or ``Config`` model, a helper their methods use); the last registered where several
    are. A class registered where it was defined and shipped to a worker by value (a notebook's
    ``__main__``) is found here only: the worker's own ``__main__`` does not hold it."""
    head, *rest = qualname.split(".")
    found = None
    for target in (*_ALGORITHMS.values(), *_ENVIRONMENTS.values()):
        if not isinstance(target, type):
            continue
        for cls in target.__mro__:
            if cls.__module__ != module:
                continue
            spaces = [{cls.__name__: cls},   # the class, and the classes it holds (its Params model)
                      {value.__name__: value for value in vars(cls).values() if isinstance(value, type)}]
            for value in vars(cls).values():   # the globals its functions see (cloudpickle keeps those they use)
                names = getattr(getattr(value, "__func__", value), "__globals__", None)
                if isinstance(names, dict):
                    spaces.append(names)
            for space in spaces:
                candidate = space.get(head)
                for part in rest:
                    candidate = vars(candidate).get(part) if isinstance(candidate, type) else None
                if (isinstance(candidate, type) and candidate.__module__ == module
                        and candidate.__qualname__ == qualname):
                    found = candidate
                    break
    return found


def sink_class(name: str) -> type:
    return _resolve(_SINKS, name, "sink")


def sink_names() -> list[str]:
    _load_plugins()
    return sorted(_SINKS)
