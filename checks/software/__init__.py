"""Software checks: sw_consistency (driver, CUDA, firmware and the cluster stack against peers) and
slurm_container (Slurm + pyxis + enroot)."""
