"""``ucutlass mcp`` on a GPU (issue 18): a real grade through the MCP server — the program compiled by nvcc, run
in the grader's isolated workers, timed against the reference with T_SOL and a SOL score — validated against
feedback-v1.json, with progress reported while it compiles."""

from __future__ import annotations

import anyio
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("mcp")

PROBLEM = "qkv_proj_bias_qwen2_5_7b"
PROGRAM = """
kernel qkv : gemm {
  a : bf16[M, K] row <- hidden_states
  b : bf16[N, K] row <- qkv_weight
  d : bf16[M, N] row -> qkv
  tile = 128x256x64   cluster = 2x1x1   schedule = cooperative
  epilogue { bias : bf16[N] <- qkv_bias   d = acc + bias }
}
"""


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_mcp_grade_on_the_gpu(tmp_path):
    from mcp import Client

    from ucutlass.agents import validate
    from ucutlass.agents.server import create_server

    progress = []

    async def on_progress(done, total, message):
        progress.append(done)

    async def main():
        async with Client(create_server(root=str(tmp_path), timeout_s=540)) as client:
            r = await client.call_tool("grade", {"program": PROGRAM, "problem": PROBLEM, "workloads": 4},
                                       progress_callback=on_progress, read_timeout_seconds=560)
            assert not r.is_error, r.content
            return validate(r.structured_content)

    doc = anyio.run(main)
    assert doc["ok"] and not doc["emulated"], doc["error"] or [r["evaluation"]["reason"] for r in doc["records"]]
    assert doc["summary"]["passed"] == 4 and doc["summary"]["mean_sol_score"] is not None
    for record in doc["records"]:
        perf = record["evaluation"]["performance"]
        assert perf["t_sol_ms"] > 0 and perf["latency_ms"] >= perf["t_sol_ms"] and 0 <= perf["sol_score"] <= 1
    assert progress  # nvcc takes a minute or more: the client heard from the server meanwhile
