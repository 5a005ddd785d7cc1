"""The worker data plane: executing one claimed command (claim, run its tool or pipeline,
close it, orchestrate in place). The pass it runs in place is noetl_celery.passes, below
it; the control plane (the Engine facade, reaper, schedules, reads) is noetl_celery.engine,
above it."""
