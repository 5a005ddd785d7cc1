"""The worker data plane: executing one claimed command (claim, run its tool or pipeline,
close it, orchestrate in place). The control plane (the Engine facade, orchestration
passes, reaper, schedules, reads) is noetl_celery.engine."""
