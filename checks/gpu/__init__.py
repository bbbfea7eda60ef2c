"""Per-GPU checks: inventory, ECC, PCIe and NVLink links, DCGM diagnostics, Xid events, the GPU configuration,
host bandwidth; and their readers of nvidia-smi, lspci and nvbandwidth outputs."""
