"""``ucutlass mcp`` (issue 18): the MCP server, driven by the official SDK's own client, in process and over stdio:
tools listed, check (good and bad programs), sol, an emulated grade, bad input, a call past its time limit, the
card resource and progress reports. Every feedback document validates against feedback-v1.json."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

mcp = pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters  # noqa: E402

from ucutlass.agents import validate  # noqa: E402
from ucutlass.agents.server import MAX_PROGRAM_CHARS, create_server  # noqa: E402
from ucutlass.problem import find_problem  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PROBLEM = "qkv_proj_bias_qwen2_5_7b"
GOOD = """
kernel qkv : gemm {
  a : bf16[M, K] row <- hidden_states
  b : bf16[N, K] row <- qkv_weight
  d : bf16[M, N] row -> qkv
  tile = 128x128x64   schedule = cooperative
  epilogue { bias : bf16[N] <- qkv_bias   d = acc + bias }
}
"""
BAD = GOOD.replace("schedule = cooperative", "schedule = coperative")
TOOLS = {"problem", "sol", "prompt", "card", "check", "compile", "grade", "tune", "best"}


def result(r) -> dict:
    assert not r.is_error, r.content
    return r.structured_content


def test_tools_in_process(tmp_path):
    async def main():
        progress = []

        async def on_progress(done, total, message):
            progress.append((done, total, message))

        async with Client(create_server(root=str(tmp_path))) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert names == TOOLS
            card = (await client.read_resource("ucutlass://card")).contents[0].text
            assert card.startswith("# The `.ucut` language") and "## Rules (sm90)" in card
            part = result(await client.call_tool("card", {"sections": ["Attention"]}))
            assert part["ok"] and part["text"].startswith("## Attention") and part["text"] in card
            wrong = result(await client.call_tool("card", {"sections": ["Atention"]}))
            assert not wrong["ok"] and "Attention" in wrong["error"]
            none = result(await client.call_tool("best", {"problem": PROBLEM}))
            assert not none["ok"] and "no tune results" in none["error"]

            good = validate(result(await client.call_tool("check", {"program": GOOD, "problem": PROBLEM})))
            assert good["ok"] and good["kernels"][0]["legal_combinations"] == 1
            bad = validate(result(await client.call_tool("check", {"program": BAD})))
            assert not bad["ok"]
            diag = bad["diagnostics"][0]
            assert (diag["code"], diag["line"]) == ("bad-value", 6) and "cooperative" in diag["valid"]

            info = result(await client.call_tool("problem", {"problem": PROBLEM}))
            assert info["ok"] and len(info["workloads"]) == len(find_problem(PROBLEM).workloads)
            assert "kernel qkv_proj : gemm" in info["kernel_ucut"]
            unknown = result(await client.call_tool("problem", {"problem": "no_such_problem"}))
            assert not unknown["ok"] and PROBLEM in unknown["error"]  # the message lists the known ids

            sol = result(await client.call_tool("sol", {"problem": PROBLEM}))
            assert sol["ok"] and len(sol["workloads"]) == len(info["workloads"])
            assert all(w["t_sol_ms"] > 0 for w in sol["workloads"])

            graded = validate(result(await client.call_tool(
                "grade", {"program": GOOD, "problem": PROBLEM, "emulate": True, "workloads": 1},
                progress_callback=on_progress)))
            assert graded["ok"] and graded["emulated"] and graded["summary"]["passed"] == 1
            assert graded["records"][0]["evaluation"]["status"] == "PASSED"
            assert progress and all(total > 0 for _, total, _ in progress)  # a grade takes seconds: reported

            emitted = validate(result(await client.call_tool("compile", {"program": GOOD, "emit_only": True})))
            source = Path(emitted["kernels"][0]["source_path"])
            assert emitted["ok"] and source.is_file() and source.is_relative_to(tmp_path)
            huge = validate(result(await client.call_tool("check", {"program": "#" * (MAX_PROGRAM_CHARS + 1)})))
            assert not huge["ok"] and "at most" in huge["error"]
            wrong = validate(result(await client.call_tool("grade", {"program": GOOD, "problem": "no_such_problem",
                                                                     "emulate": True})))
            assert not wrong["ok"] and "no problem" in wrong["error"]
            missing = await client.call_tool("check", {})  # a required argument missing: the SDK's error
            assert missing.is_error

    anyio.run(main)


def test_a_call_past_its_limit_is_killed(tmp_path):
    async def main():
        async with Client(create_server(timeout_s=1.5, root=str(tmp_path))) as client:
            start = anyio.current_time()
            doc = validate(result(await client.call_tool("grade", {"program": GOOD, "problem": PROBLEM,
                                                                   "emulate": True})))
            assert not doc["ok"] and "ran past 1.5 s" in doc["error"]
            assert anyio.current_time() - start < 10
            again = result(await client.call_tool("problem", {"problem": PROBLEM}))  # the server still answers
            assert again["ok"]

    anyio.run(main)


def test_stdio_server(tmp_path):
    params = StdioServerParameters(command=sys.executable, args=["-m", "ucutlass.cli", "mcp", "--timeout", "120"],
                                   cwd=str(tmp_path))

    async def main():
        async with Client(params) as client:
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
            bad = validate(result(await client.call_tool("check", {"program": BAD})))
            assert bad["diagnostics"][0]["code"] == "bad-value"

    anyio.run(main)
