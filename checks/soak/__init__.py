"""power_soak: the whole-cluster heat soak, its samples, its judgement, branch circuits and the facility physics
it judges against."""
