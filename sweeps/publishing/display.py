"""How figures and papers name things: algorithms by their usual names, and grid points in math —
``ν = 10⁻³`` in a figure (Unicode, any font shows it), ``$\\nu = 10^{-3}$`` in LaTeX."""

from __future__ import annotations

import math

from banditsweep.sweeps.publishing.tables import latex_escape

# The usual names of the registered algorithms, for figures and LaTeX tables of a spec that gives
# no ``label`` (a label the spec gives is used as it is).
DISPLAY_NAMES = {
    "random": "Random", "linucb": "LinUCB", "lints": "LinTS", "linrbmle": "LinRBMLE",
    "neural_rbmle_ga": "NeuralRBMLE-GA", "neural_rbmle_pc": "NeuralRBMLE-PC", "neural_ucb": "NeuralUCB",
    "neural_ts": "NeuralTS", "deep_fpl": "DeepFPL", "bootstrapped_nn": "BootstrappedNN",
    "neural_eps_greedy": "Neural ε-greedy", "kernel_exp3": "Kernelized Exp3",
    "rls_kernel_exp3": "RLS-Kernelized Exp3", "rls_kernel_exp3_amvr": "RLS-Kernelized Exp3 (AMVR)",
    "apg_exp3": "APG-Exp3",
}

# The papers' symbols of the parameters a grid varies: (Unicode, LaTeX math). Others keep their name.
SYMBOLS = {
    "nu": ("ν", r"\nu"), "lam": ("λ", r"\lambda"), "lr": ("η", r"\eta"), "epsilon": ("ε", r"\varepsilon"),
    "zeta": ("ζ", r"\zeta"), "beta": ("β", r"\beta"), "delta": ("δ", r"\delta"), "steps": ("J", "J"),
    "width": ("m", "m"), "depth": ("L", "L"), "q": ("q", "q"), "p": ("p", "p"),
    "c1": ("c₁", "c_1"), "c2": ("c₂", "c_2"), "c3": ("c₃", "c_3"), "c4": ("c₄", "c_4"),
}
SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


def display_name(label: str, algorithm: str | None = None) -> str:
    """The name a paper shows: the spec's label, or the algorithm's usual name when the label is
    just its registry name."""
    if algorithm is not None and label != algorithm:
        return label
    return DISPLAY_NAMES.get(label, label)


def _scientific(value: float) -> tuple[str, int] | None:
    """(mantissa, exponent) of a value shown as a power of ten (below 0.01, from 10⁴ up); the
    mantissa is empty for an exact power (``10⁻³``); None for a value shown as it is."""
    if value == 0 or not math.isfinite(value) or 1e-2 <= abs(value) < 1e4:
        return None
    mantissa, exponent = f"{value:.3e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return ("" if mantissa == "1" else "−" if mantissa == "-1" else mantissa), int(exponent)


def _plain(value) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def number_text(value) -> str:
    """``10⁻³``, ``2.5×10⁻⁴``, ``0.1``, ``100``: a grid value in a figure."""
    scientific = _scientific(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if scientific is None:
        return _plain(value)
    mantissa, exponent = scientific
    power = "10" + str(exponent).translate(SUPERSCRIPT)
    return f"{mantissa}×{power}" if mantissa not in ("", "−") else f"{mantissa}{power}"


def number_latex(value) -> str:
    """``10^{-3}``, ``2.5 \\times 10^{-4}``, ``0.1``: a grid value in LaTeX math."""
    scientific = _scientific(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if scientific is None:
        return _plain(value)
    mantissa, exponent = scientific
    power = f"10^{{{exponent}}}"
    return {"": power, "−": f"-{power}"}.get(mantissa, rf"{mantissa} \times {power}")


def grid_point_text(point: dict) -> str:
    """``ν = 10⁻³, λ = 1``: the grid values of an algorithm's chosen point, for a figure."""
    return ", ".join(f"{SYMBOLS.get(key, (key,))[0]} = {number_text(value)}" for key, value in point.items())


def grid_point_latex(point: dict) -> str:
    """``$\\nu = 10^{-3}$, $\\lambda = 1$``: the same in LaTeX (text values, escaped, outside math)."""
    parts = []
    for key, value in point.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            symbol = SYMBOLS[key][1] if key in SYMBOLS else rf"\mathrm{{{latex_escape(key)}}}"
            parts.append(f"${symbol} = {number_latex(value)}$")
        else:
            symbol = f"${SYMBOLS[key][1]}$" if key in SYMBOLS else latex_escape(key)
            parts.append(f"{symbol} = {latex_escape(value)}")
    return ", ".join(parts)


def legend_entry(display: str, point: dict) -> str:
    """``LinUCB (ν = 10⁻³)``: an algorithm and its chosen grid point in a figure's legend."""
    return f"{display} ({grid_point_text(point)})" if point else display


def latex_entry(display: str, point: dict) -> str:
    """``LinUCB ($\\nu = 10^{-3}$)``: the same in a LaTeX caption."""
    return f"{latex_escape(display)} ({grid_point_latex(point)})" if point else latex_escape(display)
