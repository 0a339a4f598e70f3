"""The commands for LLM agents: ``ucutlass prompt``, ``ucutlass mcp`` and ``ucutlass campaign``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import UcutError
from .common import sol_timeout


def cmd_prompt(args) -> int:
    """``ucutlass prompt PROBLEM``: a task prompt for an LLM agent (its token count on stderr)."""
    from ..agents.prompt import ENCODING, build_prompt
    from ..problem import find_problem

    problem = find_problem(args.problem, args.problems)
    if args.max_tokens is not None and args.max_tokens < 1:
        raise UcutError(f"--max-tokens must be a positive number, got {args.max_tokens}")
    study = args.study
    if study is None and (Path("ucutlass-tune") / problem.id / "results.json").is_file():
        study = Path("ucutlass-tune") / problem.id
    prompt = build_prompt(problem, max_tokens=args.max_tokens, gpu=args.gpu, study=study, sol=not args.no_sol,
                          timeout_s=sol_timeout(args))
    print(prompt.text, end="")
    print(f"prompt: {prompt.tokens} tokens (tiktoken {ENCODING.replace('_offline', '')}, offline)"
          + (f"; dropped to fit --max-tokens {args.max_tokens}: {', '.join(prompt.dropped)}" if prompt.dropped
             else ""), file=sys.stderr)
    return 0


def cmd_mcp(args) -> int:
    """``ucutlass mcp``: the MCP server over stdio."""
    from ..agents.server import serve

    serve(problems=args.problems, timeout_s=args.timeout)
    return 0


def cmd_campaign(args) -> int:
    """``ucutlass campaign PROBLEM…``: a budget spent over several problems (or ``--replay``)."""
    from ..agents.campaign import (Campaign, CampaignConfig, format_replay, format_table, load_records,
                                  replay_campaigns)

    if args.replay:
        if args.problems_ids:
            raise UcutError("--replay reads the problems from the records; leave out the problem names")
        rules = []
        for r in args.rule or ([f"{args.epsilon if args.epsilon is not None else 0.25}:{args.window or 12}"]):
            eps, _, w = r.partition(":")
            try:
                rules.append((float(eps), int(w)))
            except ValueError:
                raise UcutError(f"--rule {r!r}: expected EPS:W, e.g. 0.25:12")
        try:
            tunes = load_records(args.replay)
            rows = replay_campaigns(tunes, rules, budget=args.budget, probe=args.probe)
        except (OSError, ValueError) as e:
            raise UcutError(str(e))
        print(f"{len(tunes)} recorded tunes, {sum(len(t.values) for t in tunes)} recorded trials; budget "
              f"{rows[0]['results']['budget']}")
        print(format_replay(rows))
        for r in rows:
            print(f"\n{r['policy']}:\n{format_table(r['results'])}")
        if args.out:
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / "replay.json").write_text(json.dumps(rows, indent=2))
            print(f"\nreplay: {out / 'replay.json'}")
        return 0
    if not args.problems_ids:
        raise UcutError("name the problems of the campaign (or give --replay RECORDS)")
    if args.budget is None:
        raise UcutError("--budget N is required: the attempts to spend over every problem")
    from ..problem import find_problem

    ids = [find_problem(p, args.problems).id for p in args.problems_ids]  # an unknown name fails here, at once
    try:
        config = CampaignConfig(args.budget, epsilon=args.epsilon, window=args.window, spread=args.spread,
                                probe=args.probe)
    except ValueError as e:
        raise UcutError(str(e))
    out = Path(args.out)
    from ..agents.campaign_runners import (POLICIES, AgentRunner, TunerRunner, cli_grade, cli_tools,
                                          cli_tune)

    if args.policy == "tuner":
        if args.emulate:
            raise UcutError("--emulate grades an agent's programs as torch ops; the tuner measures on the GPU")
        runner = TunerRunner(out, cli_tune(args.problems, gpu=args.gpu, max_workloads=args.max_workloads,
                                           extra=args.tune_arg),
                             config.epsilon, config.window, grade=cli_grade(args.problems, gpu=args.gpu))
    else:
        runner = AgentRunner(POLICIES[args.policy], cli_tools(args.problems, emulate=args.emulate,
                                                              workloads=args.workloads, gpu=args.gpu),
                             config.epsilon)
    try:
        results = Campaign(ids, runner, config, out, log=lambda s: print(s, file=sys.stderr)).run()
    except ValueError as e:
        raise UcutError(str(e))
    print(format_table(results))
    print(f"\ntable: {out / 'table.txt'}\nresults: {out / 'results.json'}\nstate: {out / 'state.json'} "
          "(the same command again resumes)")
    from ..agents.campaign import FAILED

    failed = [r for r in results["problems"] if r["stop_reason"].startswith(FAILED)]
    for r in failed:
        print(f"error: {r['problem']}: {r['stop_reason']}", file=sys.stderr)
    return 1 if len(failed) == len(results["problems"]) else 0
