"""After handover: node health state, scheduled sweeps, alerts, scheduler hooks, reaper, metrics."""
