"""Aggregation of a sweep's Parquet results into the tables and figures a paper needs.

The tuning rule of both papers: for each (algorithm, environment) keep the grid point with the
lowest mean final regret over seeds; report that point's mean and standard deviation.

The files for a paper name algorithms by display name (the spec's ``label``, else the algorithm's
usual name: ``LinUCB``, ``NeuralRBMLE-GA``) and environments by title (``Mushroom``, ``kernel
setting 1, Matérn-5/2``); figures (sweeps.publishing.figures) as PDF and PNG with the chosen grid point in the
legend (``ν = 10⁻³``) and the band stated (the 95% interval of the mean over n seeds, or ±1 std);
LaTeX tables with booktabs rules and a ``\label``. A column's best regret is bold only where it is
lower than every other algorithm of the column by a paired test at 5% after Holm's adjustment
(sweeps.analysis.comparisons.significant_best), as each caption states; each cell's interval, every pair's
comparison and the aggregates across environments are files of their own (sweeps.results.report_comparisons).
Markdown and CSV tables keep the labels the Parquet results hold, so that they join with them.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from banditsweep.core.engine.trial import environment_label, environment_title
from banditsweep.sweeps.publishing.by_setting import setting_table  # noqa: F401 (API: tests, notebooks build it)
from banditsweep.sweeps.publishing.display import (DISPLAY_NAMES, display_name,  # noqa: F401 (DISPLAY_NAMES: API)
                                                   grid_point_latex)
from banditsweep.sweeps.publishing.figures import plot_curves
from banditsweep.sweeps.analysis.grid_choice import (CHOICE_RTOL, HOLD_OUT_FROM, Choice,  # noqa: F401 (API)
                                                     _point_text, choose_grid_points, default_choose_on, grid_values)
from banditsweep.sweeps.results.paper_comparison import compare_with_papers, write_paper_comparisons
from banditsweep.sweeps.analysis.comparisons import (ONE_POINT, SAME_SEEDS, AcrossEnvironments, across_environments,
                                                     final_by_seed, pair_table, significance_rule, significant_best)
from banditsweep.sweeps.results.report_comparisons import with_pair_marks, write_across, write_intervals, write_pairs
from banditsweep.sweeps.analysis.statistics import mean_interval
from banditsweep.sweeps.events import say
from banditsweep.sweeps.publishing.tables import (CODE_LEGEND, CODE_MIXED, CODE_OTHER, MISSING,  # noqa: F401 (API)
                                                  label_slug, latex_escape, marks_legend, latex_table, latex_text_table,
                                                  markdown_table, separated_best, separation_rule)
from banditsweep.workers import InputError
from banditsweep.workers import FINISHED
from banditsweep.workers import content_digest_of
from banditsweep.workers import SweepStore
from banditsweep.workers import trials_table


@dataclass
class Summary:
    best: pd.DataFrame        # one row per (label, environment): params, grid_point (+ grid_values), mean, std, seeds, s/round
    mean: pd.DataFrame        # algorithms x environments
    std: pd.DataFrame
    seconds: pd.DataFrame     # mean seconds per round, same layout
    diagnostics: pd.DataFrame  # mean of every *_seconds diagnostic, per (label, environment)
    by_setting: pd.DataFrame  # rows: the environment settings that vary; columns: algorithm x (regret, s/round)
    seconds_std: pd.DataFrame = field(default_factory=pd.DataFrame)  # std over seeds of seconds per round
    titles: dict[str, str] = field(default_factory=dict)  # environment (and table column) -> display title
    columns: dict[str, str] = field(default_factory=dict)  # environment -> its table column
    notes: list[str] = field(default_factory=list)  # grid points left out of the choice, and why
    # Cells whose trials were not all computed by one code version, or by today's code: (column, row)
    # -> mark (CODE_MIXED, CODE_OTHER), and the notes that name the modules.
    marks: dict[tuple[str, str], str] = field(default_factory=dict)
    code_notes: list[str] = field(default_factory=list)
    # Every pair of algorithms of each environment compared by seed (sweeps.analysis.comparisons.pair_table),
    # the aggregates across environments (None: fewer than two with a reference), and on which seeds
    # the grid points were chosen.
    pairs: pd.DataFrame = field(default_factory=pd.DataFrame)
    across: AcrossEnvironments | None = None
    chosen: str = SAME_SEEDS




def recorded_trials(store: SweepStore) -> pd.DataFrame:
    """Every trial as the journal holds it (the record of truth), in the trials table's layout.
    Not ``trials.parquet``: that is a view of the journal which a crash, a disk or a hand may have
    left disagreeing with it (``status`` says so), and a report shows what the journal holds."""
    return trials_table(list(store.journal().values())).to_pandas()


def finished_trials(trials: pd.DataFrame, planned, status: str = FINISHED) -> pd.DataFrame:
    """The finished trials of a spec (its ``PlannedTrial`` list) among ``trials``
    (:func:`recorded_trials`), named as the spec names them now: display names are not part of a
    trial's identity, so renaming an algorithm's ``label`` (or an environment's) in the spec renames
    it in the report without running anything again. (With ``status``, its trials of that status
    instead: the failed ones.)"""
    names = {trial.trial_id: (trial.label, trial.environment) for trial in planned}
    order = {trial_id: index for index, trial_id in enumerate(names)}
    if trials.empty:
        return trials
    trials = trials[trials["trial_id"].isin(names.keys()) & (trials["status"] == status)].copy()
    trials["label"] = [names[tid][0] for tid in trials["trial_id"]]
    trials["environment"] = [names[tid][1] for tid in trials["trial_id"]]
    # In the spec's order (its grid order within a cell), not the journal's (the order trials ended
    # in): a tie between grid points is decided by it (choose_grid_points).
    trials["plan_order"] = [order[tid] for tid in trials["trial_id"]]
    return trials.sort_values("plan_order", kind="stable")


def summarise(trials: pd.DataFrame, label_order: list[str], env_order: list[str],
              failed: pd.DataFrame | None = None, other_code: dict[str, list[str]] | None = None) -> Summary:
    """Each cell at its chosen grid point (:func:`choose_grid_points`): mean and spread over seeds,
    seconds per round, intervals, pairs, and the aggregates across environments."""
    if trials.empty:
        empty = pd.DataFrame()
        return Summary(empty, empty, empty, empty, empty, empty)
    choice = choose_grid_points(trials, failed)
    best, grouped, notes = choice.best, choice.grouped, choice.notes
    best["grid_values"] = [grid_values(grouped, row["label"], row["environment"], row["params"])
                           for _, row in best.iterrows()]
    best["grid_point"] = [", ".join(f"{k}={v}" for k, v in values.items()) for values in best["grid_values"]]
    best["display"] = [display_name(row["label"], row.get("algorithm")) for _, row in best.iterrows()]
    labels = [x for x in label_order if x in set(best["label"])]
    envs = [x for x in env_order if x in set(best["environment"])]

    # Tables name environments without their kind when they all share it ("mushroom", not
    # "classification:mushroom"), as the papers' tables do.
    kinds = {env.split(":", 1)[0] for env in envs}
    short = {env: env.split(":", 1)[-1] for env in envs} if len(kinds) == 1 else {}

    def layout(column: str) -> pd.DataFrame:
        table = best.pivot(index="label", columns="environment", values=column)
        table = table.reindex(index=labels, columns=envs).rename(columns=short)
        return table.rename_axis(index="algorithm", columns=None)

    diag_rows = []
    for _, row in best.iterrows():
        chosen = trials[trials["trial_id"].isin(row["trial_ids"])]
        values = pd.DataFrame([json.loads(d) for d in chosen["diagnostics"]])
        timing = {c: values[c].mean() for c in values.columns if "seconds" in c and c != "batch_wall_seconds"}
        diag_rows.append({"algorithm": row["label"], "environment": row["environment"],
                          "seconds_per_round": row["seconds_per_round"], **timing})
    titles = environment_titles(trials, envs)
    titles |= {short[env]: titles[env] for env in short}
    intervals = [mean_interval(final_by_seed(trials, row["trial_ids"]).values) for _, row in best.iterrows()]
    best["ci_low"] = [interval.low for interval in intervals]
    best["ci_high"] = [interval.high for interval in intervals]
    best["ci_method"] = [interval.method for interval in intervals]
    marks, code_notes = code_marks(trials, best, other_code or {})
    best["code"] = [marks.get((row["environment"], row["label"]), "") for _, row in best.iterrows()]
    columns = {env: short.get(env, env) for env in envs}
    table_marks = {(short.get(env, env), label): mark for (env, label), mark in marks.items()}
    return Summary(best, layout("mean"), layout("std"), layout("seconds_per_round"), pd.DataFrame(diag_rows),
                   setting_table(trials, best, labels, envs), layout("seconds_std"), titles, columns, notes,
                   table_marks, code_notes, with_pair_marks(pair_table(trials, best, columns, labels), table_marks),
                   across_environments(trials, best, columns), ONE_POINT if (best["candidates"] <= 1).all() else SAME_SEEDS)


def summarise_held_out(trials: pd.DataFrame, label_order: list[str], env_order: list[str],
                       choose_on: int | Collection[int], failed: pd.DataFrame | None = None,
                       other_code: dict[str, list[str]] | None = None) -> Summary:
    """:func:`summarise` with each cell's grid point chosen on some seeds and every number judged on
    the others, so that the choice does not flatter what it chose. ``choose_on``: a count (the
    sweep's first n seeds choose, ``--choose-on-seeds``), or the choosing seeds themselves (a spec's
    ``seeds`` where its ``confirm:`` stage ran the chosen points on fresh ones, sweeps.planning.confirmation)."""
    seeds = sorted({int(seed) for seed in trials["seed"]})
    if isinstance(choose_on, int):
        if not 1 <= choose_on < len(seeds):
            raise InputError(f"--choose-on-seeds {choose_on}: the sweep's finished trials have {len(seeds)} seeds; "
                             f"choose on 1 to {len(seeds) - 1} of them and judge on the rest")
        choose = set(seeds[:choose_on])
        fresh = ""
    else:
        choose = {int(seed) for seed in choose_on}
        fresh = "fresh "
    judge_seeds = [seed for seed in seeds if seed not in choose]

    def on(frame, inside: bool):
        return None if frame is None or frame.empty else frame[frame["seed"].isin(choose) == inside]

    chosen = summarise(on(trials, True), label_order, env_order, on(failed, True), other_code)
    points = set(zip(chosen.best["label"], chosen.best["environment"], chosen.best["params"]))
    judged = on(trials, False)
    judged = judged[[key in points for key in zip(judged["label"], judged["environment"], judged["params"])]]
    summary = summarise(judged, label_order, env_order, None, other_code)
    named = chosen.best.set_index(["label", "environment"])
    for column in ("grid_values", "grid_point", "candidates"):
        summary.best[column] = [named.loc[(row["label"], row["environment"]), column]
                                for _, row in summary.best.iterrows()]
    labels = [label for label in label_order if label in set(summary.best["label"])]
    summary.pairs = with_pair_marks(pair_table(judged, summary.best, summary.columns, labels), summary.marks)
    summary.notes = chosen.notes + summary.notes
    summary.chosen = (f"The grid points were chosen on seeds {_seed_list(sorted(choose & set(seeds)))} and are "
                      f"judged on {fresh}seeds {_seed_list(judge_seeds)}")
    return summary


def judged_summary(trials: pd.DataFrame, label_order: list[str], env_order: list[str],
                   failed: pd.DataFrame | None = None, other_code: dict[str, list[str]] | None = None, *,
                   choose_on_seeds: int | None = None, same_seeds: bool = False,
                   choosing_seeds: Collection[int] | None = (), confirm_seeds: Collection[int] | None = ()
                   ) -> tuple[Summary, str]:
    """The summary every reader of a sweep gets (report, ``run``'s table, ``banditsweep.compare``, a
    result's ``.statistics`` and ``.plot()``), and how its grid points were chosen: ``confirm`` (a
    spec's held-out stage: chosen on ``choosing_seeds``, judged on the fresh ``confirm_seeds``),
    ``asked`` (``choose_on_seeds``), ``default`` (half the seeds choose, :func:`default_choose_on`) or
    ``same`` (chosen and judged on the same seeds: optimistic, or no choice at all)."""
    notes = []
    if confirm_seeds:
        fresh = trials["seed"].isin(list(confirm_seeds))
        if fresh.any() and not same_seeds and not choose_on_seeds:
            choosing = list(choosing_seeds or sorted({int(seed) for seed in trials.loc[~fresh, "seed"]}))
            return summarise_held_out(trials, label_order, env_order, choosing, failed, other_code), "confirm"
        if not fresh.any():
            notes.append("the spec's held-out stage (confirm:) has no finished trial yet: `banditsweep run` runs "
                         "it once the choosing trials have ended")
        # Judged as asked on the choosing seeds alone: the fresh seeds ran the chosen points only.
        trials = trials[~fresh]
        failed = None if failed is None or failed.empty else failed[~failed["seed"].isin(list(confirm_seeds))]
    choose_on = choose_on_seeds or (None if same_seeds else default_choose_on(trials))
    if choose_on:
        summary = summarise_held_out(trials, label_order, env_order, choose_on, failed, other_code)
        how = "asked" if choose_on_seeds else "default"
    else:
        summary, how = summarise(trials, label_order, env_order, failed, other_code), "same"
    summary.notes = notes + summary.notes
    return summary, how


def _seed_list(seeds: list[int]) -> str:
    return ", ".join(map(str, seeds)) if len(seeds) <= 6 else f"{seeds[0]}–{seeds[-1]} ({len(seeds)})"


def code_marks(trials: pd.DataFrame, best: pd.DataFrame, other_code: dict[str, list[str]]
               ) -> tuple[dict[tuple[str, str], str], list[str]]:
    """Which chosen cells mix code versions (:data:`CODE_MIXED`) or hold trials computed by other code
    than today's (:data:`CODE_OTHER`), keyed (environment, label), and the notes naming the modules.
    A report never puts numbers of two code versions in one cell or one table without saying so.
    (Digests are compared within a cell, of trials of one algorithm: each trial's digest of a module
    covers only the definitions it reaches there, so two algorithms' digests of a module differ.)"""
    if "code_digest" not in trials.columns:
        return {}, []
    by_id = trials.drop_duplicates("trial_id", keep="last").set_index("trial_id")
    marks: dict[tuple[str, str], str] = {}
    notes: list[str] = []
    unknown = 0
    for _, row in best.iterrows():
        ids = [tid for tid in row["trial_ids"] if tid in by_id.index]
        # A digest of the earlier, path-keyed kind counts as the content it stands for, where known; a
        # trial recorded before trials carried their code has none (None, or NaN in the table).
        stored = {tid: by_id.loc[tid, "code_digest"] for tid in ids}
        stored = {tid: value if isinstance(value, str) and value else None for tid, value in stored.items()}
        digests = {content_digest_of(value) or value or "unknown" for value in stored.values()}
        parts = [json.loads(by_id.loc[tid, "code"] or "{}") for tid in ids]
        unknown += sum(1 for value in stored.values() if value is None)
        mark = ""
        if len(digests) > 1:
            differ = sorted(m for m in {m for code in parts for m in code}
                            if len({code.get(m) for code in parts}) > 1) or ["(code unknown for some)"]
            mark += CODE_MIXED
            notes.append(f"{row['label']} | {row['environment']}: its {len(ids)} trials were computed by "
                         f"{len(digests)} code versions ({', '.join(differ[:6])} differ)")
        stale = [tid for tid in ids if tid in other_code]
        if stale:
            changed = sorted({m for tid in stale for m in other_code[tid]})
            mark += CODE_OTHER
            notes.append(f"{row['label']} | {row['environment']}: {len(stale)} of its {len(ids)} trials were "
                         f"computed by other code than today's ({', '.join(changed[:6])} changed since)")
        if mark:
            marks[(row["environment"], row["label"])] = mark
    if unknown:
        notes.append(f"{unknown} of the reported trials were recorded before trials carried their code (code unknown)")
    return marks, notes


def environment_titles(trials: pd.DataFrame, envs: list[str]) -> dict[str, str]:
    """Each environment's title in figures and LaTeX (core.engine.trial.environment_title): the spec's
    label where it gave one (the trials' name is then not the one their settings make), else the
    kind's title of its settings (``Mushroom``)."""
    configs = dict(trials.drop_duplicates("environment")[["environment", "environment_config"]]
                   .itertuples(index=False))
    titles = {}
    for env in envs:
        config = json.loads(configs[env])
        try:
            titles[env] = env if environment_label(config) != env else environment_title(config)
        except (KeyError, ValueError):   # a kind no longer registered (a plugin not loaded): its name
            titles[env] = env
    return titles


def _write_table(directory: Path, name: str, table: pd.DataFrame, digits: int, caption: str, sweep: str,
                 names: dict[str, str], titles: dict[str, str], bold: dict | None = None,
                 latex_digits: int | None = None, marks: dict | None = None) -> None:
    caption += marks_legend(marks)
    (directory / f"{name}.md").write_text(f"{caption}\n\n{markdown_table(table, digits, bold=bold, marks=marks)}\n")
    table.to_csv(directory / f"{name}.csv")
    (directory / f"{name}.tex").write_text(latex_table(
        table.rename(index=names, columns=titles), caption, f"tab:{label_slug(sweep)}:{label_slug(name)}",
        digits if latex_digits is None else latex_digits, _renamed(bold, names, titles),
        marks={(titles.get(c, c), names.get(r, r)): m for (c, r), m in (marks or {}).items()}))


def _renamed(bold: dict | None, names: dict[str, str], titles: dict[str, str]) -> dict:
    return {titles.get(column, column): names.get(row, row) for column, row in (bold or {}).items()}


def write_report(store: SweepStore, summary: Summary, sweep: str, echo=say, band: str = "ci") -> list[Path]:
    """Write the report into a fresh folder that then replaces ``report/`` (no stale files from an
    earlier report survive, and a reader never sees a half-written report). A comparison with a
    paper's published values, when the sweep has one, is also handed to ``echo`` (said through
    sweeps.events: the terminal, or a Python call's collected output; None: not said)."""
    final = store.report_dir
    if final.is_symlink() or (final.exists() and not final.is_dir()):
        kind = f"a link to {os.readlink(final)}" if final.is_symlink() else "not a folder"
        raise InputError(f"{final} is {kind}: the report is written there as a folder of its own, replaced whole "
                         "by each report; remove it (or move it away) and run `report` again, and copy from there")
    directory = final.with_name(".report-new")
    _remove(directory)
    directory.mkdir(parents=True)
    comparison = _write_report_files(directory, store, summary, sweep, band)
    previous = final.with_name(".report-old")
    _remove(previous)
    dropped = sorted(set(os.listdir(final)) - set(os.listdir(directory))) if final.exists() else []
    if final.exists():
        os.replace(final, previous)
    os.replace(directory, final)
    _remove(previous)
    if dropped and echo is not None:
        shown = ", ".join(dropped[:5]) + (f" and {len(dropped) - 5} more" if len(dropped) > 5 else "")
        echo(f"report: replaced the previous report folder; {len(dropped)} of its entries are not part of this report "
             f"and went with it: {shown}")
    if comparison and echo is not None:
        echo(comparison)
    return sorted(final.iterdir())


def _remove(path: Path) -> None:
    """A leftover of an interrupted report (a folder, or anything planted under its name) is gone."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


def _write_grid_points(directory: Path, summary: Summary, sweep: str, names: dict[str, str]) -> None:
    """``best_params.tex``: the chosen grid point of each cell in math (``$\\nu = 10^{-3}$``)."""
    columns = list(summary.mean.columns)
    cells = {(row["label"], summary.columns.get(row["environment"], row["environment"])):
             (grid_point_latex(row["grid_values"]) or "(one point)") + latex_escape(row.get("code") or "")
             for _, row in summary.best.iterrows()}
    table = pd.DataFrame([[cells.get((label, column)) for column in columns] for label in summary.mean.index],
                         index=pd.Index([names.get(label, label) for label in summary.mean.index], name="algorithm"),
                         columns=[summary.titles.get(column, column) for column in columns])
    (directory / "best_params.tex").write_text(latex_text_table(
        table, f"{sweep}: the grid point of lowest mean final regret of each algorithm and environment"
               f"{marks_legend(summary.marks)}",
        f"tab:{label_slug(sweep)}:best-params", escape=False))


def _seeds_text(summary: Summary) -> str:
    counts = sorted(set(summary.best["seeds"]))
    return f"{counts[0]} seeds" if len(counts) == 1 else f"{counts[0]}–{counts[-1]} seeds"


def _write_report_files(directory: Path, store: SweepStore, summary: Summary, sweep: str, band: str) -> str:
    """Every file of the report; returns the vs-paper Markdown (empty when no paper matches)."""
    names = {row["label"]: row["display"] for _, row in summary.best.iterrows()}
    titles = summary.titles
    seeds = _seeds_text(summary)
    regret_bold = significant_best(summary.pairs, summary.mean) if not summary.pairs.empty else {}
    regret_rule = significance_rule(seeds)
    _write_table(directory, "final_regret_mean", summary.mean, 1,
                 f"{sweep}: mean final cumulative regret over {seeds} (best grid point per cell; {regret_rule})",
                 sweep, names, titles, regret_bold, marks=summary.marks)
    _write_table(directory, "final_regret_std", summary.std, 2,
                 f"{sweep}: standard deviation of the final cumulative regret over {seeds}", sweep, names, titles,
                 marks=summary.marks)
    _write_table(directory, "seconds_per_round", summary.seconds, 4,
                 f"{sweep}: mean wall seconds per round ({separation_rule('seconds per round', seeds)})",
                 sweep, names, titles, separated_best(summary.seconds, summary.seconds_std), marks=summary.marks)
    caption = (f"{sweep}: final cumulative regret, mean ± standard deviation over {seeds} (best grid point per "
               f"cell; {regret_rule}){marks_legend(summary.marks)}")
    (directory / "final_regret_mean_std.tex").write_text(latex_table(
        summary.mean.rename(index=names, columns=titles), caption, f"tab:{label_slug(sweep)}:final-regret-mean-std",
        1, _renamed(regret_bold, names, titles), std=summary.std.rename(index=names, columns=titles),
        marks={(titles.get(c, c), names.get(r, r)): m for (c, r), m in summary.marks.items()}))
    if summary.code_notes:
        (directory / "code.md").write_text(f"{sweep}: the code behind the numbers\n\n"
                                           + "".join(f"- {note}\n" for note in summary.code_notes))
    # An algorithm's columns carry the marks of its cells (a row is a setting, which may span cells).
    owned = {label: "".join(sorted({c for (_, marked), mark in summary.marks.items() if marked == label for c in mark}))
             for label in summary.mean.index}
    legend = marks_legend(owned)
    by_setting = summary.by_setting.copy()
    by_setting.columns = [f"{a}{owned.get(a, '')} {b}" for a, b in by_setting.columns]
    (directory / "by_setting.md").write_text(
        f"{sweep}: mean ± std final regret and seconds per round, per environment setting{legend}\n\n"
        f"{markdown_table(by_setting, 2)}\n")
    by_setting.to_csv(directory / "by_setting.csv")
    (directory / "by_setting.tex").write_text(latex_text_table(
        by_setting.set_axis([f"{names.get(a, a)}{owned.get(a, '')} {b}" for a, b in summary.by_setting.columns], axis=1),
        f"{sweep}: final regret (mean ± std over {seeds}) and seconds per round, per environment setting{legend}",
        f"tab:{label_slug(sweep)}:by-setting"))
    _write_grid_points(directory, summary, sweep, names)
    write_intervals(directory, summary, sweep, names)
    trials = recorded_trials(store)
    if not summary.pairs.empty:
        write_pairs(directory, summary.pairs, sweep, names, summary.chosen, summary.marks)
    if summary.across is not None:
        write_across(directory, summary.across, sweep, names, list(summary.mean.index), summary.marks)
    best = summary.best.drop(columns=["trial_ids", "display", "grid_values"]).drop(columns=["algorithm"], errors="ignore")
    best = best.rename(columns={"label": "algorithm"})
    best.to_csv(directory / "best_params.csv", index=False)
    left_out = "".join(f"\n- {note}" for note in summary.notes)
    (directory / "best_params.md").write_text(
        f"{sweep}: chosen grid point per cell (a grid point with a failed seed is not a candidate; "
        f"`failed`: the chosen point's failed seeds)\n\n{markdown_table(best, 4, index=False)}\n"
        + (f"\nGrid points with failed seeds:{left_out}\n" if left_out else ""))
    if not summary.diagnostics.empty:
        (directory / "timing.md").write_text(f"{sweep}: time per round and time in named steps (seconds)\n\n"
                                             f"{markdown_table(summary.diagnostics, 4, index=False)}\n")
        summary.diagnostics.to_csv(directory / "timing.csv", index=False)
    plot_curves(store, summary, directory, sweep, band)
    return write_paper_comparisons(directory, compare_with_papers(summary.best, trials), sweep,
                                   summary.code_notes)


