"""burn_in: gpu_burn under the probe's sampling mode, judged on compute results, telemetry and node power; and
the gpu_burn output reader."""
