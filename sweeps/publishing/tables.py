"""Tables as a paper and a terminal show them: Markdown (numbers rounded, a missing value as
:data:`MISSING`), LaTeX with booktabs rules, a caption and a ``\\label``, the best value of a column
in bold where the seeds' spread separates it from the next (:func:`separated_best`); and the slugs
that name their files and labels."""

from __future__ import annotations

import numpy as np
import pandas as pd

# Marks of cells computed by other code (sweeps.results.report.code_marks), in every file of a report that
# shows the cell's numbers: tables, pairs, aggregates, figure legends; each explained in the caption.
CODE_MIXED, CODE_OTHER = "†", "‡"
CODE_LEGEND = {CODE_MIXED: "† its trials were computed by more than one code version",
               CODE_OTHER: "‡ some of its trials were computed by other code than today's"}


def marks_legend(marks) -> str:
    """``; † ...; ‡ ...`` for the marks among ``marks`` (a mapping's values or an iterable of marks)."""
    values = marks.values() if isinstance(marks, dict) else (marks or [])
    used = {c for mark in values for c in (mark or "")}
    return "".join(f"; {CODE_LEGEND[c]}" for c in (CODE_MIXED, CODE_OTHER) if c in used)


MISSING = "—"  # a setting an environment does not have (another kind's key), or left unset (None)


def markdown_table(table: pd.DataFrame, digits: int = 2, index: bool = True, bold: dict | None = None,
                   marks: dict | None = None) -> str:
    """``bold``: column -> the row (index value) whose cell is bold (``**5.0**``); ``marks``:
    (column, row) -> a mark written after the cell's value (``5.0†``)."""
    frame = table.reset_index() if index else table
    header = [str(c) for c in frame.columns]
    rows = list(table.index) if index else [None] * len(frame)
    bold = bold or {}

    def cell(value) -> str:
        if isinstance(value, (float, np.floating)):
            return "—" if np.isnan(value) else (f"{value:.{digits}f}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}")
        return str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for name, row in zip(rows, frame.itertuples(index=False)):
        cells = [cell(v) for v in row]
        for i, column in enumerate(frame.columns):
            if column in bold and bold[column] == name:
                cells[i] = f"**{cells[i]}**"
            if marks and (column, name) in marks:
                cells[i] += marks[(column, name)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def separated_best(mean: pd.DataFrame, spread: pd.DataFrame | None, lower: bool = True) -> dict:
    """Per column, the row of the best mean (lowest; highest with ``lower=False``) where the spread
    separates it from every other: for the lowest, mean + spread < each other's mean - spread.
    Columns where it overlaps another's mean ± spread, or with fewer than two values, have none.
    ``spread`` None: the best mean where it is strictly the best."""
    best = {}
    for column in mean.columns:
        values = pd.to_numeric(mean[column], errors="coerce").dropna()
        if len(values) < 2:
            continue
        widths = (pd.Series(0.0, index=values.index) if spread is None
                  else pd.to_numeric(spread.loc[values.index, column], errors="coerce").fillna(0.0))
        first = values.idxmin() if lower else values.idxmax()
        others = values.index != first
        if lower and values[first] + widths[first] < (values - widths)[others].min():
            best[column] = first
        elif not lower and values[first] - widths[first] > (values + widths)[others].max():
            best[column] = first
    return best


def separation_rule(what: str, seeds: str, lower: bool = True) -> str:
    """The rule of :func:`separated_best` in words, for a caption: ``what`` (e.g. "mean final
    regret") over ``seeds`` (e.g. "5 seeds")."""
    side = ("lowest", "+", "below", "−") if lower else ("highest", "−", "above", "+")
    return (f"bold: a column's {side[0]} {what} where its mean {side[1]} 1 std lies {side[2]} every other "
            f"algorithm's mean {side[3]} 1 std, std over {seeds}; no bold where they overlap")


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "±": r"$\pm$",
                  "ε": r"$\varepsilon$", "ν": r"$\nu$", "−": r"$-$", "×": r"$\times$",
                  **{c: f"$^{d}$" for c, d in zip("⁰¹²³⁴⁵⁶⁷⁸⁹", "0123456789")}}


_LATEX_MARKS = {"†": r"$^\dagger$", "‡": r"$^\ddagger$"}


def latex_escape(text) -> str:
    """``text`` for LaTeX: its special characters escaped, Greek and superscripts in math, and the
    code marks († ‡) as the tables' own (``$^\\dagger$``)."""
    return "".join(_LATEX_SPECIAL.get(c) or _LATEX_MARKS.get(c, c) for c in str(text))


def latex_number(value, digits: int = 1) -> str:
    """A number for a LaTeX table, in math mode: fixed with ``digits`` decimals, scientific
    (``2.50\times10^{-5}``) below 0.01 (and below ``10**-digits``), where fixed decimals would
    show one significant digit or none, and from a million up; ``--`` for a missing value."""
    if value is None or (isinstance(value, (float, np.floating)) and not np.isfinite(value)):
        return "--"
    value = float(value)
    if value != 0 and (abs(value) < max(10.0 ** -digits, 1e-2) or abs(value) >= 1e6):
        mantissa, exponent = f"{value:.2e}".split("e")
        return rf"{mantissa}\times10^{{{int(exponent)}}}"
    return f"{value:.{digits}f}"


def latex_table(table: pd.DataFrame, caption: str, label: str, digits: int = 1, bold: dict | None = None,
                std: pd.DataFrame | None = None, std_digits: int | None = None, marks: dict | None = None) -> str:
    """A booktabs table of numbers (rows: algorithms, columns: environments) with a caption and a
    ``\\label``; ``bold``: column -> the row whose cell is bold (:func:`separated_best`). With
    ``std``, each cell is ``mean \\pm std``."""
    columns = list(table.columns)
    best = bold or {}
    lines = [r"\begin{table}[t]", r"\centering", rf"\caption{{{latex_escape(caption)}}}",
             rf"\label{{{label}}}", r"\begin{tabular}{l" + "r" * len(columns) + "}", r"\toprule",
             " & ".join([latex_escape(table.index.name or ""), *(latex_escape(c) for c in columns)]) + r" \\",
             r"\midrule"]
    for name, row in table.iterrows():
        cells = []
        for column in columns:
            value = row[column]
            if value is None or (isinstance(value, (float, np.floating)) and np.isnan(value)):
                cells.append("--")
                continue
            text = latex_number(value, digits)
            if std is not None:
                text += r" \pm " + latex_number(std.loc[name, column], digits if std_digits is None else std_digits)
            if column in best and best[column] == name:
                text = rf"\mathbf{{{text}}}"
            mark = (marks or {}).get((column, name), "")
            cells.append(f"${text}$" + "".join(_LATEX_MARKS.get(c, "") for c in mark))
        lines.append(" & ".join([latex_escape(name), *cells]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def latex_text_table(table: pd.DataFrame, caption: str, label: str, escape: bool = True) -> str:
    """A booktabs table of text cells (the by-setting table: ``9.0 ± 1.0``) with its index as the
    leading columns, a caption and a ``\\label``; ``escape=False``: the cells are LaTeX already."""
    frame = table.reset_index()
    numeric = [pd.api.types.is_numeric_dtype(frame[c]) for c in frame.columns]
    spec = "".join("r" if n and i >= table.index.nlevels else "l" for i, n in enumerate(numeric))
    lines = [r"\begin{table}[t]", r"\centering", rf"\caption{{{latex_escape(caption)}}}", rf"\label{{{label}}}",
             rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
             " & ".join(latex_escape(c) for c in frame.columns) + r" \\", r"\midrule"]
    for row in frame.itertuples(index=False):
        lines.append(" & ".join("--" if pd.isna(v) else latex_escape(v) if escape or i < table.index.nlevels
                                else str(v) for i, v in enumerate(row)) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def slug(text: str) -> str:
    """``text`` as part of a file name."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def label_slug(text: str) -> str:
    """``text`` as part of a LaTeX ``\\label``."""
    return "".join(c if c.isalnum() or c in "-." else "-" for c in text)
