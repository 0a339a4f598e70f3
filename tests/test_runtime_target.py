"""A kernel runs only on the GPU architecture it was built for: sm100 kernels compile here (no GPU needed)
but the runtime, the grader's loader and ``ucutlass grade`` refuse them on an H200 before any launch.
CPU tests: torch.cuda's answers are monkeypatched; tests/test_runtime_gpu.py checks the real H200."""

from __future__ import annotations

from pathlib import Path

import pytest

from ucutlass import runtime
from ucutlass.cli import main
from ucutlass.errors import KernelRuntimeError
from ucutlass.ir import Target

torch = pytest.importorskip("torch")
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def gpu(monkeypatch):
    """Pretend torch sees one GPU; set its capability and name with ``gpu(9, 0, "NVIDIA H200")``."""
    def set_gpu(major: int, minor: int, name: str) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (major, minor))
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    return set_gpu


def test_an_sm100_kernel_on_an_h200_is_refused_with_the_reason(gpu):
    gpu(9, 0, "NVIDIA H200")
    assert runtime.device_mismatch(Target.sm90) is None
    msg = "kernel built for sm100 (Blackwell, sm_100a); this GPU is sm_90 (NVIDIA H200): compile only here"
    assert runtime.device_mismatch(Target.sm100) == msg
    with pytest.raises(KernelRuntimeError) as e:
        runtime.check_device(Target.sm100)
    assert str(e.value) == msg


def test_an_sm90_kernel_on_a_b200_is_refused_too(gpu):
    gpu(10, 0, "NVIDIA B200")
    runtime.check_device(Target.sm100)
    assert runtime.device_mismatch(Target.sm90) == ("kernel built for sm90 (Hopper, sm_90a); this GPU is sm_100 "
                                                   "(NVIDIA B200): compile only here")


def test_arch_specific_code_needs_the_exact_capability(gpu):
    gpu(10, 3, "NVIDIA B300")  # sm_100a code does not run on compute capability 10.3
    assert "this GPU is sm_103 (NVIDIA B300)" in runtime.device_mismatch(Target.sm100)


SM100_SPEC = (REPO / "problems" / "o_proj_residual_llama3_1_8b" / "kernel.ucut").read_text()
for old, new in [("target = sm90", "target = sm100"),
                 ("{64x128x64, 128x128x64, 128x256x64, 256x128x64, 128x16x128, 128x32x128}", "256x128x64"),
                 ("{false, true}", "false"),
                 ("{1x1x1, 2x1x1}", "2x1x1"), ("{cooperative, pingpong}", "warpspecialized_2sm"),
                 ("{persistent, stream_k}", "persistent"), ("{1, 2, 4, 8}", "1")]:
    assert old in SM100_SPEC
    SM100_SPEC = SM100_SPEC.replace(old, new)


def test_the_grader_loader_refuses_before_loading(gpu):
    gpu(9, 0, "NVIDIA H200")
    payload = {"so_path": "/nonexistent/kernel.so", "source": SM100_SPEC, "file": "o_proj.ucut", "kernel": None}
    with pytest.raises(KernelRuntimeError, match=r"built for sm100 .*this GPU is sm_90 \(NVIDIA H200\)"):
        runtime.load_solution(payload, problem=None)


def test_grade_refuses_before_compiling(gpu, capsys, tmp_path, monkeypatch):
    import ucutlass.build

    gpu(9, 0, "NVIDIA H200")
    monkeypatch.setattr(ucutlass.build, "build_kernels", lambda *a, **k: pytest.fail("compiled an sm100 kernel"))
    spec = tmp_path / "o_proj_sm100.ucut"
    spec.write_text(SM100_SPEC)
    rc = main(["grade", str(spec), "o_proj_residual_llama3_1_8b"])
    _, err = capsys.readouterr()
    assert rc == 1
    assert "error: kernel built for sm100 (Blackwell, sm_100a); this GPU is sm_90 (NVIDIA H200): compile only here" \
        in err


def test_compile_emits_sm100_without_a_gpu(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    spec = tmp_path / "o_proj_sm100.ucut"
    spec.write_text(SM100_SPEC)
    assert main(["compile", str(spec), "--emit-only", "-o", str(tmp_path)]) == 0
    (cu,) = tmp_path.glob("*.cu")
    assert "KernelTmaWarpSpecialized2SmSm100" in cu.read_text() and "Sm90SrcFetch" in cu.read_text()
