"""multihome lab: network-namespace topologies, end-to-end tests, benchmarks and the demo."""
