"""The engine that executes runs (the run pages, models and the services they call are the runs
app's): the Celery run tasks, one node's checks, a group's, fan-out to facility endpoints, and the
reaper with its threads."""
