"""A cursor drain with `frame.process: frame` whose claims no worker runs: a test claims
its commands and records their frames by hand (store tests of worker.frames' writes)."""

FRAMES = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: frames_by_hand, path: tests/frames_by_hand}
workflow:
  - step: drain
    loop:
      cursor: {kind: sqlite, auth: unused.sqlite3, claim: "SELECT 1"}
      iterator: job
      spec: {mode: cursor, max_in_flight: 1, frame: {max_rows: 3, process: frame}}
    tool: {kind: noop}
"""
