"""The compute fabric: ib_ports (ibstat) and rdma_bw (perftest rail by rail), with its plan and judgement."""
