"""Benchmarks: each prints figures and ratios against a peer measured in the same run."""
