"""``ucutlass init`` on a loop that cuts a tensor into pieces by numbers it reads with ``.item()`` (issue 17:
L1_020's patch merger reads each image's (t, h, w) from grid_thw, then slices, views and permutes its patches).

:mod:`ucutlass.init.segment_loops` answers each ``.item()`` with the problem's own value, follows what is computed
from it, and writes the loop as one gather of rows whose indices the program computes from the integer input on the
device. The programs are checked as ``init`` checks them: the grader's emulated grade against the reference, on the
problem's inputs (and on the grader's unlisted shape, whose source has a row no piece reads).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from shared_data import SHARED_SOL_EXECBENCH

from ucutlass.init import InitError, check_program, init_program
from ucutlass.problem import find_problem

DATA = Path(__file__).resolve().parent / "data" / "init"
L1_020 = "L1_020_vision_patch_merger_spatial_shuffle_mlp"


def test_pieces_cut_by_numbers_read_from_an_input_are_one_gather_that_passes_on_every_workload():
    """tiny_segments: grids of 1 x 2 x 4, 2 x 4 x 6 and 1 x 6 x 4 patches (t up to 2, not square), windows taken
    w-major (a permutation other than L1_020's); the program reads grid_thw's columns, not the captured numbers."""
    problem = find_problem(str(DATA / "tiny_segments"))
    result = init_program(problem)
    text = result.text
    assert result.flop_share == 1.0 and len(result.partition.kernels) == 1
    assert "grid_thw[:, 0]" in text and "grid_thw[:, 2] // 2" not in text.replace("select_", "")  # columns read
    assert "torch.repeat_interleave(" in text and "output_size=num_merged_patches * 4)" in text
    assert "torch.index_select(" in text and ".item()" not in text
    assert re.search(r"  # lines 17-25: the loop over grid_thw's rows, .*\n  # .*then index_select\n", text)
    from ucutlass.grader.supervised import grade_in_child
    from ucutlass.lang import parse
    from ucutlass.solution import emulated_solution

    program = parse(text, "segments.ucut")
    solution = emulated_solution(program.source, "segments.ucut", None, "segments (emulated)",
                                 pipeline=program.pipelines[0].name)
    results = grade_in_child(problem, solution, list(problem.workloads), timed=False)
    assert [r.status.value for r in results] == ["PASSED"] * 3, [r.reason for r in results]
    assert check_program(text, problem) == (True, "PASSED")


def test_a_number_read_by_a_branch_refuses_the_fold_and_the_first_message_stays():
    """tiny_segment_branch: ``if t > 1:`` picks a branch for the data; init reports the ``.item()`` as before."""
    with pytest.raises(InitError, match=r"line 17: data-dependent control flow.*\.item\(\)"):
        init_program(find_problem(str(DATA / "tiny_segment_branch")))


def test_tracked_numbers_follow_arithmetic_and_report_any_other_use():
    from ucutlass.init.segment_loops import SegmentMode, SegmentRefused
    from ucutlass.init.tracked import Tracked

    mode = SegmentMode({})
    t = Tracked(3, lambda env: env["t"], mode)
    h = Tracked(8, lambda env: env["h"], mode)
    n = 1 + t * h // 2 - 1 % 5
    assert n.value == 12 and n.form({"t": 5, "h": 4}) == 10
    assert not mode.escaped
    if t > 1:  # a branch on the data, and a count (an int subclass would pass range() unseen)
        pass
    list(range(t))
    with pytest.raises(SegmentRefused, match=r"compared \(>\)"):
        mode.check()
    assert mode.escaped == ["compared (>)", "used as an index or a count (range(), a Python sequence)"]


def test_l1_020_gets_a_program_that_passes_emulated():
    """The real problem: its spatial shuffle is the gather, its two linears kernels (GELU in fc1's epilogue)."""
    if not (SHARED_SOL_EXECBENCH / L1_020).is_dir():
        pytest.skip(f"{L1_020} not found beside this clone")
    problem = find_problem(str(SHARED_SOL_EXECBENCH / L1_020))
    result = init_program(problem)
    assert result.flop_share == 1.0 and len(result.partition.kernels) == 2
    assert "torch.repeat_interleave(mul_3, output_size=num_merged_patches * 4)" in result.text
    assert check_program(result.text, problem) == (True, "PASSED")


def test_init_on_l1_020_from_the_command_line(tmp_path, capsys):
    from ucutlass.cli import main

    if not (SHARED_SOL_EXECBENCH / L1_020).is_dir():
        pytest.skip(f"{L1_020} not found beside this clone")
    out = tmp_path / "l1_020.ucut"
    assert main(["init", str(SHARED_SOL_EXECBENCH / L1_020), "-o", str(out), "--no-check"]) == 0
    assert "2 kernel(s)" in capsys.readouterr().err and out.read_text().count("kernel gemm") == 2


def test_grade_lists_only_the_kernel_steps_of_a_long_pipeline(tmp_path, capsys):
    """tiny_segments' program has 49 steps: grade lists the kernel call and says where the rest are listed."""
    from ucutlass.cli import main

    problem = str(DATA / "tiny_segments")
    out = tmp_path / "segments.ucut"
    out.write_text(init_program(find_problem(problem)).text)
    assert main(["grade", str(out), problem, "--emulate", "--no-timing", "--workload", "1"]) == 0
    err = capsys.readouterr().err
    listing = err.split("steps):\n", 1)[1].split("emulating pipeline", 1)[0].splitlines()
    assert len(listing) == 3 and "= gemm0(" in listing[0] and listing[1] == "  return output"
    assert f"`ucutlass check {out} --problem tiny_segments` lists all" in listing[2]
