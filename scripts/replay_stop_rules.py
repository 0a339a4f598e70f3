"""Stop rules replayed on recorded tunes (issue 18): for each (ε, w) rule, the trials it would have spent over the
given tunes' results.json and the geomean best speedup it would have kept, against spending every recorded trial.
No GPU: the trials were measured by the tunes.

Usage: python3 scripts/replay_stop_rules.py TUNE_DIR [TUNE_DIR ...] [--policy EPS:W ...] [--json OUT.json]
    (TUNE_DIR: a tune's output folder, e.g. ucutlass-tune/PROBLEM; default policies 0.25:12, 1:12, 2.5:16, 1:4)
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from ucutlass.agents.replay import RecordedTune, compare, format_comparison


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tunes", nargs="+", metavar="TUNE_DIR")
    ap.add_argument("--policy", action="append", metavar="EPS:W", help="a stop rule (repeatable)")
    ap.add_argument("--json", metavar="OUT", help="also write every replay as JSON")
    args = ap.parse_args(argv)
    policies = []
    for p in args.policy or ["0.25:12", "1:12", "2.5:16", "1:4"]:
        eps, _, w = p.partition(":")
        try:
            policies.append((float(eps), int(w)))
        except ValueError:
            ap.error(f"--policy {p!r}: expected EPS:W, e.g. 0.25:12")
    tunes = []
    for d in args.tunes:
        try:
            tunes.append(RecordedTune.from_results(d))
        except (OSError, ValueError) as e:
            print(f"skipped {d}: {e}", file=sys.stderr)
    if not tunes:
        print("no tune to replay", file=sys.stderr)
        return 1
    rows = compare(tunes, policies)
    print(f"{len(tunes)} tunes, {sum(len(t.values) for t in tunes)} recorded trials")
    print(format_comparison(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{**r, "replays": [asdict(x) for x in r["replays"]]} for r in rows], f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
