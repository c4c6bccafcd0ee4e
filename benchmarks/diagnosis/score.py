"""Score traceoverlap's diagnosis (and the peers') against the scenarios' ground truth.

A scenario is a folder ``runs/<name>/`` holding ``rank{r}.json.gz`` (one Kineto trace per rank),
``truth.json`` (written before the run was analysed) and ``recorded.json`` (how it was made),
optionally Flight Recorder dumps ``fr_{r}`` (hangs). The scorer turns each tool's output into a
*prediction* (a plain dict, the same keys for every tool) and compares it with the truth field
by field: each comparison is **right**, **wrong** or **not said** (the tool gave no answer for
that field). Accuracy = right / (right + wrong + not said): silence is not credit.

How traceoverlap's JSON report (``analyze --format json``) becomes a prediction:

- ``straggler``: ``stragglers.verdict.rank`` (diagnosis.md §14: null when no rank is named,
  the waiting being below the threshold or the late rank moving), or ``stragglers.straggler``
  when the report has that key; else the first rank of
  ``stragglers.ranks`` (most blamed first, as the text report's "straggler: rank N" line),
  None when no rank was last in a matched collective or none caused exposed waiting. A report
  whose clocks could not be aligned or that matched no collective says nothing.
- ``straggler_top2``: the first two ranks of that list that caused any exposed waiting.
- ``moving``: ``stragglers.moving`` when present; else True when a finding says "the late rank
  moves" (:data:`MOVES`), False when the report names a straggler without saying so, else not said.
- ``root_rank``: the blame chains' root with the most exposed waiting (``blame`` rows summed by
  ``root_rank``); None when the report has no blame rows though it matched collectives.
- ``root_op``: the ``cause`` (the range or op that explains the lateness) of that root's blame
  rows with the most ``cause_ns``; not said when the blame says "unexplained" (null cause).
  The truth's ``root_op`` matches when equal or when it ``re.fullmatch``es the answer.
- ``cause``: the class of the run's exposed communication (``steps`` summed over every rank and
  step), mapped to the truth's words:

  | traceoverlap (parts, then causes) | truth |
  |---|---|
  | no exposed communication, or most rank-steps `compute-bound` | `none` |
  | largest part `exposed_wait_ns` | `wait` |
  | largest part `exposed_unmatched_ns` (when the report has it) | `unmatched` |
  | largest part `exposed_transfer_ns`, most rank-steps `communication-bound` | `transfer` |
  | largest part transfer; of its causes `exposed_tail_ns` largest | `transfer` |
  | ... `exposed_dependency_ns` largest, a GPU run | `dependency` |
  | ... `exposed_dependency_ns` largest, a CPU run (gloo) | `blocked` |
  | ... `exposed_host_ns` largest | `host` |

  Idle time is not exposed communication: an `idle-bound` verdict does not make the cause
  `host` (the verdicts are scored on their own).
  On a CPU timeline the tool's `dependency` *is* "the compute thread was blocked inside a
  communication call" (diagnosis.md §3), so there truth `dependency` and `blocked` are one class.
  `tail` ("nothing left to compute") is the transfer itself showing: `transfer`.
- ``verdicts``: each ``steps`` row's ``bottleneck``, by (rank, step): scored per rank-step against
  ``verdict_per_rank[rank]`` for the ranks it names when it names any, else against ``verdict``
  on every rank.
- ``purpose``: the purpose of the collectives with the most exposed time (all instances, all
  ranks; the most total time when nothing is exposed). Right when it is the truth's ``purpose``
  or one of its ``purpose_also``; ``unknown`` is not said, unless the truth asks ``unknown``.
- ``advice_text``: every finding's title and advice and the report's notes, one text; each
  ``advice_must`` regex must be found in it, each ``advice_must_not`` must not (case-insensitive).
- ``culprit``: whether a rank is blamed at all (a straggler or a root rank named): on a healthy
  truth that is a false culprit.
- ``hang`` (scenarios with Flight Recorder dumps): ``traceoverlap hang``'s verdict is not
  healthy / empty; its first culprit is the straggler and the root rank. ``partial`` (a rank
  dumped nothing and "may be the one stuck") says neither; its missing ranks are its top 2.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RUNS = HERE / "runs"
BASELINE = HERE / "baseline.json"
#: Why traceoverlap fails a scenario-field, written by whoever analysed it: ``{scenario: {field
#: (or "*" for every field): reason}}``; the markdown table shows it beside the failure.
WHY = HERE / "why.json"
PEERS = HERE / "peers"

#: The truth's cause classes.
CAUSES = ("wait", "transfer", "dependency", "host", "blocked", "unmatched", "none")

#: Fields in the order the table lists them.
FIELDS = (
    "straggler_top1",
    "straggler_top2",
    "moving",
    "root_rank",
    "root_op",
    "cause",
    "verdict",
    "purpose",
    "advice_must",
    "advice_must_not",
    "healthy_no_culprit",
    "hang",
)

FIELD_WORDS = {
    "straggler_top1": "straggler (top 1)",
    "straggler_top2": "straggler (top 2)",
    "moving": "straggler moves",
    "root_rank": "root rank",
    "root_op": "root op / range",
    "cause": "cause of exposed time",
    "verdict": "verdict per rank-step",
    "purpose": "purpose of main collective",
    "advice_must": "advice that must appear",
    "advice_must_not": "advice that must not appear",
    "healthy_no_culprit": "healthy runs without a false culprit",
    "hang": "hang found",
}

RIGHT, WRONG, NOT_SAID = "right", "wrong", "not said"

#: How a report says the straggler is not one rank (diagnosis.md §14 "the late rank moves: 3 in
#: steps 2, 4; 5 in steps 3, 5"); not any "moves" (FSDP advice: "it moves (n-1)/n of the data").
MOVES = re.compile(r"(?i)\b(?:late|slow|slowest|last)\s+rank\s+moves\b|\bstraggler\s+moves\b")

_RANK_FILE = re.compile(r"^rank(\d+)\.json(?:\.gz)?$")
_DUMP_FILE = re.compile(r"^fr_(\d+)(?:\.json)?$")


# --- scenarios --------------------------------------------------------------------------------


@dataclass
class Scenario:
    """One scenario folder: its rank traces, dumps and truth."""

    name: str
    path: Path
    truth: dict[str, Any]
    traces: list[Path] = field(default_factory=list)
    dumps: list[Path] = field(default_factory=list)
    #: the catalog's truth differs from the recorded truth.json (relabelled after recording?)
    truth_differs: bool = False


def _catalog_truths() -> dict[str, dict[str, Any]]:
    """The truths of ``catalog.SCENARIOS`` by name (empty when there is no catalog)."""
    try:
        from benchmarks.diagnosis import catalog  # type: ignore[attr-defined]
    except ImportError:
        return {}
    out: dict[str, dict[str, Any]] = {}
    scen = getattr(catalog, "SCENARIOS", ())
    items = scen.items() if isinstance(scen, Mapping) else ((None, s) for s in scen)
    for key, s in items:
        name = key or (s.get("name") if isinstance(s, Mapping) else getattr(s, "name", None))
        truth = s.get("truth") if isinstance(s, Mapping) else getattr(s, "truth", None)
        if name and truth is not None:
            out[str(name)] = dict(truth) if isinstance(truth, Mapping) else dict(vars(truth))
    return out


def _dumps(d: Path) -> list[Path]:
    """The Flight Recorder dumps under ``d``, one per rank: ``fr_{r}`` (the pickle) when both it
    and ``fr_{r}.json`` are there."""
    by_rank: dict[int, Path] = {}
    for p in sorted(q for q in d.rglob("*") if q.is_file()):
        m = _DUMP_FILE.match(p.name)
        if m and (int(m.group(1)) not in by_rank or not p.name.endswith(".json")):
            by_rank[int(m.group(1))] = p
    return [by_rank[r] for r in sorted(by_rank)]


def load_scenarios(runs: Path, only: Sequence[str] | None = None) -> list[Scenario]:
    """Every scenario folder under ``runs`` (sorted by name), ``only`` these names if given.
    The truth is the folder's ``truth.json``, else the catalog's."""
    catalog: dict[str, dict[str, Any]] | None = None
    out = []
    for d in sorted(p for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else []:
        if only and d.name not in only:
            continue
        traces = sorted(
            (p for p in d.iterdir() if _RANK_FILE.match(p.name)),
            key=lambda p: int(_RANK_FILE.match(p.name).group(1)),  # type: ignore[union-attr]
        )
        dumps = _dumps(d)
        tpath = d / "truth.json"
        catalog = _catalog_truths() if catalog is None else catalog
        if tpath.exists():
            truth = json.loads(tpath.read_text())
        elif d.name in catalog:
            truth = catalog[d.name]
        else:
            continue  # not a scenario
        if not traces and not dumps:
            continue
        differs = d.name in catalog and json.loads(json.dumps(catalog[d.name])) != truth
        out.append(Scenario(d.name, d, truth, traces, dumps, differs))
    if only:
        missing = sorted(set(only) - {s.name for s in out})
        if missing:
            raise SystemExit(f"score: error: no scenario {', '.join(missing)} under {runs}")
    return out


# --- traceoverlap's answers -------------------------------------------------------------------


def _int_or_none(v: Any) -> int | None:
    return None if v is None else int(v)


def predict_from_report(rep: Mapping[str, Any]) -> dict[str, Any]:
    """A prediction from traceoverlap's JSON report (a parsed ``analyze --format json``)."""
    st = rep.get("stragglers") or {}
    findings = list(rep.get("findings") or [])
    text = "\n".join(
        [f"{f.get('title') or ''}\n{f.get('advice') or ''}" for f in findings]
        + [str(n) for n in rep.get("notes") or []]
    )
    pred: dict[str, Any] = {"advice_text": text, "culprit": False}
    if bool(st.get("clock_aligned", True)) and int(st.get("matched") or 0) > 0:
        pred.update(_straggler(st, text))
        pred.update(_root(list(rep.get("blame") or [])))
        verdict = st.get("verdict")
        if isinstance(verdict, Mapping) and verdict.get("rank") is None:
            # the tool's last word (diagnosis.md §14): no straggler, so no root rank either,
            # whatever the per-step blame rows hold; a late rank that moves keeps the range
            # that explains its lateness (the same plant in each step), too little waiting none
            pred["root_rank"] = None
            if not verdict.get("moving"):
                pred.pop("root_op", None)
        pred["culprit"] = pred["straggler"] is not None or pred["root_rank"] is not None
    steps = [s for s in rep.get("steps") or [] if str(s.get("step")) != "all"]
    pred["verdicts"] = {
        f"{s['rank']}:{s['step']}": s.get("bottleneck") for s in steps if s.get("bottleneck")
    }
    cpu = all((t.get("device_kind") or "cpu") == "cpu" for t in rep.get("traces") or [{}])
    cause = _cause(steps, cpu)
    if cause is not None:
        pred["cause"] = cause
    purpose = _purpose(rep.get("collectives") or [])
    if purpose is not None:
        pred["purpose"] = purpose
    return pred


def _straggler(st: Mapping[str, Any], text: str) -> dict[str, Any]:
    """``straggler``, ``straggler_top2`` and ``moving`` from the report's ``stragglers``."""
    ranks = list(st.get("ranks") or [])
    verdict = st.get("verdict")
    if isinstance(verdict, Mapping):  # diagnosis.md §14: significant and stable, or no one
        top = _int_or_none(verdict.get("rank"))
    elif "straggler" in st:
        top = _int_or_none(st["straggler"])
    elif (
        not ranks
        or max(int(r.get("last_count") or 0) for r in ranks) == 0
        or max(int(r.get("exposed_waited_for_ns") or 0) for r in ranks) == 0
    ):
        top = None
    else:
        top = int(ranks[0]["rank"])
    out: dict[str, Any] = {"straggler": top, "straggler_top2": []}
    if top is not None:
        blamed = [
            int(r["rank"])
            for r in ranks
            if int(r["rank"]) != top
            and (
                int(r.get("root_waited_for_ns") or 0) > 0
                or int(r.get("exposed_waited_for_ns") or 0) > 0
            )
        ]
        out["straggler_top2"] = [top, *blamed[:1]]
    if isinstance(verdict, Mapping) and "moving" in verdict:
        out["moving"] = bool(verdict["moving"])
    elif "moving" in st:
        out["moving"] = bool(st["moving"])
    elif MOVES.search(text):
        out["moving"] = True
    elif top is not None:
        out["moving"] = False
    return out


def _root(blame: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``root_rank`` (None: no blame) and ``root_op`` (absent: unexplained) from ``blame``."""
    by_root: dict[int, int] = {}
    for b in blame:
        if b.get("root_rank") is not None:
            r = int(b["root_rank"])
            by_root[r] = by_root.get(r, 0) + int(b.get("exposed_wait_ns") or 0)
    if not by_root:
        return {"root_rank": None}
    root = max(sorted(by_root), key=lambda r: by_root[r])
    out: dict[str, Any] = {"root_rank": root}
    ops: dict[str, int] = {}
    for b in blame:
        if b.get("root_rank") == root and b.get("cause"):
            c = str(b["cause"])
            ops[c] = ops.get(c, 0) + int(b.get("cause_ns") or 0)
    if ops:
        out["root_op"] = max(sorted(ops), key=lambda c: ops[c])
    return out


def _cause(steps: Sequence[Mapping[str, Any]], cpu: bool) -> str | None:
    """The cause class of the exposed time summed over ``steps`` (the table in the module doc)."""
    if not steps:
        return None

    def tot(k: str) -> int:
        return sum(int(s.get(k) or 0) for s in steps)

    exposed = tot("exposed_comm_ns")
    verdicts = [s.get("bottleneck") for s in steps]
    if exposed == 0 or verdicts.count("compute-bound") * 2 > len(verdicts):
        return "none"
    parts = {
        "wait": tot("exposed_wait_ns"),
        "transfer": tot("exposed_transfer_ns"),
        "unmatched": tot("exposed_unmatched_ns"),
    }
    best = max(parts, key=lambda k: (parts[k], k == "wait"))
    if best != "transfer":
        return best
    if verdicts.count("communication-bound") * 2 > len(verdicts):
        return "transfer"
    causes = {
        "transfer": tot("exposed_tail_ns"),
        "blocked" if cpu else "dependency": tot("exposed_dependency_ns"),
        "host": tot("exposed_host_ns"),
    }
    return max(causes, key=lambda k: causes[k])


def _purpose(collectives: Sequence[Mapping[str, Any]]) -> str | None:
    exposed: dict[str, int] = {}
    total: dict[str, int] = {}
    for c in collectives:
        p = c.get("purpose")
        if not p:
            continue
        exposed[p] = exposed.get(p, 0) + int(c.get("exposed_ns") or 0)
        total[p] = total.get(p, 0) + int(c.get("transfer_ns") or 0) + int(c.get("wait_ns") or 0)
    pick = exposed if any(exposed.values()) else total
    if not pick:
        return None
    return max(sorted(pick), key=lambda p: pick[p])


def predict_hang(report: Any) -> dict[str, Any]:
    """A prediction from :class:`traceoverlap.run.hang.HangReport`. ``partial`` (nothing stuck
    among the dumps, ranks that dumped nothing "may be the one stuck") says neither hang nor
    straggler; its missing ranks count as its top-2 candidates."""
    pred: dict[str, Any] = {
        "advice_text": "\n".join([report.answer, *report.evidence, *report.notes])
    }
    if report.verdict == "partial":
        pred["straggler_top2"] = [int(r) for r in report.missing_ranks][:2]
        return pred
    pred["hang"] = report.verdict not in ("healthy", "empty")
    culprits = [int(c[0]) for c in report.culprits]
    pred["straggler"] = culprits[0] if culprits else None
    pred["straggler_top2"] = culprits[:2]
    pred["root_rank"] = culprits[0] if culprits else None
    pred["culprit"] = bool(culprits)
    return pred


def run_traceoverlap(s: Scenario) -> dict[str, Any]:
    """traceoverlap's prediction for one scenario (its traces, and its dumps when it has some)."""
    import traceoverlap
    from traceoverlap.core.errors import TraceoverlapError
    from traceoverlap.reporters import choose

    pred: dict[str, Any] = {}
    try:
        if s.traces:
            result = traceoverlap.analyze([str(p) for p in s.traces])
            rep = json.loads(choose("analysis", "json").render(result))
            pred.update(predict_from_report(rep))
        if s.dumps:
            from traceoverlap.run.flightrec import read_dumps
            from traceoverlap.run.hang import diagnose_hang

            hang = predict_hang(diagnose_hang(read_dumps([str(p) for p in s.dumps])))
            text = pred.get("advice_text", "")
            pred.update(hang)
            pred["advice_text"] = "\n".join(t for t in (text, hang["advice_text"]) if t)
    except TraceoverlapError as e:
        pred = {"error": str(e)}
    except Exception as e:  # noqa: BLE001  (a crash is no answer: every field not said)
        pred = {"error": f"crash: {type(e).__name__}: {e}"[:500]}
    return pred


# --- comparing ----------------------------------------------------------------------------------


def _truth_rank(v: Any) -> int | None:
    return None if v is None else int(v)


def _match_op(truth: str, said: str) -> bool:
    if truth == said:
        return True
    try:
        return re.fullmatch(truth, said) is not None
    except re.error:
        return False


def _same_cause(truth: str, said: str, cpu_dependency_is_blocked: bool = True) -> bool:
    if truth == said:
        return True
    blocked = {"blocked", "dependency"}
    return cpu_dependency_is_blocked and truth in blocked and said == "blocked"


def compare(truth: Mapping[str, Any], pred: Mapping[str, Any]) -> dict[str, list[str]]:
    """Per field, the outcomes (one per item: a field can have several, e.g. one per rank-step
    or per advice regex); a field the truth does not ask about is absent."""
    out: dict[str, list[str]] = {}

    def one(name: str, ok: bool | None) -> None:
        out.setdefault(name, []).append(NOT_SAID if ok is None else RIGHT if ok else WRONG)

    _compare_ranks(truth, pred, one)
    hang = bool(truth.get("hang"))
    if truth.get("cause") and not (hang and not pred.get("verdicts")):
        said = pred.get("cause")
        one("cause", None if said is None else _same_cause(str(truth["cause"]), str(said)))
    per_rank = {str(k): v for k, v in (truth.get("verdict_per_rank") or {}).items()}
    if truth.get("verdict") or per_rank:
        verdicts = pred.get("verdicts") or {}
        if not verdicts:
            one("verdict", None)
        for key, said in sorted(verdicts.items()):
            rank = key.split(":")[0]
            want = per_rank.get(rank) if per_rank else truth.get("verdict")
            if want:
                one("verdict", said == want)
    if truth.get("purpose"):
        said = pred.get("purpose")
        ok = {truth["purpose"], *(truth.get("purpose_also") or [])}
        unknown = said is None or (said == "unknown" and "unknown" not in ok)
        one("purpose", None if unknown else said in ok)
    text = pred.get("advice_text")
    for rx in truth.get("advice_must") or []:
        one("advice_must", None if text is None else bool(re.search(rx, text, re.I)))
    for rx in truth.get("advice_must_not") or []:
        one("advice_must_not", None if text is None else not re.search(rx, text, re.I))
    if truth.get("healthy"):
        one("healthy_no_culprit", None if "culprit" not in pred else not pred["culprit"])
    if hang:
        one("hang", None if "hang" not in pred else bool(pred["hang"]))
    return out


def _compare_ranks(
    truth: Mapping[str, Any], pred: Mapping[str, Any], one: Callable[[str, bool | None], None]
) -> None:
    """The straggler, moving and root fields."""
    if "straggler" in truth:
        t = _truth_rank(truth["straggler"])
        one("straggler_top1", None if "straggler" not in pred else pred["straggler"] == t)
        if "straggler_top2" in pred:
            top2 = list(pred["straggler_top2"])
            one("straggler_top2", (not top2) if t is None else t in top2)
        else:
            one("straggler_top2", None)
    if "moving" in truth and (truth["moving"] or truth.get("straggler") is not None):
        one("moving", None if "moving" not in pred else bool(pred["moving"]) == truth["moving"])
    if "root_rank" in truth:
        t = _truth_rank(truth["root_rank"])
        one("root_rank", None if "root_rank" not in pred else pred["root_rank"] == t)
    if truth.get("root_op"):
        said = pred.get("root_op")
        one("root_op", None if not said else _match_op(str(truth["root_op"]), str(said)))


@dataclass
class Tally:
    right: int = 0
    wrong: int = 0
    not_said: int = 0

    @property
    def n(self) -> int:
        return self.right + self.wrong + self.not_said

    @property
    def accuracy(self) -> float | None:
        return self.right / self.n if self.n else None

    def add(self, outcome: str) -> None:
        if outcome == RIGHT:
            self.right += 1
        elif outcome == WRONG:
            self.wrong += 1
        else:
            self.not_said += 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "right": self.right,
            "wrong": self.wrong,
            "not_said": self.not_said,
            "n": self.n,
            "accuracy": self.accuracy,
        }


def tally(outcomes: Mapping[str, Mapping[str, Sequence[str]]]) -> dict[str, Tally]:
    """Per field, the tally over every scenario's outcomes."""
    out = {f: Tally() for f in FIELDS}
    for per_field in outcomes.values():
        for f, items in per_field.items():
            for o in items:
                out[f].add(o)
    return out


def score_predictions(
    scenarios: Sequence[Scenario],
    preds: Mapping[str, Mapping[str, Any]],
    ref: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
) -> dict[str, Any]:
    """The scored result of one tool: per scenario its outcomes, and per field the tally.
    ``ref`` (traceoverlap's outcomes): a tool that gives no verdicts at all is not said on as
    many rank-steps as the traces hold (traceoverlap's count), not on one."""
    per: dict[str, dict[str, list[str]]] = {}
    for s in scenarios:
        p = preds.get(s.name)
        per[s.name] = compare(s.truth, p if p is not None else {})
        n_ref = len((ref or {}).get(s.name, {}).get("verdict", []))
        if per[s.name].get("verdict") == [NOT_SAID] and n_ref > 1:
            per[s.name]["verdict"] = [NOT_SAID] * n_ref
    t = tally(per)
    return {"fields": {f: t[f].as_dict() for f in FIELDS}, "scenarios": per}


def _summary(pred: Mapping[str, Any]) -> dict[str, Any]:
    """What a prediction said, without the advice text (for the JSON and the failure list)."""
    return {k: v for k, v in pred.items() if k != "advice_text"}


# --- the command ------------------------------------------------------------------------------


def load_peer(path: Path) -> dict[str, Any] | None:
    """A peer's predictions file (written by ``peers/run_*.py``): ``{"tool", "version",
    "predictions": {scenario: prediction}}``."""
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def score(
    runs: Path = RUNS,
    only: Sequence[str] | None = None,
    peer_files: Iterable[Path] | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Score traceoverlap (and each peer whose predictions file exists) on every scenario."""
    import traceoverlap

    scenarios = load_scenarios(runs, only)
    preds: dict[str, dict[str, Any]] = {}
    t0 = time.monotonic()
    for i, s in enumerate(scenarios):
        if progress:
            print(f"[{i + 1}/{len(scenarios)}] {s.name}", file=sys.stderr, flush=True)
        preds[s.name] = run_traceoverlap(s)
    tools: dict[str, Any] = {}
    res = score_predictions(scenarios, preds)
    res["version"] = traceoverlap.__version__
    res["said"] = {k: _summary(v) for k, v in preds.items()}
    tools["traceoverlap"] = res
    if peer_files is None:
        peer_files = sorted(PEERS.glob("*_predictions.json"))
    for pf in peer_files:
        peer = load_peer(pf)
        if peer is None:
            continue
        r = score_predictions(scenarios, peer.get("predictions") or {}, res["scenarios"])
        r["version"] = peer.get("version")
        missing = [s.name for s in scenarios if s.name not in (peer.get("predictions") or {})]
        r["note"] = peer.get("note") or ""
        if missing:
            r["note"] += (
                f" (not run on {len(missing)} of the {len(scenarios)} scenarios, counted not "
                "said: rerun its peers/run_*.py)"
            )
        r["said"] = {k: _summary(v) for k, v in (peer.get("predictions") or {}).items()}
        tools[str(peer.get("tool") or pf.stem)] = r
    return {
        "truth_differs_from_catalog": [s.name for s in scenarios if s.truth_differs],
        "why": json.loads(WHY.read_text()) if WHY.exists() else {},
        "scenarios": [s.name for s in scenarios],
        "n_scenarios": len(scenarios),
        "truth": {s.name: s.truth for s in scenarios},
        "tools": tools,
        "seconds": round(time.monotonic() - t0, 1),
    }


def failures(result: Mapping[str, Any], tool: str = "traceoverlap") -> list[tuple[str, str, str]]:
    """(scenario, field, what was said vs the truth) for every outcome not right."""
    t = result["tools"][tool]
    out = []
    for name, per in t["scenarios"].items():
        truth = result["truth"][name]
        said = t["said"].get(name, {})
        for f, items in per.items():
            bad = [o for o in items if o != RIGHT]
            if not bad:
                continue
            out.append((name, f, _explain(f, truth, said, items)))
    return out


def _explain_verdicts(truth: Mapping[str, Any], said: Mapping[str, str], items: list[str]) -> str:
    """Per rank scored: the verdict wanted, and what was said on its steps when not all right."""
    per_rank = {str(k): v for k, v in (truth.get("verdict_per_rank") or {}).items()}
    by_rank: dict[str, list[str]] = {}
    for key, v in sorted(said.items(), key=lambda kv: [int(x) for x in kv[0].split(":")[:1]]):
        by_rank.setdefault(key.split(":")[0], []).append(v)
    parts = []
    for rank, got in by_rank.items():
        want = per_rank.get(rank) if per_rank else truth.get("verdict")
        if not want or all(g == want for g in got):
            continue
        counts: dict[str, int] = {}
        for g in got:
            counts[g] = counts.get(g, 0) + 1
        said_txt = ", ".join(f"{k} x{n}" for k, n in sorted(counts.items()))
        parts.append(f"rank {rank} wants {want}, said {said_txt}")
    head = f"{items.count(RIGHT)} of {len(items)} rank-steps right"
    return head + ("; " + "; ".join(parts) if parts else "")


def _explain(f: str, truth: Mapping[str, Any], said: Mapping[str, Any], items: list[str]) -> str:
    if "error" in said:
        return f"error: {said['error']}"
    key = {
        "straggler_top1": ("straggler", "straggler"),
        "straggler_top2": ("straggler", "straggler_top2"),
        "moving": ("moving", "moving"),
        "root_rank": ("root_rank", "root_rank"),
        "root_op": ("root_op", "root_op"),
        "cause": ("cause", "cause"),
        "purpose": ("purpose", "purpose"),
        "hang": ("hang", "hang"),
    }.get(f)
    if key:
        t, p = key
        return (
            f"truth {truth.get(t)!r}, said {said[p]!r}"
            if p in said
            else f"truth {truth.get(t)!r}, not said"
        )
    if f == "verdict":
        return _explain_verdicts(truth, said.get("verdicts") or {}, items)
    if f in ("advice_must", "advice_must_not"):
        rxs = list(truth.get(f) or [])
        bad = [f"/{rx}/ {o}" for rx, o in zip(rxs, items, strict=False) if o != RIGHT]
        what = "missing" if f == "advice_must" else "present"
        return f"{what}: " + "; ".join(bad)
    if f == "healthy_no_culprit":
        return f"healthy run, blamed straggler {said.get('straggler')!r} / root {said.get('root_rank')!r}"
    return ", ".join(items)


# --- output -----------------------------------------------------------------------------------


def _pct(a: float | None) -> str:
    return "n/a" if a is None else f"{100 * a:.0f}%"


def _cell(d: Mapping[str, Any]) -> str:
    if not d["n"]:
        return "n/a"
    return f"{_pct(d['accuracy'])} ({d['right']}/{d['wrong']}/{d['not_said']})"


def table_rows(result: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The header and rows of the field-by-field table: per tool, accuracy (right / wrong / not
    said)."""
    tools = list(result["tools"])
    head = [
        "field",
        "items",
        *[f"{t} {result['tools'][t].get('version') or ''}".strip() for t in tools],
    ]
    rows = []
    for f in FIELDS:
        n = result["tools"]["traceoverlap"]["fields"][f]["n"]
        rows.append(
            [FIELD_WORDS[f], str(n), *[_cell(result["tools"][t]["fields"][f]) for t in tools]]
        )
    return head, rows


#: The fields of the by-cause table.
BY_CAUSE_FIELDS = ("straggler_top1", "root_rank", "root_op", "cause", "verdict", "advice_must")


def by_cause_rows(
    result: Mapping[str, Any], tool: str = "traceoverlap"
) -> tuple[list[str], list[list[str]]]:
    """traceoverlap's accuracy per field, grouped by the truth's cause class (``healthy`` runs
    in a row of their own)."""
    groups: dict[str, list[str]] = {}
    for name, truth in result["truth"].items():
        key = "healthy" if truth.get("healthy") else str(truth.get("cause") or "(none given)")
        groups.setdefault(key, []).append(name)
    per = result["tools"][tool]["scenarios"]
    head = ["planted", "runs", *[FIELD_WORDS[f] for f in BY_CAUSE_FIELDS]]
    rows = []
    for key in sorted(groups):
        t = tally({n: per[n] for n in groups[key]})
        rows.append([key, str(len(groups[key])), *[_cell(t[f].as_dict()) for f in BY_CAUSE_FIELDS]])
    return head, rows


def render_text(result: Mapping[str, Any]) -> str:
    head, rows = table_rows(result)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    fmt_row = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()  # noqa: E731
    lines = [
        f"{result['n_scenarios']} scenarios; per field: accuracy (right/wrong/not said)",
        fmt_row(head),
        *[fmt_row(r) for r in rows],
    ]
    for tool, t in result["tools"].items():
        if t.get("note"):
            lines.append(f"{tool}: {t['note']}")
    if result.get("truth_differs_from_catalog"):
        lines.append(
            "truth.json differs from the catalog's truth (scored: truth.json, the one written "
            f"before the run): {', '.join(result['truth_differs_from_catalog'])}"
        )
    fails = failures(result)
    if fails:
        lines.append("")
        lines.append(f"traceoverlap not right ({len(fails)} scenario-fields):")
        why = result.get("why") or {}
        last = None
        for n, f, said in fails:
            lines.append(f"  {n}: {f}: {said}")
            if n in why and (n, _why(why, n, f)) != last:
                last = (n, _why(why, n, f))
                lines.append(f"    why: {last[1]}")
    return "\n".join(lines)


MD_BEGIN = (
    "<!-- benchmark:begin (python -m benchmarks.diagnosis score --markdown docs/benchmark.md) -->"
)
MD_END = "<!-- benchmark:end -->"


def render_markdown(result: Mapping[str, Any]) -> str:
    """The generated block of docs/benchmark.md: the table and traceoverlap's failures."""
    head, rows = table_rows(result)
    out = [
        f"{result['n_scenarios']} scenarios. Each cell: accuracy (right / wrong / not said); "
        "accuracy = right / all, silence counts against it.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" for _ in head) + "|",
        *["| " + " | ".join(r) + " |" for r in rows],
        "",
    ]
    for tool, t in result["tools"].items():
        if t.get("note"):
            out.append(f"- {tool}: {t['note']}")
    if result.get("truth_differs_from_catalog"):
        out.append(
            "- truth.json differs from the catalog's truth (scored: truth.json, written before "
            f"the run): {', '.join(result['truth_differs_from_catalog'])}"
        )
    bh, br = by_cause_rows(result)
    out += [
        "",
        "traceoverlap by the planted cause (the truth's `cause`; healthy runs apart):",
        "",
        "| " + " | ".join(bh) + " |",
        "|" + "|".join("---" for _ in bh) + "|",
        *["| " + " | ".join(r) + " |" for r in br],
    ]
    fails = failures(result)
    by_scen: dict[str, list[tuple[str, str]]] = {}
    for n, f, said in fails:
        by_scen.setdefault(n, []).append((f, said))
    out += [
        "",
        f"Every scenario traceoverlap does not get wholly right ({len(by_scen)} scenarios, "
        f"{len(fails)} scenario-fields), with why (`benchmarks/diagnosis/why.json`):",
        "",
    ]
    if fails:
        why = result.get("why") or {}
        out += ["| scenario | not right: truth vs said | why |", "|---|---|---|"]
        for n, items in by_scen.items():
            said_txt = "<br>".join(f"**{FIELD_WORDS[f]}**: {said}" for f, said in items)
            reasons: list[str] = []
            for f, _ in items:
                r = _why(why, n, f)
                if r not in reasons:
                    reasons.append(r)
            out.append(
                f"| `{n}` | {said_txt.replace('|', '/')} | "
                f"{'<br>'.join(reasons).replace('|', '/')} |"
            )
    else:
        out.append("(none)")
    return "\n".join(out)


def _why(why: Mapping[str, Mapping[str, str]], scenario: str, f: str) -> str:
    """The reason written down for a failure (``why.json``: ``{scenario: {field or "*": why}}``)."""
    per = why.get(scenario) or {}
    return str(per.get(f) or per.get("*") or "not analysed yet")


def write_markdown_block(path: Path, block: str) -> None:
    """Replace the marked block of ``path`` (between :data:`MD_BEGIN` and :data:`MD_END`) with
    ``block``; append the markers and block when the file has none."""
    text = path.read_text() if path.exists() else ""
    new = f"{MD_BEGIN}\n{block}\n{MD_END}"
    if MD_BEGIN in text and MD_END in text:
        a = text.index(MD_BEGIN)
        b = text.index(MD_END) + len(MD_END)
        text = text[:a] + new + text[b:]
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + new + "\n"
    path.write_text(text)


def baseline_of(result: Mapping[str, Any]) -> dict[str, Any]:
    """What the baseline keeps: traceoverlap's per-field tallies and per-scenario outcomes."""
    t = result["tools"]["traceoverlap"]
    return {
        "version": t.get("version"),
        "n_scenarios": result["n_scenarios"],
        "fields": t["fields"],
        "scenarios": t["scenarios"],
    }


def check(result: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[str]:
    """Why the result falls short of the baseline (empty: it does not): a field whose accuracy
    dropped, a scenario of the baseline that is gone. Scenario-fields that were right and are not
    any more are listed too when their field dropped."""
    now = result["tools"]["traceoverlap"]
    problems = []
    gone = sorted(set(baseline.get("scenarios", {})) - set(now["scenarios"]))
    if gone:
        problems.append(f"scenarios in the baseline but not scored: {', '.join(gone)}")
    for f, b in baseline.get("fields", {}).items():
        a = now["fields"].get(f)
        if a is None or b.get("accuracy") is None:
            continue
        if a["accuracy"] is None or a["accuracy"] < b["accuracy"] - 1e-9:
            lost = [
                n
                for n, per in baseline.get("scenarios", {}).items()
                if per.get(f, []).count(RIGHT) > now["scenarios"].get(n, {}).get(f, []).count(RIGHT)
            ]
            problems.append(
                f"{FIELD_WORDS.get(f, f)}: accuracy {_pct(a['accuracy'])} < baseline "
                f"{_pct(b['accuracy'])}" + (f" (fewer right in {', '.join(lost)})" if lost else "")
            )
    return problems


# --- evidence for why.json --------------------------------------------------------------------


def evidence(s: Scenario) -> dict[str, Any]:
    """The facts a reason in ``why.json`` is written from: exposed waiting as a share of step
    time, the blamed root per step (does it move?), the exposed parts and causes, the verdict
    counts, the first findings, whether the run is partial."""
    import traceoverlap
    from traceoverlap.reporters import choose

    if not s.traces:
        return {"error": "no traces"}
    rep = json.loads(
        choose("analysis", "json").render(traceoverlap.analyze([str(p) for p in s.traces]))
    )
    tot = rep["summary"]["run"]["totals"]
    per_step: dict[str, dict[int, int]] = {}
    for b in rep.get("blame") or []:
        if b.get("root_rank") is not None:
            m = per_step.setdefault(str(b["step"]), {})
            m[int(b["root_rank"])] = m.get(int(b["root_rank"]), 0) + int(b["exposed_wait_ns"])
    st = rep.get("stragglers") or {}
    top = (st.get("ranks") or [{}])[0]
    step_ns = max(int(tot["step_ns"]), 1)

    def ms(v: Any) -> float:
        return round(int(v or 0) / 1e6, 1)

    return {
        "exposed_wait_pct_of_step": round(100 * int(tot["exposed_wait_ns"]) / step_ns, 1),
        "top_rank": top.get("rank"),
        "top_root_wait_pct_of_step": round(
            100 * int(top.get("root_waited_for_ns") or 0) / step_ns, 1
        ),
        "root_by_step": {
            k: max(sorted(m), key=lambda r: m[r]) for k, m in sorted(per_step.items())
        },
        "exposed_ms": {
            k: ms(tot.get(f"exposed_{k}_ns"))
            for k in ("wait", "transfer", "unmatched", "tail", "dependency", "host")
            if f"exposed_{k}_ns" in tot
        },
        "idle_ms": ms(tot["idle_ns"]),
        "verdicts": rep["summary"]["run"].get("bottlenecks"),
        "findings": [f"{f['kind']} {ms(f['exposed_ns'])} ms" for f in rep.get("findings") or []][
            :4
        ],
        "ranks_given": st.get("ranks_given"),
        "world_size": st.get("world_size"),
    }
