"""SOL-budgeted campaigns (issue 18, item 4): one budget of attempts (tuner trials, or programs an agent policy
sends) spent over several problems by their SOL headroom, with μCUTLASS's stop rules, resumable, one table.

- Headroom ``H = geomean(T_baseline / T_SOL)``; a problem's weight is :func:`ucutlass.search.budget.trial_budget`
  of its H (the tuner's own budget curve: 8 attempts + 16 per doubling of H, clamped to [8, 96]); a problem whose
  H is not known yet gets a probe of ``probe`` attempts first (its runner measures H on the way). Each round splits
  the budget not yet spent over the problems still running in proportion to their weights; what a problem that
  stopped leaves is split again in the next round. ``spread="even"``: equal weights and no ε or w rule (the
  baseline a campaign is compared against).
- Stop rules (:class:`ucutlass.agents.policy.StopRule`): ε: a passing attempt within (1 + ε)·T_SOL on every
  workload and faster than the baseline; w: ``window`` attempts without a 1% gain; or the runner has nothing more
  to try (the tuner's legal space, an agent policy without a fix, the recorded trials of a replay).
- An attempt timed below T_SOL (physically impossible) is re-measured by its runner; one still below is SUSPECT:
  it counts as spent and never as a gain.
- State: ``state.json`` under ``out`` after every chunk (the tuner's trials also live in its Optuna storage,
  ``out/PROBLEM/study.db``); the same command again continues where it stopped, a larger ``--budget`` spends more.
  A runner that raises stops its problem ("failed: …") and the others go on; a resumed campaign tries it again.
- Output: ``table.txt`` and ``results.json`` (speedup, SOL score, trials spent, why each problem stopped).

Runners (:mod:`.campaign_runners`) do the attempts; :class:`ReplayRunner` here plays recorded trials back, which
evaluates a policy offline (μCUTLASS's method): :func:`replay_campaigns`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Protocol, Sequence

from ..search.budget import geomean, trial_budget
from .policy import StopRule
from .replay import RecordedTune

STATE_SCHEMA = "ucutlass.campaign/1"
#: A budget no problem reaches alone: the campaign's own budget bounds the attempts (``StopRule.budget``).
UNBOUNDED = 1 << 30
BUDGET_SPENT = "campaign budget spent"
#: The stop reason of a problem whose runner raised; a resumed campaign tries it again.
FAILED = "failed: "


@dataclass
class Attempt:
    """One attempt (a tuner trial, a program sent): its geomean speedup over the baseline (None: it failed),
    whether it is within (1 + ε)·T_SOL and faster than the baseline, timed below T_SOL, SUSPECT (still below T_SOL
    when re-measured), its SOL score (SOL-ExecBench's; None without T_SOL), a key (the tuner's trial number) and a
    note."""

    speedup: float | None
    near_sol: bool = False
    below_sol: bool = False
    suspect: bool = False
    sol_score: float | None = None
    key: int | None = None
    note: str = ""
    remeasured: bool = False


@dataclass
class ProblemState:
    """A problem's part of a campaign: its headroom (None until measured), attempts, attempts granted, the final
    reason it stopped ("" while it runs), the runner's best (``speedup``, ``sol_score`` on every workload, …) and
    the runner's own state (``extra``: an agent's current program)."""

    problem: str
    headroom: float | None = None
    attempts: list[Attempt] = field(default_factory=list)
    allotted: int = 0
    stop_reason: str = ""
    best: dict | None = None
    extra: dict = field(default_factory=dict)

    @property
    def spent(self) -> int:
        """Attempts made (the budget it used)."""
        return len(self.attempts)

    def to_json(self) -> dict:
        """This state as ``state.json`` holds it."""
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "ProblemState":
        """A state from :meth:`to_json`'s dict."""
        return cls(**{**d, "attempts": [Attempt(**a) for a in d.get("attempts", [])]})


#: Called by a runner on each attempt, in order: re-measures one below T_SOL (in place), counts it for the stop
#: rules; True once a rule fired (the runner may stop early; attempts it makes after that still count as spent).
Judge = Callable[[Attempt], bool]


class Runner(Protocol):
    """What makes attempts on one problem."""

    def advance(self, state: ProblemState, n: int, judge: Judge) -> tuple[list[Attempt], str | None]:
        """Make up to ``n`` attempts (more when earlier ones were made but not recorded: a resumed tune), calling
        ``judge`` on each; may set ``state.headroom``, ``state.best``, ``state.extra``. Returns the attempts and
        why the runner has nothing more to try (None: it could go on)."""
        ...

    def remeasure(self, state: ProblemState, attempt: Attempt) -> Attempt | None:
        """Measure an attempt timed below T_SOL again (None: it cannot be)."""
        ...


@dataclass
class CampaignConfig:
    """Knobs of a campaign.

    Attributes:
        budget: attempts in all, over every problem.
        epsilon: the ε rule (None: off).
        window: the w rule, attempts without a gain (None: off).
        spread: ``headroom`` (weights by SOL headroom) or ``even`` (equal weights, no ε or w rule).
        probe: attempts granted first to a problem whose headroom is unknown.
    """

    budget: int
    epsilon: float | None = 0.25
    window: int | None = 12
    spread: str = "headroom"
    probe: int = 2

    def __post_init__(self):
        if self.budget < 1:
            raise ValueError(f"--budget must be at least 1, got {self.budget}")
        if self.spread not in ("headroom", "even"):
            raise ValueError(f"spread must be 'headroom' or 'even', got {self.spread!r}")
        if self.epsilon is not None and self.epsilon < 0:
            raise ValueError(f"--epsilon must be at least 0, got {self.epsilon}")
        if self.probe < 1:
            raise ValueError(f"--probe must be at least 1, got {self.probe}")
        if self.window is not None and self.window < 1:
            raise ValueError(f"--window must be at least 1, got {self.window}")
        if self.spread == "even":
            self.epsilon, self.window = None, None

    def rule(self) -> StopRule:
        """A fresh :class:`StopRule` of this config (a rule that is off never fires)."""
        return StopRule(budget=UNBOUNDED, epsilon=-1.0 if self.epsilon is None else self.epsilon,
                        patience=self.window or UNBOUNDED)


def weight(state: ProblemState, spread: str) -> float:
    """A problem's share weight: :func:`trial_budget` of its headroom (unknown: the minimum), 1 when even."""
    if spread == "even":
        return 1.0
    h = state.headroom if state.headroom is not None else float("nan")
    return float(trial_budget(h, UNBOUNDED))


def shares(states: Sequence[ProblemState], remaining: int, spread: str) -> dict[str, int]:
    """Split ``remaining`` attempts over the running problems by weight (largest remainders; each at least one
    while attempts last, the heaviest first)."""
    active = [s for s in states if not s.stop_reason]
    if remaining <= 0 or not active:
        return {}
    w = {s.problem: weight(s, spread) for s in active}
    total = sum(w.values())
    exact = {p: remaining * x / total for p, x in w.items()}
    out = {p: int(math.floor(v)) for p, v in exact.items()}
    left = remaining - sum(out.values())
    for p in sorted(exact, key=lambda p: (-(exact[p] - out[p]), -w[p], p))[:left]:
        out[p] += 1
    for p in sorted((p for p in out if out[p] == 0), key=lambda p: (-w[p], p)):
        donor = max(out, key=lambda q: (out[q], w[q]))
        if out[donor] <= 1:
            break
        out[donor] -= 1
        out[p] = 1
    return {p: n for p, n in out.items() if n > 0}


class Campaign:
    """A campaign over ``problems`` with ``runner``; ``out`` (None: in memory only) holds its state and results.

    Raises:
        ValueError: ``out`` holds the state of a campaign with another spread, ε or w.
    """

    def __init__(self, problems: Sequence[str], runner: Runner, config: CampaignConfig, out: Path | None = None,
                 log: Callable[[str], None] = lambda s: None):
        if not problems:
            raise ValueError("a campaign needs at least one problem")
        self.runner, self.config, self.out, self.log = runner, config, out, log
        self.states = {p: ProblemState(p) for p in dict.fromkeys(problems)}
        if out is not None and (out / "state.json").is_file():
            self._load(out / "state.json")

    def _load(self, path: Path) -> None:
        doc = json.loads(path.read_text())
        if doc.get("schema") != STATE_SCHEMA:
            raise ValueError(f"{path}: not a campaign state ({STATE_SCHEMA})")
        old = doc["config"]
        for key in ("epsilon", "window", "spread"):
            if old.get(key) != getattr(self.config, key):
                raise ValueError(f"{path}: a campaign with {key} {old.get(key)!r} (now {getattr(self.config, key)!r}); "
                                 "resuming would mix two policies: give another --out")
        for d in doc["problems"]:
            if d["problem"] in self.states:
                self.states[d["problem"]] = s = ProblemState.from_json(d)
                if s.stop_reason.startswith(FAILED):  # perhaps passing: try again
                    s.stop_reason = ""
        self.log(f"resuming {path}: {sum(s.spent for s in self.states.values())} attempts recorded")

    def save(self) -> None:
        """Write ``state.json`` atomically (a killed run leaves the previous one)."""
        if self.out is None:
            return
        doc = {"schema": STATE_SCHEMA, "config": asdict(self.config),
               "problems": [s.to_json() for s in self.states.values()]}
        _write(self.out / "state.json", json.dumps(doc, indent=2))

    @property
    def spent(self) -> int:
        """Attempts made over every problem."""
        return sum(s.spent for s in self.states.values())

    def _judge(self, state: ProblemState) -> Judge:
        rule = self.config.rule()
        for a in state.attempts:
            rule.observe(None if a.suspect else a.speedup, a.near_sol and not a.suspect)
        fired = [False]

        def judge(a: Attempt) -> bool:
            if a.below_sol and not a.remeasured:
                again = self.runner.remeasure(state, a)
                a.remeasured = True
                if again is not None and not again.below_sol:
                    a.speedup, a.near_sol, a.sol_score, a.below_sol = (again.speedup, again.near_sol,
                                                                       again.sol_score, False)
                    a.note = (a.note + "; " if a.note else "") + "below T_SOL, re-measured"
                else:
                    a.suspect = True
                    a.note = (a.note + "; " if a.note else "") + "SUSPECT: below T_SOL when re-measured"
            if not fired[0] and rule.observe(None if a.suspect else a.speedup, a.near_sol and not a.suspect):
                fired[0] = True
                state.extra["rule"] = rule.reason
            return fired[0]

        return judge

    def _step(self, state: ProblemState, n: int) -> None:
        state.extra.pop("rule", None)
        judge = self._judge(state)
        try:
            attempts, exhausted = self.runner.advance(state, n, judge)
        except Exception as e:  # a tune that crashed, a tool that timed out: the other problems go on
            attempts, exhausted = [], f"{FAILED}{str(e)[:400]}"
        state.attempts.extend(attempts)
        state.allotted += n
        if state.extra.get("rule"):
            state.stop_reason = state.extra.pop("rule")
        elif exhausted:
            state.stop_reason = exhausted
        elif not attempts:
            state.stop_reason = "the runner made no attempt"
        self.log(f"{state.problem}: {len(attempts)} attempts (of {n} granted), {state.spent} in all"
                 + (f"; stopped: {state.stop_reason}" if state.stop_reason else ""))
        self.save()
        self.write(self.results())  # the table so far: a campaign cut short still leaves one

    def run(self) -> dict:
        """Spend the budget; write the outputs; return the results document (:meth:`results`)."""
        cfg = self.config
        for s in self.states.values():
            if s.headroom is None and not s.stop_reason and s.spent == 0 and self.spent < cfg.budget:
                self._step(s, min(cfg.probe, cfg.budget - self.spent))
        while True:
            grant = shares(list(self.states.values()), cfg.budget - self.spent, cfg.spread)
            if not grant:
                break
            for p, n in grant.items():
                self._step(self.states[p], n)
        results = self.results()
        self.write(results)
        return results

    def results(self) -> dict:
        """The document of ``results.json``: the config, one row per problem (``problem``, ``headroom``,
        ``trials``, ``speedup``, ``sol_score``, ``stop_reason``, ``suspect``), the geomean speedup over the problems
        with one and the attempts spent."""
        rows = [problem_row(s) for s in self.states.values()]
        sp = [r["speedup"] for r in rows if r["speedup"]]
        return {"schema": STATE_SCHEMA, "config": asdict(self.config), "problems": rows,
                "geomean_speedup": geomean(sp) if sp else None, "trials": sum(r["trials"] for r in rows),
                "budget": self.config.budget}

    def write(self, results: dict) -> None:
        """Write ``results.json`` and ``table.txt`` under ``out`` (nothing in memory only)."""
        if self.out is None:
            return
        _write(self.out / "results.json", json.dumps(results, indent=2))
        _write(self.out / "table.txt", format_table(results) + "\n")


def _write(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path`` and rename it over ``path`` (never half a file)."""
    import os
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def problem_row(s: ProblemState) -> dict:
    """One problem's row: the runner's best on every workload when it has one, else the best attempt not SUSPECT;
    ``stop_reason`` is the campaign budget for a problem still running."""
    good = [a for a in s.attempts if a.speedup is not None and not a.suspect]
    best = max(good, key=lambda a: a.speedup, default=None)
    speedup = (s.best or {}).get("speedup") or (best.speedup if best else None)
    score = (s.best or {}).get("sol_score")
    if score is None and best is not None:
        score = best.sol_score
    return {"problem": s.problem, "headroom": s.headroom, "trials": s.spent, "allotted": s.allotted,
            "speedup": speedup, "sol_score": score, "stop_reason": s.stop_reason or BUDGET_SPENT,
            "suspect": sum(a.suspect for a in s.attempts), "flagged": sum(a.below_sol or a.remeasured
                                                                          for a in s.attempts)}


def _f(v, spec: str) -> str:
    """``v`` formatted by ``spec``; "-" as wide for a missing or infinite number."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        width = int(re.match(r"\d*", spec).group(0) or 0)
        return "-".rjust(width)
    return format(v, spec)


def format_table(results: dict) -> str:
    """The campaign's table: one line per problem (headroom, trials spent, speedup, SOL score, SUSPECT attempts,
    why it stopped) and a geomean line."""
    width = max([len(r["problem"]) for r in results["problems"]] + [8])
    head = f"{'problem':<{width}} {'headroom':>8} {'trials':>6} {'speedup':>8} {'SOL score':>9} {'suspect':>7}  stopped"
    lines = [head, "-" * len(head)]
    for r in results["problems"]:
        lines.append(f"{r['problem']:<{width}} {_f(r['headroom'], '8.2f')} {r['trials']:>6} "
                     f"{_f(r['speedup'], '8.3f')} {_f(r['sol_score'], '9.3f')} {r['suspect']:>7}  {r['stop_reason']}")
    lines.append("-" * len(head))
    lines.append(f"{'geomean':<{width}} {'':>8} {results['trials']:>6} {_f(results['geomean_speedup'], '8.3f')}"
                 f"   (budget {results['budget']}; spread {results['config']['spread']}, ε {results['config']['epsilon']}, "
                 f"w {results['config']['window']})")
    return "\n".join(lines)


# --- replay: a campaign on recorded trials ------------------------------------------------------------------

class ReplayRunner:
    """Plays each problem's recorded trials back in order (a :class:`RecordedTune`: headroom, T/T_SOL per trial);
    a trial's speedup is headroom / (T/T_SOL). A recorded trial below T_SOL cannot be re-measured: SUSPECT."""

    def __init__(self, tunes: Sequence[RecordedTune], epsilon: float | None):
        self.tunes = {t.problem: t for t in tunes}
        self.epsilon = epsilon

    def attempt(self, tune: RecordedTune, value: float | None, key: int) -> Attempt:
        """The attempt of one recorded trial (``value``: its T/T_SOL, None when it failed)."""
        from ..search.report import sol_score

        s = tune.headroom / value if value else None
        near = self.epsilon is not None and s is not None and value <= 1 + self.epsilon and s > 1
        return Attempt(s, near, below_sol=value is not None and value < 1, key=key,
                       sol_score=sol_score(value, tune.headroom, 1.0) if value else None)

    def advance(self, state: ProblemState, n: int, judge: Judge) -> tuple[list[Attempt], str | None]:
        tune = self.tunes[state.problem]
        state.headroom = tune.headroom
        out = []
        for i in range(state.spent, min(state.spent + n, len(tune.values))):
            a = self.attempt(tune, tune.values[i], i)
            out.append(a)
            if judge(a):
                break
        return out, "recorded trials exhausted" if state.spent + len(out) >= len(tune.values) else None

    def remeasure(self, state: ProblemState, attempt: Attempt) -> Attempt | None:
        return None


def load_records(paths: Sequence[str | Path]) -> list[RecordedTune]:
    """Recorded tunes from each path: a tune's folder (its ``results.json``) or a folder of them (a campaign's
    ``--out``: one per problem).

    Raises:
        ValueError: a path holds no tune with a headroom and a measured trial.
    """
    tunes = []
    for p in map(Path, paths):
        results = p if p.is_file() else p / "results.json"
        if results.is_file():
            try:
                doc = json.loads(results.read_text())
            except (OSError, ValueError) as e:
                raise ValueError(f"{results}: not a readable JSON file ({e})") from None
            if not isinstance(doc, dict):
                raise ValueError(f"{results}: not a tune's results.json (a JSON object with its trials, as "
                                 "`ucutlass tune` writes it); grade records cannot be replayed")
        if p.is_file() or results.is_file() and doc.get("schema") != STATE_SCHEMA:
            tunes.append(RecordedTune.from_results(p))
            continue
        found = sorted(d for d in p.iterdir() if (d / "results.json").is_file()) if p.is_dir() else []
        if not found:
            raise ValueError(f"{p}: no tune's results.json in it (nor in its folders)")
        tunes.extend(RecordedTune.from_results(d) for d in found)
    return tunes


def replay_campaigns(tunes: Sequence[RecordedTune], rules: Sequence[tuple[float, int]], budget: int | None = None,
                     probe: int = 2) -> list[dict]:
    """Campaigns replayed on recorded tunes: the even spread of ``budget`` (default: every recorded trial) first,
    then one campaign spread by headroom per (ε, w) rule. Each row: ``policy``, ``geomean_speedup``, ``trials``,
    ``ratio`` (its geomean over the even spread's) and ``trial_ratio`` (its trials over the even spread's), and
    ``results`` (the campaign's results document)."""
    budget = budget or sum(len(t.values) for t in tunes)
    configs = [("even", CampaignConfig(budget, spread="even", probe=probe))] + [
        (f"ε {e:g}, w {w}", CampaignConfig(budget, epsilon=e, window=w, probe=probe)) for e, w in rules]
    rows = []
    for name, cfg in configs:
        res = Campaign([t.problem for t in tunes], ReplayRunner(tunes, cfg.epsilon), cfg).run()
        rows.append({"policy": name, "geomean_speedup": res["geomean_speedup"], "trials": res["trials"],
                     "results": res})
    even = rows[0]
    for r in rows:
        r["ratio"] = (r["geomean_speedup"] / even["geomean_speedup"]
                      if r["geomean_speedup"] and even["geomean_speedup"] else None)
        r["trial_ratio"] = r["trials"] / even["trials"] if even["trials"] else None
    return rows


def format_replay(rows: list[dict]) -> str:
    """One line per replayed campaign: policy, trials spent, geomean speedup, both as fractions of the even
    spread's."""
    head = f"{'policy':<16} {'trials':>7} {'of even':>8} {'geomean':>8} {'of even':>8}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['policy']:<16} {r['trials']:>7} {_f(r['trial_ratio'], '8.1%')} "
                     f"{_f(r['geomean_speedup'], '8.3f')} {_f(r['ratio'], '8.1%')}")
    return "\n".join(lines)


__all__ = ["Attempt", "ProblemState", "Runner", "Judge", "CampaignConfig", "Campaign", "shares", "weight",
           "problem_row", "format_table", "ReplayRunner", "load_records", "replay_campaigns", "format_replay",
           "STATE_SCHEMA", "BUDGET_SPENT", "FAILED"]
