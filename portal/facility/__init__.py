"""The facility model: racks, PDUs, feeds, UPSes and cooling loops the power-and-cooling checks judge against."""
