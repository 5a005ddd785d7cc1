"""The compat kit's runner (`../shared/compat/run.py`, loaded as it is, never edited) with
one thing added: after each case that ran on the kit's shared test API, a line with what
that API answered on its rate-limited routes (`/api/v1/patient/*`), and, when the server
runs with `--rate-limit R`, the case's CLI time against the rate bound (answered ÷ R):
the issue-15 target for `pft_flow_full` at `--rate-limit 300` is <= 1.15x.

    python -m bench.compat_kit <run.py's arguments>     # what bench.compat runs

The counts are the server's own (`GET /api/v1/stats`, reset by the kit before each
case's run), so requests the engine retried after a 429 count once per answer.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from typing import Any

from bench.harness import COMPAT_KIT

RATE_LIMITED = "/api/v1/patient/"


def rate_limit_of(server_args: str) -> int:
    """R of `--rate-limit R` (or `--rate-limit=R`) in the kit's --server-args; 0: none."""
    match = re.search(r"--rate-limit[= ](\d+)", server_args or "")
    return int(match.group(1)) if match else 0


def answered(stats: dict[str, Any]) -> tuple[int, int]:
    """(200 answers, 429 answers) of the rate-limited routes in a stats document."""
    ok = limited = 0
    for route, entry in stats.get("routes", {}).items():
        if route.startswith(RATE_LIMITED):
            ok += int(entry.get("status", {}).get("200", 0))
            limited += int(entry.get("status", {}).get("429", 0))
    return ok, limited


def report(record: dict[str, Any], stats: dict[str, Any], rate: int) -> str:
    ok, limited = answered(stats)
    line = f"    api: {ok:,} answered 200 on {RATE_LIMITED}*, {limited:,} answered 429"
    seconds = record.get("cli_seconds")
    if rate and ok and seconds:
        bound = ok / rate
        line += (
            f"; CLI {seconds:.1f} s vs rate bound {bound:.1f} s ({ok:,} / {rate}/s) "
            f"= {seconds / bound:.2f}x"
        )
    return line


def main(argv: list[str]) -> int:
    spec = importlib.util.spec_from_file_location("noetl_compat_run", COMPAT_KIT)
    if spec is None or spec.loader is None:
        print(f"compat kit not loadable from {COMPAT_KIT}", file=sys.stderr)
        return 2
    kit = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = kit
    spec.loader.exec_module(kit)
    run_case = kit.Runner.run_case

    def run_and_report(self: Any, case: dict[str, Any]) -> dict[str, Any]:
        record: dict[str, Any] = run_case(self, case)
        if not case.get("server_args"):  # a case's own server is gone by now
            try:
                stats = self.shared_server.stats()
            except OSError as exc:
                print(f"    api: stats not read ({exc})", file=sys.stderr, flush=True)
            else:
                rate = rate_limit_of(self.args.server_args)
                print(report(record, stats, rate), file=sys.stderr, flush=True)
        return record

    kit.Runner.run_case = run_and_report
    return int(kit.main(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
