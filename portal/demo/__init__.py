"""The demo: a simulated 8-node cluster on this host (`kiln demo`, `make up`), its facility service
wiring and a complete demo certificate. The one part of the portal that uses the simulator (testbed/):
installed only where the simulator is (settings.KILN_DEMO), so a production image carries neither."""
