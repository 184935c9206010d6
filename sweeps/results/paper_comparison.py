"""Ours beside the papers': the published values and stated claims of the papers whose experiments
the sweeps reproduce (``sweeps/papers/*.yaml``, shipped with the package), matched to a sweep's best
grid point per cell, and written as ``vs_paper.md`` and CSV files into its report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from banditsweep.sweeps.analysis.claims import FAMILY_RULE, RULES, UNJUDGED, judge_environment, verdict_text
from banditsweep.sweeps.analysis.statistics import compare
from banditsweep.sweeps.publishing.tables import MISSING, markdown_table, slug

# ---- ours beside the paper's --------------------------------------------------------------------
#
# The papers' published values and stated claims live in sweeps/papers/*.yaml (shipped with the
# package). A sweep whose environments and algorithms match a paper's (registry name; environment
# settings) gets a "vs paper" section: per cell ours and the paper's value, their ratio, each value's
# ratio to the best baseline of its environment (comparable across horizons, where regret itself is
# not), the Spearman rank correlation per environment and whether each claim holds on our trials.

PAPERS_DIR = Path(__file__).resolve().parents[1] / "papers"   # sweeps/papers/
CLAIM_STATISTICS = ("mean", "std", "seconds_per_round")


class PaperDataError(ValueError):
    """A paper data file that does not say what the comparison needs (names the file and key)."""


@dataclass
class PaperData:
    key: str
    paper: str
    source: str
    seeds: int | None
    algorithms: list[dict]           # paper, name (registry), label, role (proposed | baseline)
    environments: list[dict]         # paper, key, label, match (settings), horizon (None: not stated)
    tables: dict[str, pd.DataFrame]  # statistic -> rows: registry names, columns: environment keys
    table_names: dict[str, str]      # statistic -> the paper's table ("Table 1: ...")
    claims: list[dict]

    def algorithm(self, name: str) -> dict:
        return next(a for a in self.algorithms if a["name"] == name)

    @property
    def baselines(self) -> list[str]:
        return [a["name"] for a in self.algorithms if a["role"] == "baseline"]


def load_paper(path: str | Path) -> PaperData:
    """One paper data file, checked: every table row an algorithm of the file, one value per column,
    every claim naming known algorithms, environments and statistics."""
    import yaml

    path = Path(path)
    data = yaml.safe_load(path.read_text())

    def fail(key: str, message: str):
        raise PaperDataError(f"{path}: {key}: {message}")

    if not isinstance(data, dict):
        fail("(top level)", "not a mapping")
    for key in ("paper", "key", "algorithms", "environments", "tables", "claims"):
        if key not in data:
            fail(key, "missing")
    algorithms, environments = data["algorithms"], data["environments"]
    for i, entry in enumerate(algorithms):
        for key in ("paper", "name", "label", "role"):
            if key not in entry:
                fail(f"algorithms[{i}].{key}", "missing")
        if entry["role"] not in ("proposed", "baseline"):
            fail(f"algorithms[{i}].role", f"{entry['role']!r}; allowed: proposed, baseline")
    for i, entry in enumerate(environments):
        for key in ("paper", "key", "label", "match", "horizon"):
            if key not in entry:
                fail(f"environments[{i}].{key}", "missing")
        if not isinstance(entry["match"], dict) or "kind" not in entry["match"]:
            fail(f"environments[{i}].match", "give the settings an environment must have, its kind included")
    names = [a["name"] for a in algorithms]
    env_keys = [e["key"] for e in environments]
    tables, table_names = {}, {}
    for name, table in (data["tables"] or {}).items():
        statistic = table.get("statistic")
        if statistic not in ("mean", "std"):
            fail(f"tables.{name}.statistic", f"{statistic!r}; allowed: mean, std")
        columns = table.get("columns") or []
        unknown = [c for c in columns if c not in env_keys]
        if unknown:
            fail(f"tables.{name}.columns", f"{unknown} are not environments of the file ({', '.join(env_keys)})")
        rows = {}
        for row, values in (table.get("values") or {}).items():
            if row not in names:
                fail(f"tables.{name}.values.{row}", f"not an algorithm of the file ({', '.join(names)})")
            if not isinstance(values, list) or len(values) != len(columns) or \
                    not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                fail(f"tables.{name}.values.{row}", f"give {len(columns)} numbers, one per column")
            rows[row] = [float(v) for v in values]
        tables[statistic] = pd.DataFrame.from_dict(rows, orient="index", columns=columns)
        table_names[statistic] = str(table.get("table", name))
    for i, claim in enumerate(data["claims"] or []):
        where = f"claims[{i}] ({claim.get('id', '?')})"
        for key in ("id", "text", "algorithm", "statistic", "compare", "than", "environments"):
            if key not in claim:
                fail(f"{where}.{key}", "missing")
        if claim["statistic"] not in CLAIM_STATISTICS:
            fail(f"{where}.statistic", f"{claim['statistic']!r}; allowed: {', '.join(CLAIM_STATISTICS)}")
        if claim["compare"] not in ("lower", "higher"):
            fail(f"{where}.compare", f"{claim['compare']!r}; allowed: lower, higher")
        than = claim["than"] if claim["than"] != "all" else []
        for name in [claim["algorithm"], *than]:
            if name not in names:
                fail(where, f"algorithm {name!r} is not an algorithm of the file ({', '.join(names)})")
        envs = claim["environments"] if claim["environments"] != "all" else []
        for key in envs:
            if key not in env_keys:
                fail(f"{where}.environments", f"{key!r} is not an environment of the file ({', '.join(env_keys)})")
        if not isinstance(claim.get("tolerance", 0.0), (int, float)) or claim.get("tolerance", 0.0) < 0:
            fail(f"{where}.tolerance", f"{claim.get('tolerance')!r}; give a fraction >= 0")
    return PaperData(str(data["key"]), str(data["paper"]), str(data.get("source", "")), data.get("seeds"),
                     algorithms, environments, tables, table_names, list(data["claims"] or []))


def load_papers(directory: str | Path = PAPERS_DIR) -> list[PaperData]:
    """Every paper data file shipped with the package (``sweeps/papers/*.yaml``)."""
    return [load_paper(path) for path in sorted(Path(directory).glob("*.yaml"))]


@dataclass
class PaperComparison:
    paper: PaperData
    cells: pd.DataFrame      # one row per (environment, algorithm) matched
    spearman: pd.DataFrame   # one row per environment with a published table
    claims: pd.DataFrame     # one row per claim: ours and the paper's verdict, with the numbers
    horizons: dict[str, tuple[list[int], int | None]]  # environment -> (our horizons, the paper's)
    notes: list[str]

    @property
    def horizons_differ(self) -> bool:
        return any(paper is None or ours != [paper] for ours, paper in self.horizons.values())


def _matches(config: dict, match: dict) -> bool:
    return all(config.get(key) == value for key, value in match.items())


def _ratio(numerator: float, denominator: float) -> float:
    if not np.isfinite(numerator) or not np.isfinite(denominator) or denominator == 0:
        return float("nan")
    return float(numerator / denominator)


def compare_with_papers(best: pd.DataFrame, trials: pd.DataFrame,
                        papers: list[PaperData] | None = None) -> list[PaperComparison]:
    """Our best grid point per cell (``Summary.best``) beside each paper that has one of the sweep's
    environments and at least one of its algorithms. ``trials``: the finished trials (for each
    environment's settings and each cell's horizon)."""
    if best.empty or "algorithm" not in best.columns:
        return []
    papers = load_papers() if papers is None else papers
    by_id = trials.drop_duplicates("trial_id", keep="last").set_index("trial_id")
    # Each environment's settings through its trials' ids: the report names environments as the spec
    # names them now, which need not be the name the trials were recorded under.
    configs = {row["environment"]: json.loads(by_id.loc[row["trial_ids"][0], "environment_config"])
               for _, row in best.drop_duplicates("environment").iterrows()}
    comparisons = []
    for paper in papers:
        comparison = _compare(paper, best, by_id, configs)
        if comparison is not None:
            comparisons.append(comparison)
    return comparisons


def _compare(paper: PaperData, best: pd.DataFrame, by_id: pd.DataFrame, configs: dict) -> PaperComparison | None:
    notes: list[str] = []
    # Our environments that are one of the paper's, in the report's order.
    matched_envs: dict[str, dict] = {}
    for env in dict.fromkeys(best["environment"]):
        hits = [e for e in paper.environments if _matches(configs.get(env, {}), e["match"])]
        if hits:
            matched_envs[env] = hits[0]
    # Per environment: paper algorithm -> our label (the one label running that registry name, or the
    # one labelled as the paper's row when several do).
    cells: dict[str, dict[str, pd.Series]] = {}
    for env in matched_envs:
        rows = best[best["environment"] == env]
        for entry in paper.algorithms:
            candidates = rows[rows["algorithm"] == entry["name"]]
            if len(candidates) > 1:
                named = candidates[candidates["label"].isin([entry["label"], entry["paper"]])]
                if len(named) != 1:
                    notes.append(f"{env}: labels {', '.join(candidates['label'])} all run {entry['name']}; "
                                 f"label one {entry['label']!r} to compare it with the paper's {entry['paper']}")
                    continue
                candidates = named
            if len(candidates) == 1:
                cells.setdefault(env, {})[entry["name"]] = candidates.iloc[0]
    if not cells:
        return None

    horizons = {}
    for env, row_of in cells.items():
        ids = [tid for row in row_of.values() for tid in row["trial_ids"]]
        horizons[env] = (sorted({int(h) for h in by_id.loc[ids, "horizon"]}), matched_envs[env]["horizon"])

    def ours(env: str, name: str, statistic: str) -> float:
        row = cells.get(env, {}).get(name)
        if row is None:
            return float("nan")
        return float(row["mean" if statistic == "mean" else statistic])

    def published(env: str, name: str, statistic: str) -> float:
        table = paper.tables.get(statistic)
        key = matched_envs[env]["key"]
        if table is None or name not in table.index or key not in table.columns:
            return float("nan")
        return float(table.loc[name, key])

    per_seed = {"seed", "final_regret"} <= set(by_id.columns)

    def finals(env: str, name: str) -> dict[int, float] | None:
        row = cells.get(env, {}).get(name)
        if row is None or not per_seed:
            return None
        chosen = by_id.loc[[tid for tid in row["trial_ids"] if tid in by_id.index]]
        return {int(seed): float(value) for seed, value in zip(chosen["seed"], chosen["final_regret"])}

    cell_rows, spearman_rows = [], []
    if "mean" in paper.tables:
        for env, row_of in cells.items():
            names = list(row_of)
            # The best baseline among those run here, for ours and the paper's alike.
            baselines = [n for n in names if n in paper.baselines and np.isfinite(published(env, n, "mean"))]
            best_ours = min((ours(env, n, "mean") for n in baselines), default=float("nan"))
            best_baseline = min(baselines, key=lambda n: ours(env, n, "mean"), default=None)
            best_paper = min((published(env, n, "mean") for n in baselines), default=float("nan"))
            ranked = [n for n in names if np.isfinite(published(env, n, "mean"))]
            rank_ours = pd.Series({n: ours(env, n, "mean") for n in ranked}).rank(method="average")
            rank_paper = pd.Series({n: published(env, n, "mean") for n in ranked}).rank(method="average")
            for name in names:
                row = row_of[name]
                mean, paper_mean = ours(env, name, "mean"), published(env, name, "mean")
                cell_rows.append({
                    "environment": env, "algorithm": row["label"], "paper_algorithm": paper.algorithm(name)["paper"],
                    "T_ours": "/".join(str(h) for h in horizons[env][0]),
                    "T_paper": horizons[env][1] if horizons[env][1] is not None else "?",
                    "seeds": int(row["seeds"]), "ours_mean": mean, "ours_std": float(row["std"]),
                    "paper_mean": paper_mean, "paper_std": published(env, name, "std"),
                    "ours_over_paper": _ratio(mean, paper_mean),
                    "ours_over_best_baseline": _ratio(mean, best_ours),
                    "paper_over_best_baseline": _ratio(paper_mean, best_paper),
                    "ours_vs_best_baseline": _against(name, best_baseline, finals(env, name),
                                                      finals(env, best_baseline) if best_baseline else None),
                    "rank_ours": rank_ours.get(name, float("nan")), "rank_paper": rank_paper.get(name, float("nan")),
                    "code": row.get("code", "") or ""})
            rho, why = _spearman([ours(env, n, "mean") for n in ranked], [published(env, n, "mean") for n in ranked])
            spearman_rows.append({"environment": env, "paper_environment": matched_envs[env]["paper"],
                                  "algorithms": len(ranked), "spearman": rho, "note": why})
    claim_rows = [_judge_claim(claim, paper, cells, matched_envs, ours, published, finals) for claim in paper.claims]
    return PaperComparison(paper, pd.DataFrame(cell_rows), pd.DataFrame(spearman_rows), pd.DataFrame(claim_rows),
                           horizons, notes)


def _against(name: str, baseline: str | None, ours: dict | None, theirs: dict | None) -> str:
    """Our cell against the best baseline of its environment, paired by seed: ``lower``, ``higher`` or
    ``cannot be told apart at n = 3 (about 14 seeds would)`` (sweeps.analysis.statistics.verdict)."""
    if baseline is None or name == baseline:
        return MISSING
    if ours is None or theirs is None:
        return UNJUDGED
    comparison = compare(name, ours, baseline, theirs)
    text = comparison.verdict("a < b")
    return {"holds": "lower", "does not hold": "higher"}.get(text, text)


def _spearman(ours: list[float], paper: list[float]) -> tuple[float, str]:
    """Spearman's rho of two rankings (ties share their average rank); NaN with the reason where it
    is not defined."""
    from scipy.stats import spearmanr

    if len(ours) < 2:
        return float("nan"), f"{len(ours)} algorithm(s) in both: no ranking to compare"
    for values, whose in ((ours, "ours"), (paper, "the paper's")):
        if len(set(values)) == 1:
            return float("nan"), f"all {whose} values tie: no ranking to compare"
    notes = []
    for values, whose in ((ours, "ours"), (paper, "the paper's")):
        tied = sum(values.count(v) for v in set(values) if values.count(v) > 1)
        if tied:
            notes.append(f"{tied} of {whose} share a rank")
    note = "; ".join(notes) + (": average ranks" if notes else "")
    return float(spearmanr(ours, paper).statistic), note


def _judge_claim(claim: dict, paper: PaperData, cells: dict, matched_envs: dict, ours, published, finals) -> dict:
    """Whether a claim holds on our trials and on the paper's numbers, both over the environments
    and algorithms run here (so that the two verdicts speak of the same comparison): by the rules of
    sweeps.analysis.claims (``ours``, ``paper``), and as a plain comparison of the means (``ours_means``,
    ``paper_means``)."""
    statistic, lower = claim["statistic"], claim["compare"] == "lower"
    tolerance = float(claim.get("tolerance", 0.0))
    name = claim["algorithm"]
    than = [a["name"] for a in paper.algorithms if a["name"] != name] if claim["than"] == "all" else claim["than"]
    scope = [e["key"] for e in paper.environments] if claim["environments"] == "all" else claim["environments"]
    envs = [env for env in cells if matched_envs[env]["key"] in scope]
    run_keys = {matched_envs[env]["key"] for env in envs}
    label = {a["name"]: a["label"] for a in paper.algorithms}

    def judge(values, whose: str) -> tuple[str, str, str]:
        verdicts, parts, details = [], [], []
        for env in envs:
            present = cells[env]
            if name not in present:
                details.append(f"{env}: {label[name]} not run")
                continue
            others = [n for n in than if n in present]
            if not others:
                details.append(f"{env}: none of {', '.join(label[n] for n in than)} run")
                continue
            if statistic == "std" and whose == "ours" and min(int(present[n]["seeds"]) for n in [name, *others]) < 2:
                details.append(f"{env}: a standard deviation needs 2 seeds or more")
                continue
            x = values(env, name, statistic)
            points = {n: values(env, n, statistic) for n in others}
            if not np.isfinite(x) or not all(np.isfinite(v) for v in points.values()):
                details.append(f"{env}: no values")
                continue
            bound = min(points.values()) * (1 + tolerance) if lower else max(points.values()) / (1 + tolerance)
            ok = x <= bound if lower else x >= bound
            verdicts.append(ok)
            listed = ", ".join(f"{label[n]} {_number(v)}" for n, v in points.items())
            scaled = "" if not tolerance else f"{1 + tolerance:g} x " if lower else f"1/{1 + tolerance:g} x "
            sign = ("<=" if ok else ">") if lower else (">=" if ok else "<")
            counts = (lambda n: int(present[n]["seeds"])) if whose == "ours" else (lambda n: int(paper.seeds or 0))
            part, tested = judge_environment(
                statistic, lower, tolerance, name, others, lambda n, stat: values(env, n, stat),
                (lambda n: finals(env, n)) if whose == "ours" else (lambda n: None), counts, label)
            if part is not None:
                parts.append(part)
            details.append(f"{env}: {label[name]} {_number(x)} {sign} {_number(bound)} = "
                           f"{scaled}{'min' if lower else 'max'}({listed}): {'yes' if ok else 'NO'}"
                           + (f" [{tested}]" if tested else ""))
        if not verdicts:
            return UNJUDGED, UNJUDGED, "; ".join(details) or "none of the claim's environments in this sweep"
        failed = verdicts.count(False)
        means = (f"does not hold (fails on {failed} of {len(verdicts)})" if failed
                 else f"holds (on {len(verdicts)} of {len(verdicts)})")
        return verdict_text(parts), means, "; ".join(details)

    ours_verdict, ours_means, ours_details = judge(ours, "ours")
    if statistic in paper.tables:
        paper_verdict, paper_means, paper_details = judge(published, "paper")
    else:
        paper_verdict = paper_means = "no published values"
        paper_details = ""
    return {"claim": claim["id"], "text": claim["text"], "statistic": statistic,
            "environments": f"{len(run_keys)} of {len(scope)} run", "ours": ours_verdict, "paper": paper_verdict,
            "ours_means": ours_means, "paper_means": paper_means, "rule": RULES[statistic],
            "ours_details": ours_details, "paper_details": paper_details}


def _number(value: float) -> str:
    """A regret with one decimal, a number below 1 (a time per round) with 3 significant digits."""
    return f"{value:.1f}" if abs(value) >= 1 or value == 0 else f"{value:.3g}"


def _format_cells(cells: pd.DataFrame) -> pd.DataFrame:
    frame = cells.drop(columns=["paper_algorithm"]).copy()
    for column in ("ours_mean", "ours_std", "paper_mean", "paper_std"):
        frame[column] = [MISSING if not np.isfinite(v) else f"{v:.1f}" if "mean" in column else f"{v:.2f}"
                         for v in frame[column]]
    for column in ("ours_over_paper", "ours_over_best_baseline", "paper_over_best_baseline"):
        frame[column] = [MISSING if not np.isfinite(v) else f"{v:.3g}" for v in frame[column]]
    for column in ("rank_ours", "rank_paper"):
        frame[column] = [MISSING if not np.isfinite(v) else f"{v:g}" for v in frame[column]]
    return frame.rename(columns={"ours_over_paper": "ours/paper", "ours_over_best_baseline": "ours/best baseline",
                                 "ours_vs_best_baseline": "ours vs best baseline (paired)",
                                 "paper_over_best_baseline": "paper/best baseline"})


def paper_comparison_markdown(comparison: PaperComparison, sweep: str) -> str:
    paper = comparison.paper
    lines = [f"## {sweep} vs paper: {paper.paper}", "",
             f"Paper: {paper.source}" + (f", {paper.seeds} seeds" if paper.seeds else "") + ". "
             "Ours: the grid point of lowest mean final regret per cell (the report's tables)."]
    if not comparison.cells.empty:
        if comparison.horizons_differ:
            lines += ["", "**Horizons differ** (T_ours, T_paper below): regret at different horizons is not "
                      "comparable in magnitude, so ours/paper is for the record only. Compare instead each "
                      "algorithm's regret over the best baseline of its environment (ours/best baseline "
                      "against paper/best baseline, both over the baselines run here), and the rankings."]
        lines += ["", "### Final regret per cell", "", markdown_table(_format_cells(comparison.cells), index=False),
                  "", "### Rank correlation per environment (Spearman, ties at their average rank)", "",
                  markdown_table(comparison.spearman.assign(spearman=[
                      MISSING if not np.isfinite(v) else f"{v:.2f}" for v in comparison.spearman["spearman"]]),
                      index=False)]
    if not comparison.claims.empty:
        claims = comparison.claims
        lines += ["", "### The paper's claims", "",
                  "Each judged on our trials and on the paper's numbers, over the environments and algorithms run "
                  "here: `ours` and `paper` with statistics (the mean's difference with its 95% interval, paired by "
                  "seed on our trials, Welch from the paper's means, stds and seeds; a spread by the Brown-Forsythe "
                  "test on our per-seed values, which needs at least 5 seeds of each and cannot be judged from a "
                  "table's summaries without assuming normal data; seconds as numbers; " + FAMILY_RULE + "), "
                  "`ours_means` and `paper_means` comparing the means alone, as the paper does.",
                  "", markdown_table(claims[["claim", "text", "environments", "ours", "paper", "ours_means",
                                             "paper_means"]], index=False), ""]
        for row in claims.itertuples(index=False):
            lines.append(f"- {row.claim}: ours: {row.ours_details}"
                         + (f". Paper: {row.paper_details}" if row.paper_details else ""))
    for note in comparison.notes:
        lines.append(f"\nnote: {note}")
    return "\n".join(lines) + "\n"


def write_paper_comparisons(directory: Path, comparisons: list[PaperComparison], sweep: str,
                            code_notes: list[str] = ()) -> str:
    """``vs_paper.md`` (every matched paper) and per paper ``vs_paper_<key>_{cells,spearman,claims}.csv``;
    returns the Markdown. ``code_notes``: which cells mix code versions or hold trials of other code
    than today's (sweeps.results.report.code_marks); their cells are marked in the ``code`` column."""
    if not comparisons:
        return ""
    text = "\n".join(paper_comparison_markdown(c, sweep) for c in comparisons)
    if code_notes:
        text += ("\n### The code behind our numbers\n\nCells marked in the `code` column: † trials of more than one "
                 "code version, ‡ trials computed by other code than today's.\n\n"
                 + "".join(f"- {note}\n" for note in code_notes))
    (directory / "vs_paper.md").write_text(text)
    for comparison in comparisons:
        stem = f"vs_paper_{slug(comparison.paper.key)}"
        for part in ("cells", "spearman", "claims"):
            frame = getattr(comparison, part)
            if not frame.empty:
                frame.to_csv(directory / f"{stem}_{part}.csv", index=False)
    return text
