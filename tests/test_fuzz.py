"""Fuzzing `ucutlass check` (issue 19): random and mutated `.ucut` text through parse, the rules and, for a
concrete program the rules accept, the C++ rendering of `compile --emit-only`.

Whatever the text, each example ends in a program or in one of ucutlass's own errors (:class:`UcutError`), in
bounded time and with bounded output: never a traceback (RecursionError, ValueError, jinja2's recursion, …), a
hang or a message that grows with the square of the input. Seeds are every shipped program (examples/,
problems/, tests/kernels/); mutations delete, repeat and splice slices, insert tokens of the language, nest
expressions and choices, and write out-of-range numbers. Hypothesis runs derandomized (a fixed seed: CI sees the
same examples every run) with a minimum number of examples per strategy; the whole file takes about 12 s on
one core.
"""

from __future__ import annotations

import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ucutlass import arch, codegen, lang
from ucutlass.errors import MAX_DIAGNOSTICS, MAX_EXCERPT_CHARS, UcutError
from ucutlass.lang import limits

REPO = Path(__file__).resolve().parents[1]
SEEDS = sorted({p.read_text(encoding="utf-8") for pattern in ("examples/*.ucut", "problems/*/kernel.ucut",
                                                                "tests/kernels/*.ucut")
                for p in REPO.glob(pattern)})
#: Words and punctuation of the language, and a few things that are not (an unknown word, a huge number).
TOKENS = ["kernel", "k", ":", "gemm", "attention", "grouped_gemm", "{", "}", "[", "]", "(", ")", "=", ",", "<-",
          "->", "<=", "when", "M", "N", "K", "epilogue", "acc", "c", "d", "a", "b", "bias", "relu(", "gelu(",
          "cast(", "max_n(", "+", "-", "*", "/", "row", "col", "bf16", "f16", "f32", "f8e4m3", "128x128x64",
          "2x1x1", "tile", "cluster", "schedule", "stages", "split_k", "swap_ab", "alignment", "auto", "true",
          "0", "1", "64", "0.5", "1e-3", "1e999", "99999999999", "9" * 60, "#", "\n", "\r\n", "\t", " ", "bf17",
          "tiles", "coop", "\x00", "é", "\\", "'", '"']
#: Per example: the most seconds parse + check + render may take (a hang shows as a failure, not a stall).
EXAMPLE_SECONDS = 10.0
#: The most characters an error may print: every diagnostic capped, each with a bounded excerpt.
MAX_ERROR_CHARS = (MAX_DIAGNOSTICS + 1) * (2 * MAX_EXCERPT_CHARS + 600)

FUZZ = settings(deadline=None, derandomize=True, database=None, max_examples=1000,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def run_check(text: str) -> str:
    """What `ucutlass check FILE` and `compile --emit-only` do with ``text``: parse, run the rules (every
    combination, capped), render each concrete kernel the rules accept (of a kernel with open choices, its first
    and last legal combination, as ``--pick`` or ``--all`` would). Returns what happened, in words.

    Raises:
        AssertionError: an exception that is not a UcutError, too slow, or too much output.
    """
    start = time.monotonic()
    try:
        program = lang.parse(text, "fuzz.ucut")
        diags = arch.check(program)
        outcome = "checked"
        if not [d for d in diags if d.severity == "error"]:  # what check accepts, compile --emit-only renders
            for kernel in program.kernels:
                legal = [{}] if kernel.is_concrete() else arch.legal_combinations(kernel)[0]
                for picks in {0: legal[0], 1: legal[-1]}.values() if legal else ():  # first and last (--all)
                    assert codegen.render(kernel.resolve(picks) if picks else kernel, "fuzz.ucut")
                    outcome = "rendered"
        for d in diags:
            assert len(d.format(text)) < 8 * MAX_EXCERPT_CHARS + 2000
    except UcutError as e:
        message = str(e)
        assert len(message) < MAX_ERROR_CHARS, f"{len(message)} characters of error for {len(text)} of text"
        outcome = "refused"
    seconds = time.monotonic() - start
    assert seconds < EXAMPLE_SECONDS, f"{seconds:.1f} s for {len(text)} characters"
    return outcome


@st.composite
def mutated(draw) -> str:
    """A shipped program with up to 6 mutations."""
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.integers(0, len(text)))
        j = min(len(text), i + draw(st.integers(0, 40)))
        kind = draw(st.sampled_from(["delete", "insert", "repeat", "splice", "nest", "number", "choice"]))
        if kind == "delete":
            text = text[:i] + text[j:]
        elif kind == "insert":
            text = text[:i] + " ".join(draw(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=6))) + text[i:]
        elif kind == "repeat":  # a slice many times: duplicate options, settings, statements
            text = text[:j] + text[i:j] * draw(st.integers(2, 300)) + text[j:]
        elif kind == "splice":  # a slice of another program
            other = draw(st.sampled_from(SEEDS))
            k = draw(st.integers(0, len(other)))
            text = text[:i] + other[k:k + draw(st.integers(1, 200))] + text[i:]
        elif kind == "nest":  # deep expressions: calls, unary minus, parentheses, long sums
            n = draw(st.integers(1, 600))
            open_, close = draw(st.sampled_from([("relu(", ")"), ("-", ""), ("(", ")"), ("acc + ", ""),
                                                 ("{", "}"), ("[", "]")]))
            text = text[:i] + open_ * n + "acc" + close * n + text[i:]
        elif kind == "number":
            number = draw(st.sampled_from(["1e999", "-1e999", "99999999999", "2147483648", "9" * 5000, "0x10",
                                           "1.5", "0", "-1", "3.4028236e38", "1" * 41, ".5e-999"]))
            text = text[:i] + number + text[i:]
        else:  # a choice of many options
            options = draw(st.lists(st.sampled_from(["128x128x64", "64x128x64", "1x1x1", "auto", "1", "2", "row",
                                                     "bf16"]), min_size=1, max_size=40))
            text = text[:i] + "{" + ", ".join(options) + "}" + text[i:]
    return text


@FUZZ
@given(mutated())
def test_mutated_programs_end_in_a_program_or_an_error(text):
    run_check(text)


@settings(FUZZ, max_examples=500)
@given(st.lists(st.sampled_from(TOKENS), max_size=80).map(" ".join))
def test_token_soup_ends_in_an_error(text):
    run_check(text)


@settings(FUZZ, max_examples=100)
@given(st.text(max_size=300))
def test_any_text_ends_in_an_error(text):
    run_check(text)


def test_the_fuzz_reaches_every_outcome():
    """The seeds are accepted and render (so mutations start from programs that reach the rules and codegen);
    a mutation past a limit is refused."""
    outcomes = {run_check(seed) for seed in SEEDS}
    assert outcomes == {"rendered"}, outcomes
    assert run_check(SEEDS[0].replace("{", "{ relu(" * (limits.MAX_DEPTH + 1), 1)) == "refused"
