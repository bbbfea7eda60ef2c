"""Filesystem checks: throughput (fio; IOR and elbencho parse-only) and small-file metadata (mdtest), one node
and all nodes at once."""
