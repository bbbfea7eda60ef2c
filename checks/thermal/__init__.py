"""dlc_temperature: GPU and HBM temperatures idle and under load, and the BMC's coolant and leak sensors."""
