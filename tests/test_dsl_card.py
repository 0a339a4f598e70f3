"""The card (docs/DSL.md) teaches the whole language: every word of the grammar and of the lang tables
appears in it, every ```ucut example in it parses and checks, and it stays short enough for a prompt.
The shipped examples/*.ucut parse and check too."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ucutlass import arch, lang
from ucutlass.lang import syntax
from ucutlass import arch

REPO = Path(__file__).resolve().parents[1]
CARD_PATH = REPO / "docs" / "DSL.md"
CARD = CARD_PATH.read_text(encoding="utf-8")
EXAMPLES = re.findall(r"```ucut\n(.*?)```", CARD, re.S)


def _mentioned(word: str) -> bool:
    if re.fullmatch(r"\w+", word):
        return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", CARD) is not None
    return word in CARD


def test_card_is_short():
    # 250 until pipelines (issue 16) and convolution (issue 21): the Pipelines section is 22 lines (a whole problem
    # as one program: kernels feeding one another, torch steps and views), the Convolution section 14; attention
    # variants (issue 20) 5; 7 for math = 3xtf32 (issue 20: a settings row and the fp32-accurate GEMM section).
    assert len(CARD.splitlines()) < 302


def test_every_string_terminal_of_the_grammar_is_in_the_card():
    literals = [t.pattern.value for t in syntax.parser().terminals if t.pattern.type == "str"]
    assert {"kernel", "epilogue", "row", "col", "<-", "->", "{", "}"} <= set(literals)
    missing = [w for w in literals if not _mentioned(w)]
    assert not missing, missing


@pytest.mark.parametrize("table", ["FAMILIES", "TARGETS", "DTYPES", "LAYOUTS", "SCHEDULES", "SCHEDULERS",
                                   "ACTIVATIONS", "KEYWORDS", "SETTINGS", "OPERAND_DIMS", "ERROR_CODES"])
def test_every_word_of_the_dsl_tables_is_in_the_card(table):
    words = list(getattr(lang, table))
    missing = [w for w in words if not _mentioned(w)]
    assert not missing, (table, missing)


def test_every_setting_default_and_rule_is_in_the_card():
    for spec in lang.SETTINGS.values():
        assert re.search(rf"\| `{spec.name}` \|.*\| `{re.escape(spec.default)}` \|", CARD), spec.name
    missing = [code for code in arch.RULES if f"`{code}`" not in CARD]
    assert not missing, missing


def test_card_has_examples():
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_every_card_example_parses_and_checks(index):
    program = lang.parse(EXAMPLES[index], f"DSL.md example {index}")
    assert program.kernels
    errors = [d.format() for d in arch.check(program) if d.severity == "error"]
    assert not errors, errors


EXAMPLE_FILES = sorted((REPO / "examples").glob("*.ucut"))


def test_there_are_example_files():
    assert len(EXAMPLE_FILES) >= 2


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_files_parse_and_have_legal_combinations(path):
    """Examples parse and check; a search space may hold illegal combinations (the tuner prunes them,
    flashinfer_gemm_f16.ucut shows that), but each rejection names its rule."""
    program = lang.parse_file(path)
    assert program.kernels
    assert not [d.format() for d in arch.check(program) if d.severity == "error"]
    for kernel in program.kernels:
        legal, rejected = arch.legal_combinations(kernel, {"M": 4096, "N": 4096, "K": 4096})
        assert legal
        assert all(diags and all(d.code in arch.RULES for d in diags) for _, diags in rejected)
        picks = {f"{kernel.name}.{key}": value for key, value in legal[0].items()}
        concrete = lang.parse(program.resolve(picks).source)
        assert concrete.kernel(kernel.name).is_concrete()
        assert arch.check(concrete.kernel(kernel.name)) == []
