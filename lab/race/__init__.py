"""The racing gateway's lab: topology, origin server, fetch workload, evaluator, benchmark."""
