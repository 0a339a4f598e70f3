"""The correctness trials of a grade: the candidate called on fresh inputs, each trial's outputs judged against
the reference's (tolerance) and the ground truth (accuracy), its inputs checked unchanged.

:class:`CorrectnessTrials` is mixed into :class:`~ucutlass.grader.grader.Grader`; with it go the failure of a
workload (:class:`Failure`), the worst errors over a workload (:class:`ErrorTally`) and the bitwise comparison of
inputs (:func:`modified_inputs`), which the timing (:mod:`.timed`) uses too.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from ucutlass.problem import Workload, torch_dtype

from .accuracy import ACCURACY_FACTOR, check_accuracy
from .check import compare, tolerance_against_truth
from .digest import changed as digest_changed
from .errors import GraderError
from .inputs import unlisted_workload
from .results import Performance, Status
from .solutions import SolutionRef
from .worker_handle import Worker

#: Correctness trials and the timing hand the candidate the grader's own inputs (checked by keyed checksums, no
#: private copy) when the inputs take more than this share of the GPU's memory: L2_047's 24.6 GB of inputs, a copy
#: of them and its emulated candidate's 33 GB of work did not fit an 80 GB H100
#: (docs/benchmarks/2026-12-07-h100-untimed-moe-and-l1-020.md).
IN_PLACE_SHARE = 0.25


class Failure(Exception):
    """A failed workload, raised inside the grading of one workload and turned into its result."""

    def __init__(self, status: Status, reason: str, log: str = "", with_correctness: bool = False,
                 performance: Performance | None = None, discard: bool = False):
        super().__init__(reason)
        self.status, self.reason, self.log = status, reason, log
        self.with_correctness, self.performance = with_correctness, performance
        self.discard = discard  # the worker, still running, must be replaced (out of step, work left)


class ErrorTally:
    """Worst errors and accuracy over every comparison of one workload."""

    def __init__(self):
        self.abs = 0.0
        self.rel = 0.0
        self.ratio = 1.0
        self.acc: dict[str, Any] = {"checked": 0, "skipped": 0, "factor": ACCURACY_FACTOR}

    def accuracy_json(self) -> dict:
        return dict(self.acc)


class CorrectnessTrials:
    """The correctness part of :class:`~ucutlass.grader.grader.Grader`, which this class is mixed into (it is
    never used alone).

    It uses the Grader's settings ``problem``, ``device``, ``trials``, ``variants``, ``unlisted_shapes``,
    ``private_inputs``, ``accuracy`` and ``timeout_s``, and its ``_digest``; and its methods ``seed_of``,
    ``_make_inputs``, ``_share``, ``_outputs``, ``_sync``, ``_collect``, ``_worker``, ``_ask``, ``_reply_failure``,
    ``_discard``, ``_reference`` and ``_truth``.
    """

    # --- correctness -----------------------------------------------------------------------------------

    def _correctness(self, worker: Worker, solution: SolutionRef, wl: Workload, nonce: str, tally: ErrorTally,
                     checks: dict, stage: dict, logs: list[str]) -> float:
        """Every trial (one input distribution each), then one on an unlisted shape; raises Failure."""
        call_ms = 0.0
        for trial in range(self.trials):
            variant = self.variants[trial % len(self.variants)]
            checks["variants"].append(variant)
            priv = self._make_inputs(wl, self.seed_of(trial, wl, "check", nonce), variant)
            checks.setdefault("private_inputs", self._keeps_copy(_bytes(priv)))  # False: in place, keyed checksums
            stage["trials"] = trial + 1
            call_ms = max(call_ms, self._trial(worker, solution, wl, priv, tally, logs, f"trial {trial} ({variant})"))
            del priv  # before the next trial's inputs are made (L2_047: two sets of 24.6 GB did not fit an H100)
        self._collect()
        if not self.unlisted_shapes:
            return call_ms
        uw = unlisted_workload(self.problem, wl)
        if uw is None:
            checks["unlisted_shape"] = {"skipped": "no var axis to move"}
            return call_ms
        label = f"unlisted shape {uw.label()}"
        try:
            priv = self._make_inputs(uw, self.seed_of(self.trials, wl, "unlisted", nonce))
        except Exception as e:  # the problem cannot make inputs for this shape: not the candidate's fault
            checks["unlisted_shape"] = {"workload": uw.label(), "skipped": f"{type(e).__name__}: {e}"[:200]}
            return call_ms
        try:
            self._trial(worker, solution, uw, priv, tally, logs, label, tolerance=wl.tolerance)
        except Failure as f:
            if not self._reference_runs(priv, uw):
                checks["unlisted_shape"] = {"workload": uw.label(), "skipped": "the reference fails on it"}
                return call_ms
            raise f
        except GraderError as e:
            checks["unlisted_shape"] = {"workload": uw.label(), "skipped": str(e)[:200]}
            return call_ms
        checks["unlisted_shape"] = {"workload": uw.label(), "checked": True}
        self._collect()
        return call_ms

    def _reference_runs(self, priv: Mapping[str, Any], workload: Workload) -> bool:
        try:
            self._reference(priv, workload, in_place=not self._keeps_copy(_bytes(priv)))
            return True
        except GraderError:
            return False

    def _trial(self, worker: Worker, solution: SolutionRef, wl: Workload, priv: dict[str, Any], tally: ErrorTally,
               logs: list[str], label: str, tolerance=None) -> float:
        """One correctness call on fresh shared copies of ``priv``; returns its wall time, raises Failure."""
        if not self._keeps_copy(_bytes(priv)):
            return self._trial_in_place(solution, wl, priv, tally, logs, label, tolerance)
        shared = [self._share(v.detach().clone()) if is_tensor(v) else v for v in priv.values()]
        outs = self._outputs(wl)
        self._sync()
        r = self._ask(worker, {"op": "call", "key": solution.key(), "inputs": shared, "outputs": outs}, self.timeout_s)
        if not r.ok:
            raise self._reply_failure(r, label)
        logs.append(r.log)
        got = [o.clone() for o in outs]  # what is judged: copied out before anything else happens
        self._sync()
        changed = modified_inputs(priv, shared)
        if changed:
            raise Failure(Status.INPUT_MODIFIED, f"{label}: the candidate changed input(s) {', '.join(changed)}")
        del shared, outs
        self._judge(got, priv, wl, tolerance or wl.tolerance, tally, label)
        return float(r.data.get("wall_ms", 0.0))

    def _keeps_copy(self, nbytes: int) -> bool:
        """Whether inputs of ``nbytes`` get a private copy (``private_inputs``; by default unless they take more
        than IN_PLACE_SHARE of the GPU's memory)."""
        if self.private_inputs is not None:
            return bool(self.private_inputs)
        if self.device.type != "cuda":
            return True
        import torch

        return nbytes <= IN_PLACE_SHARE * torch.cuda.get_device_properties(self.device).total_memory

    def _input_bytes(self, wl: Workload) -> int:
        """Bytes of ``wl``'s tensor inputs, from the definition (before any is made)."""
        import torch

        sizes = {n: math.prod(shape) for n, shape in self.problem.input_shapes(wl).items() if shape is not None}
        return sum(k * torch.empty((), dtype=torch_dtype(self.problem.inputs[n].dtype)).element_size()
                   for n, k in sizes.items())

    def _trial_in_place(self, solution: SolutionRef, wl: Workload, priv: dict[str, Any], tally: ErrorTally,
                        logs: list[str], label: str, tolerance=None) -> float:
        """One correctness call on the grader's own inputs, for inputs too large to copy: keyed checksums
        (:mod:`.digest`) before and after the call. The candidate's worker is stopped right after its outputs
        are copied out, before the reference runs on the same memory: nothing it left running can write the
        inputs later, and its cached memory is given back to the reference. Returns the call's wall time."""
        worker = self._worker("candidate")  # a fresh one after an earlier trial in place: load the solution
        r = self._ask(worker, {"op": "load", "solution": solution}, self.timeout_s)
        if not r.ok:
            raise self._reply_failure(r, "loading the solution")
        for v in priv.values():
            if is_tensor(v):
                self._share(v)  # a CPU tensor moves to shared memory in place (no copy kept)
        before = self._digest.of_all(priv)
        outs = self._outputs(wl)
        self._sync()
        args = list(priv.values())
        r = self._ask(worker, {"op": "call", "key": solution.key(), "inputs": args, "outputs": outs}, self.timeout_s)
        fail = None if r.ok else self._reply_failure(r, label)  # replaces a dead worker
        got = [o.clone() for o in outs] if r.ok else []
        self._sync()
        del args, outs
        if not r.dead:  # stopped even after a failure: the unlisted shape's retry runs the reference on priv
            self._discard("candidate", replace=True)
        self._collect()
        if fail is not None:
            raise fail
        logs.append(r.log)
        moved = digest_changed(before, self._digest.of_all(priv))
        if moved:
            raise Failure(Status.INPUT_MODIFIED, f"{label}: the candidate changed input(s) {', '.join(moved)} "
                        "(seen by keyed checksums: these inputs are too large for a private copy)")
        ref = self._reference(priv, wl, in_place=True)
        moved = digest_changed(before, self._digest.of_all(priv))
        if moved:
            raise GraderError(f"{self.problem.id}: the reference changes its input(s) {', '.join(moved)}; inputs "
                              f"this large are not copied for it (Grader(private_inputs=True) copies them)")
        self._judge(got, priv, wl, tolerance or wl.tolerance, tally, label, ref=ref, in_place=True)
        return float(r.data.get("wall_ms", 0.0))

    def _judge(self, got: Sequence[Any], inputs: Mapping[str, Any], wl: Workload, tol, tally: ErrorTally,
               label: str, ref: dict[str, Any] | None = None, in_place: bool = False) -> None:
        """Tolerance (INCORRECT_NUMERICAL), then accuracy against the ground truth (INCORRECT_ACCURACY);
        ``ref``: the reference's outputs where already computed; ``in_place``: the problem's code runs on
        ``inputs`` themselves (no copy)."""
        ref = ref if ref is not None else self._reference(inputs, wl)
        missed = []
        for name, buf in zip(self.problem.outputs, got):
            c = compare(buf, ref[name], tol, name)
            tally.abs = max(tally.abs, c.max_absolute_error)
            tally.rel = max(tally.rel, c.max_relative_error)
            tally.ratio = min(tally.ratio, c.matched_ratio)
            if not c.ok:
                missed.append((name, buf, c.reason))
        truth, how = self._truth(inputs, wl, in_place) if self.accuracy and missed else (None, "")
        for name, buf, reason in missed:
            # Against the reference its own rounding counts against the candidate: judged against the truth.
            ok, note = tolerance_against_truth(buf, ref[name], truth.get(name) if truth else None, tol, name)
            if not ok:
                raise Failure(Status.INCORRECT_NUMERICAL, f"{label}: {reason}" + (f" ({note})" if note else ""),
                            with_correctness=True)
            tally.acc["tolerance_against_truth"] = tally.acc.get("tolerance_against_truth", 0) + 1
            tally.acc.setdefault("tolerance_against_truth_note", f"{label}: {note}")
        if not self.accuracy:
            return
        if not missed:
            truth, how = self._truth(inputs, wl, in_place)
        tally.acc["ground_truth"] = how
        for name, buf in zip(self.problem.outputs, got):
            a = check_accuracy(buf, ref[name], truth.get(name) if truth else None, name)
            if a.skipped:
                tally.acc["skipped"] += 1
                tally.acc.setdefault("skipped_reason", a.skipped)
                continue
            tally.acc["checked"] += 1
            ratio = a.ratio if a.ratio is not None else 0.0
            if ratio >= tally.acc.get("ratio", -1.0):
                tally.acc.update(candidate_error=a.candidate_error, reference_error=a.reference_error,
                                 ratio=ratio, output=name)
            tally.acc["sparse_fraction"] = max(tally.acc.get("sparse_fraction", 0.0), a.sparse_fraction or 0.0)
            if not a.ok:
                raise Failure(Status.INCORRECT_ACCURACY, f"{label}: {a.reason}", with_correctness=True)


def raw_bits(t):
    import torch

    t = t.detach().contiguous().reshape(-1)
    if t.dtype is torch.bool:
        return t.view(torch.uint8)
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]) \
        if t.element_size() in (1, 2, 4, 8) else t


def modified_inputs(expected: Mapping[str, Any], actual: Sequence[Any], only: Sequence[int] | None = None) -> list[str]:
    """Names of tensor inputs whose bits differ between ``expected`` (by name) and ``actual`` (in order)."""
    import torch

    out = []
    for j, ((name, e), a) in enumerate(zip(expected.items(), actual)):
        if only is not None and j not in only:
            continue
        if not (is_tensor(e) and is_tensor(a)):
            continue
        if e.shape != a.shape or e.dtype != a.dtype or not torch.equal(raw_bits(e), raw_bits(a.to(e.device))):
            out.append(name)
    return out


def is_tensor(v: Any) -> bool:
    import torch

    return isinstance(v, torch.Tensor)


def tensor_nbytes(v: Any) -> int:
    return v.numel() * v.element_size() if is_tensor(v) else 0


def _bytes(values: Mapping[str, Any]) -> int:
    return sum(tensor_nbytes(v) for v in values.values())
