"""topology: where each GPU's nearest NIC sits on the PCIe tree (nvidia-smi topo -m)."""
