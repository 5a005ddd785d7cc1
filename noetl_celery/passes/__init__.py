"""The pass machinery, run in place by a worker after a close and by the engine's façade: the
orchestration pass (`orchestrate`) and its recorder, how its commands reach workers
(`dispatch`), ending an execution tree (`termination`), a rerun's start inputs (`rerun`),
the retry of an interrupted transaction (`retry`), the playbook cache, `script:` files,
the command log sink and execution ids. Below both `worker` and `engine`, so neither
imports the other's way back (docs/design.md §5)."""
