"""gpu_power_limit, and the readers of node and facility power from the BMC (ipmitool) and Redfish."""
