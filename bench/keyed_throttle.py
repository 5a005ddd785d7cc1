"""Keyed throttling against a multi-tenant API (issue 35 item 1's done-when).

Three tenants, each with its own real limit enforced by the API (a token bucket per
tenant: 429 + Retry-After beyond it, tests/support/tenant_api.py); a playbook loop over
a tenant's items (one execution per tenant, all at once), its http tool under
`rate_limit: {key: <tenant>, per_second: <declared>, concurrency: 2}`. Tenant `c`'s
declared rate is above its real one: the 429s must teach the key its real rate. Two
`noetl-celery worker` processes on Postgres and Redis share the keys' schedules and run
slots.

    python -m bench.keyed_throttle [--seconds 150] [--one-loop rate|even]

`--one-loop rate|even` runs the tenants' items as ONE loop instead (one execution, the
items interleaved in proportion to the tenants' real rates, or one of each in turn): what
a loop mixing keys of different limits gets while its window counts the items parked
for their key's turn.

Prints per tenant, all measured by the API (server side): its real limit, the declared
rate, the accepted rate after the first minute (the median over 5-second windows while
the tenant still had items waiting), the 429s after the first minute, the most of its
requests in flight at once, and whether every item was accepted exactly once.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench import harness
from bench.fleet import engine_for, fleet_env
from tests.support.tenant_api import serving, windowed_rates

# tenant: (real limit per second, the server's burst, declared per_second)
TENANTS = {"a": (4.0, 2.0, 4.0), "b": (8.0, 2.0, 8.0), "c": (3.0, 2.0, 6.0)}
LEARN_SECONDS = 60.0  # "after the first minute"
WINDOW = 5.0
HOLD = 0.05  # the API's time per accepted request (what makes concurrency measurable)

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: bench_keyed_throttle, path: bench/keyed_throttle}
workload: {api: "", items: [], hold: 0}
workflow:
  - step: fetch
    loop: {in: "{{ items }}", iterator: it, spec: {mode: parallel, max_in_flight: 20}}
    tool:
      kind: http
      url: "{{ api }}/t/{{ iter.it.t }}/items/{{ iter.it.n }}"
      params: {hold: "{{ hold }}"}
      rate_limit:
        key: "bench-{{ iter.it.t }}"
        per_second: "{{ iter.it.declared }}"
        concurrency: 2
      spec:
        policy:
          rules:
            - when: "{{ output.status == 'error' }}"
              then: {do: retry, attempts: 100, delay: 0.5}
"""


def items_for(seconds: float) -> dict[str, list[dict[str, Any]]]:
    """Per tenant, enough items to keep it busy for `seconds` at its real limit."""
    return {
        tenant: [{"t": tenant, "n": n, "declared": declared} for n in range(int(real * seconds))]
        for tenant, (real, _, declared) in TENANTS.items()
    }


def report(
    stats: dict[str, Any], items: dict[str, list[dict[str, Any]]], started: float, learn: float
) -> bool:
    ok = True
    header = (
        f"{'tenant':>6} {'real/s':>7} {'declared/s':>10} {'measured/s':>10} {'error':>6} "
        f"{'429s late':>9} {'max in flight':>13} {'items once':>10}"
    )
    print(header)
    for tenant, (real, _, declared) in TENANTS.items():
        seen = stats[tenant]
        accepted = sorted(seen["accepted"])
        # the windows after the first minute while the tenant still had items waiting
        # (its last accepted request ends them: the tail of a drain is demand, not rate)
        rates = windowed_rates(accepted, started + learn, accepted[-1], WINDOW)
        measured = statistics.median(rates) if rates else float("nan")
        error = (measured - real) / real
        late_429 = sum(t >= started + learn for t in seen["refused"])
        expected = {str(i["n"]) for i in items[tenant]}
        once = set(seen["items"]) == expected and set(seen["items"].values()) == {1}
        ok = ok and abs(error) <= 0.10 and seen["max_in_flight"] <= 2 and once
        print(
            f"{tenant:>6} {real:>7g} {declared:>10g} {measured:>10.2f} {error:>+6.1%} "
            f"{late_429:>9} {seen['max_in_flight']:>13} {once!s:>10}"
        )
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=150.0, help="how long the drain runs")
    parser.add_argument(
        "--learn", type=float, default=LEARN_SECONDS, help="seconds left out of the measure"
    )
    parser.add_argument(
        "--one-loop",
        choices=["rate", "even"],
        help="one loop over every tenant's items, interleaved in proportion to the "
        "tenants' real rates (rate) or one of each in turn (even)",
    )
    args = parser.parse_args()
    url = harness.fresh_database("bench_keyed_throttle")
    broker = harness.REDIS_URL
    harness.flush_redis()
    env = fleet_env(url, broker)
    items = items_for(args.seconds)
    limits = {t: (real, burst) for t, (real, burst, _) in TENANTS.items()}
    logs = Path(tempfile.mkdtemp(prefix="bench-keyed-"))
    with ExitStack() as stack:
        api = stack.enter_context(serving(limits))
        for name in ("k1", "k2"):
            cmd = [
                harness.python(),
                "-m",
                "noetl_celery.cli.main",
                "worker",
                *harness.POOLS["threads"],
                "-l",
                "INFO",
                "--without-heartbeat",
                "-n",
                f"{name}@%h",
            ]
            stack.enter_context(harness.worker(cmd, env, logs / f"{name}.log"))
        engine = stack.enter_context(engine_for(url, broker))
        total = sum(len(v) for v in items.values())
        print(f"{total} items over 3 tenants, ~{args.seconds:g}s; worker logs in {logs}")
        started = time.time()
        # a drain per tenant (one execution each, all at once): a loop's in-flight window
        # counts its parked items, so one loop mixing tenants would run at the pace of
        # its slowest one (docs/reference/dsl.md, rate_limit)
        if args.one_loop:  # interleaved: by the tenants' rates, or one of each in turn

            def place(i: dict[str, Any]) -> tuple[float, str]:
                return (i["n"] / TENANTS[i["t"]][0] if args.one_loop == "rate" else i["n"], i["t"])

            mixed = sorted((i for its in items.values() for i in its), key=place)
            one = engine.start_text(PLAYBOOK, {"api": api.base, "items": mixed, "hold": HOLD})
            eids = {"all": one}
        else:
            eids = {
                tenant: engine.start_text(PLAYBOOK, {"api": api.base, "items": its, "hold": HOLD})
                for tenant, its in items.items()
            }
        ok = True
        for tenant, eid in eids.items():
            row = engine.wait(eid, timeout=args.seconds * 4 + 300)
            summary = engine.summary(eid)["steps"]["fetch"]["stats"]
            took = time.time() - started
            print(f"tenant {tenant}: execution {row.status} after {took:.0f}s: {summary}")
            ok = ok and row.status == "COMPLETED"
        ok = report(api.stats(), items, started, args.learn) and ok
    print("done-when met" if ok else "done-when NOT met")


if __name__ == "__main__":
    main()
