"""NCCL collectives with nccl-tests, one node and across nodes: all-reduce, all-to-all, their params, the output
table reader and the public measurements."""
